"""Issue 13's campaign flips through a real local Spark session: what the in-process harness
(:mod:`tests.integration.campaign_readers`, the source's driver and executor code without a
session) says of a flip is what a DataFrame gives.

Three flips of the campaign's small bucket: a byte in a batch's records (the job fails, and its
failure text carries the typed error naming the object), a byte of a producer snapshot (nothing
reads it: the DataFrame equals the written records), and a manifest that no longer parses (a
hole: the job fails with ``RemoteGapError`` naming the offsets and the manifest; with
``failOnDataLoss=false`` the DataFrame is the written records outside the hole).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.fixtures.extras import require_spark

require_spark()

from pyspark.sql import DataFrame, SparkSession

from gateway.errors import CrcMismatchError, GatewayError, RemoteGapError
from gateway.service.types import IsolationLevel
from gateway.spark.source import TieredKafkaDataSource
from tests.integration.campaign import (
    BATCH_HEADER,
    KINDS,
    Expected,
    Fixture,
    Flip,
    _batch_starts,
    build_fixture,
)
from tests.integration.campaign_readers import (
    check_scrub,
    check_source,
    damaged_copy,
    make_flip,
    segment_objects,
    source_options,
)

TOPIC = "plain.v1-raw"  # no chunk transform: the stored bytes are the segment's own
LOG, INDEXES, MANIFEST = (KINDS.index(k) for k in ("log", "indexes", "rsm-manifest"))


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return build_fixture(tmp_path_factory.mktemp("campaign-spark"))


@pytest.fixture(scope="module")
def tk(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark


@pytest.fixture
def copies(tmp_path: Path) -> Path:
    """Damaged copies go in new folders: a new store URL to every executor's caches."""
    return tmp_path


def _load(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    return spark.read.format("tiered-kafka").options(**options).load()


def _records(df: DataFrame) -> dict[int, list[Expected]]:
    """The DataFrame's rows by partition, by offset, as the oracle spells records."""
    rows = df.selectExpr(
        "partition", "offset", "unix_millis(timestamp) AS ms", "timestampType", "key", "value",
        "headers", "leaderEpoch",
    ).collect()  # fmt: skip
    out: dict[int, list[Expected]] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        headers = tuple((h["key"], h["value"]) for h in r["headers"] or ())
        record = Expected(
            r["offset"], r["ms"], r["timestampType"] == 1, r["key"], r["value"], headers,
            r["leaderEpoch"],
        )  # fmt: skip
        out.setdefault(r["partition"], []).append(record)
    return out


def _job_error(spark: SparkSession, options: dict[str, str]) -> tuple[type[GatewayError], str]:
    """The typed error a failed job reports (Spark passes on the Python traceback)."""
    with pytest.raises(Exception) as info:
        _load(spark, options).count()
    text = str(info.value)
    names = re.findall(r"\b(gateway(?:\.\w+)+)\.(\w+): ", text)
    assert names, text
    module, name = names[-1]
    raised = getattr(importlib.import_module(module), name)
    assert issubclass(raised, GatewayError), text
    assert raised is not GatewayError and raised.code != "internal_error", text
    return raised, text


@pytest.fixture(scope="module")
def flips(fixture: Fixture) -> dict[str, Flip]:
    first = segment_objects(fixture, TOPIC, 0)[0]
    log, indexes = first[LOG], first[INDEXES]
    second_batch = _batch_starts(log.objects.log)[1]
    snapshot = indexes.objects.manifest.segment_indexes.producer_snapshot
    assert snapshot.size > 1
    middle = segment_objects(fixture, TOPIC, 1)[2][MANIFEST]
    return {
        "records": make_flip(fixture, log, second_batch + BATCH_HEADER + 2, 0x01, 1),
        "snapshot": make_flip(fixture, indexes, snapshot.position + 1, 0x80, 2),
        "manifest": make_flip(fixture, middle, 0, 0x01, 3),  # '{' -> 'z': not JSON
    }


def test_a_flipped_record_byte_fails_the_job_with_the_typed_error(
    tk: SparkSession, fixture: Fixture, flips: dict[str, Flip], copies: Path
) -> None:
    flip = flips["records"]
    with damaged_copy(fixture, flip, copies) as folder:
        outcome = check_source(folder, fixture.key_pair_spec, flip, fixture.oracles[TOPIC])
        assert outcome.verdict == "typed_error"
        assert outcome.problems[0].label == "typed:crc_mismatch"
        options = source_options(folder, fixture.key_pair_spec, TOPIC, max_bytes=flip.max_bytes)
        raised, text = _job_error(tk, options)
    assert issubclass(raised, CrcMismatchError), text
    assert f"{flip.key}: " in text  # the .log object itself


def test_a_byte_no_reader_reads_leaves_the_dataframe_as_written(
    tk: SparkSession, fixture: Fixture, flips: dict[str, Flip], copies: Path
) -> None:
    flip = flips["snapshot"]
    oracles = fixture.oracles[TOPIC]
    committed = IsolationLevel.READ_COMMITTED
    with damaged_copy(fixture, flip, copies) as folder:
        outcome = check_source(folder, fixture.key_pair_spec, flip, oracles)
        assert (outcome.verdict, outcome.problems) == ("same", ())
        scrub = check_scrub(folder, fixture.key_pair_spec, flip)
        assert scrub.verdict == "typed_error"  # informational: scrub sees the damage anyway
        options = source_options(
            folder, fixture.key_pair_spec, TOPIC, isolation=committed, max_bytes=flip.max_bytes
        )
        got = _records(_load(tk, options))
    assert got == {o.partition: list(o.committed) for o in oracles}


def test_a_hole_fails_the_job_and_fail_on_data_loss_false_reads_around_it(
    tk: SparkSession, fixture: Fixture, flips: dict[str, Flip], copies: Path
) -> None:
    flip = flips["manifest"]
    oracles = fixture.oracles[TOPIC]
    obj = fixture.object(TOPIC, flip.key)
    meta = obj.objects.manifest.remote_log_segment_metadata
    assert meta is not None
    lo, hi = meta.start_offset, meta.end_offset
    with damaged_copy(fixture, flip, copies) as folder:
        outcome = check_source(folder, fixture.key_pair_spec, flip, oracles)
        assert outcome.verdict == "typed_error"
        assert outcome.problems[0].label == "typed:remote_gap"
        options = source_options(folder, fixture.key_pair_spec, TOPIC, max_bytes=flip.max_bytes)
        raised, text = _job_error(tk, options)
        assert issubclass(raised, RemoteGapError), text
        assert f"holds offsets {lo}..{hi}" in text and flip.key in text
        lossy = source_options(
            folder, fixture.key_pair_spec, TOPIC, max_bytes=flip.max_bytes, fail_on_data_loss=False
        )
        got = _records(_load(tk, lossy))
    want = {
        o.partition: [
            r for r in o.uncommitted if o.partition != obj.partition or not lo <= r.offset <= hi
        ]
        for o in oracles
    }
    assert got == want
