"""The pure parts of streaming (:mod:`gateway.spark.stream`): offsets JSON and admission."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import ConfigurationError
from gateway.spark.options import parse_options
from gateway.spark.read_options import StreamLimits
from gateway.spark.stream import admit, from_json, share, to_json

keys = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5))


@given(st.dictionaries(keys, st.integers(0, 10_000), max_size=12), st.integers(1, 20_000))
def test_share_caps_the_sum_exactly_and_never_passes_a_lag(
    lags: dict[tuple[str, int], int], limit: int
) -> None:
    taken = share(lags, limit)
    assert set(taken) == set(lags)
    assert sum(taken.values()) == min(limit, sum(lags.values()))
    assert all(0 <= taken[k] <= lags[k] for k in lags)


@given(st.dictionaries(keys, st.integers(0, 10**12), max_size=12))
def test_offsets_round_trip_through_sparks_json(offsets: dict[tuple[str, int], int]) -> None:
    assert from_json(to_json(offsets)) == offsets


@pytest.mark.parametrize(
    "bad", [{"t": 5}, {"t": {"x": 1}}, {"t": {"0": -1}}, {"t": {"0": True}}, {"t": {"0": "1"}}]
)
def test_malformed_offsets_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="stream offsets"):
        from_json(bad)


def test_share_starves_no_partition_behind_a_large_one() -> None:
    # Rounded down, the small ones get 0: the remainder goes to them before the large one.
    assert share({("t", 0): 10**6, ("t", 1): 1}, 2) == {("t", 0): 1, ("t", 1): 1}
    assert share({("t", 0): 10**6, ("t", 1): 1}, 5) == {("t", 0): 4, ("t", 1): 1}


def test_admit_waits_for_min_offsets_until_the_delay_passes() -> None:
    start = {("t", 0): 10, ("t", 1): 0}
    latest = {("t", 0): 13, ("t", 1): 1, ("t", 2): 7}  # ("t", 2) is not the batch's: left out
    limits = StreamLimits(min_offsets=10, max_trigger_delay_ms=1000)
    assert admit(start, latest, limits, waited_ms=999) == start
    assert admit(start, latest, limits, waited_ms=1000) == {("t", 0): 13, ("t", 1): 1}
    capped = admit(start, {("t", 0): 110, ("t", 1): 100}, StreamLimits(max_offsets=10), 0)
    assert capped == {("t", 0): 15, ("t", 1): 5}
    behind = admit(start, {("t", 0): 4, ("t", 1): 9}, StreamLimits(), 0)  # never backwards
    assert behind == {("t", 0): 10, ("t", 1): 9}


def test_min_offsets_above_max_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="minOffsetsPerTrigger"):
        parse_options({"store": "file:///b", "topic": "t", "minOffsetsPerTrigger": "9",
                       "maxOffsetsPerTrigger": "5"})  # fmt: skip
