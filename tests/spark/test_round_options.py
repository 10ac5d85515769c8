"""The Iceberg export's gap plans read the read's options with each round's partitions and offset
bounds in their place: built as typed values, they equal what the reader options of that round
(``partitions``, per-partition ``startingOffsets`` / ``endingOffsets`` JSON) parse to. No
SparkSession."""

from __future__ import annotations

import json

from tests.fixtures.extras import require_spark

require_spark()
import pytest

from gateway.spark.iceberg_export import round_options
from gateway.spark.options import parse_options

BOUND_KEYS = ("startingOffsets", "endingOffsets", "startingTimestamp", "partitions")


@pytest.mark.parametrize(
    "given",
    [
        {"startingOffsets": "earliest", "endingOffsets": "latest"},
        {"startingTimestamp": "1700000000000", "endingOffsets": "120", "partitions": "0,1,2"},
        {"startingOffsets": '{"orders":{"1":5}}', "endingOffsets": "latest",
         "isolation.level": "read_committed", "failOnDataLoss": "false"},
    ],
)  # fmt: skip
def test_round_options_equal_the_parsed_round(given: dict[str, str]) -> None:
    options = {"store": "file:///tmp/bucket", "keyPrefix": "t/", "topic": "orders", **given}
    runs = {0: (10, 20), 2: (0, 7), 1: (3, 4)}
    base = {k: v for k, v in options.items() if k not in BOUND_KEYS}
    as_strings = {
        **base,
        "partitions": ",".join(str(p) for p in sorted(runs)),
        "startingOffsets": json.dumps({"orders": {str(p): lo for p, (lo, _) in runs.items()}}),
        "endingOffsets": json.dumps({"orders": {str(p): hi for p, (_, hi) in runs.items()}}),
    }
    assert round_options(parse_options(options), runs) == parse_options(as_strings)
