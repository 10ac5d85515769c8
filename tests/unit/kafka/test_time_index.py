"""Time index: spec §9 golden bytes, §10 sanity checks, lookups against a linear scan."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptIndexError
from gateway.kafka.time_index import (
    ENTRY_SIZE,
    NO_TIMESTAMP,
    TimeIndex,
    TimestampOffset,
    encode_time_index,
)

SETTINGS = settings(max_examples=200, deadline=None)
ZERO_ENTRY = bytes(ENTRY_SIZE)


def raw(*pairs: tuple[int, int]) -> bytes:
    """Entries as (timestamp, relative offset) without any validation."""
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in pairs)


def scan_lookup(entries: list[TimestampOffset], base: int, target: int) -> TimestampOffset:
    """Spec §9: the entry with the largest timestamp <= target (the last such one among equal
    timestamps), else (-1, base)."""
    below = [(e.timestamp, i) for i, e in enumerate(entries) if e.timestamp <= target]
    if not below:
        return TimestampOffset(NO_TIMESTAMP, base)
    return entries[max(below)[1]]


def test_spec_example_bytes() -> None:
    # §9: timestamp 1700000000000, relative offset 5 -> 00 00 01 8B CF E5 68 00 00 00 00 05
    golden = bytes.fromhex("0000018BCFE56800 00000005")
    assert encode_time_index([(1_700_000_000_000, 105)], base_offset=100) == golden
    index = TimeIndex(golden, base_offset=100)
    assert len(index) == 1
    assert index.entry(0) == TimestampOffset(1_700_000_000_000, 105)
    assert index.last_entry() == TimestampOffset(1_700_000_000_000, 105)
    assert index.lookup(1_700_000_000_000) == TimestampOffset(1_700_000_000_000, 105)
    assert index.lookup(1_699_999_999_999) == TimestampOffset(-1, 100)


def test_lookup_rules() -> None:
    index = TimeIndex(encode_time_index([(1000, 110), (2000, 130), (3000, 150)], 100), 100)
    assert index.lookup(-5) == TimestampOffset(-1, 100)
    assert index.lookup(999) == TimestampOffset(-1, 100)
    assert index.lookup(1000) == TimestampOffset(1000, 110)
    assert index.lookup(2999) == TimestampOffset(2000, 130)
    assert index.lookup(2**62) == TimestampOffset(3000, 150)
    assert list(index.entries()) == [(1000, 110), (2000, 130), (3000, 150)]


def test_equal_timestamps_pick_the_last() -> None:
    index = TimeIndex(raw((10, 1), (20, 2), (20, 3), (20, 4), (30, 5)), 0)
    assert index.lookup(20) == TimestampOffset(20, 4)
    assert index.lookup(29) == TimestampOffset(20, 4)
    assert index.lookup(19) == TimestampOffset(10, 1)


def test_empty_index() -> None:
    index = TimeIndex(b"", base_offset=42)
    assert len(index) == 0
    assert index.last_entry() == TimestampOffset(-1, 42)
    assert index.lookup(2**62) == TimestampOffset(-1, 42)


def test_entry_out_of_range() -> None:
    with pytest.raises(IndexError):
        TimeIndex(b"", 0).entry(0)


# --- sanity checks (§10) --------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 11, 13, 20, 25])
def test_length_not_multiple_of_twelve(length: int) -> None:
    with pytest.raises(CorruptIndexError, match="not a multiple of the 12-byte entry size"):
        TimeIndex(bytes(length), 0)


def test_trailing_zero_entries_fail() -> None:
    data = encode_time_index([(1_700_000_000_000, 105), (1_700_000_000_500, 110)], 100)
    with pytest.raises(CorruptIndexError, match="last timestamp 0 is less than its first"):
        TimeIndex(data + ZERO_ENTRY * 2, 100)
    # Without the sanity check the file still reads, zero entries included.
    index = TimeIndex(data + ZERO_ENTRY * 2, 100, check=False)
    assert index.last_entry() == TimestampOffset(0, 100)


def test_trailing_zero_entries_pass_when_all_timestamps_are_not_positive() -> None:
    index = TimeIndex(raw((-5, 0)) + ZERO_ENTRY, 0)
    assert len(index) == 2


def test_last_offset_below_base() -> None:
    with pytest.raises(CorruptIndexError, match="last offset 99 is less than the base offset 100"):
        TimeIndex(raw((5, 0), (6, -1)), 100)


# --- properties -----------------------------------------------------------------------------


@st.composite
def time_indexes(draw: st.DrawFn) -> tuple[int, list[TimestampOffset], list[int]]:
    """(base, entries with possible runs of equal timestamps, target timestamps)."""
    base = draw(st.integers(0, 2**40))
    size = draw(st.one_of(st.integers(0, 12), st.integers(500, 2000)))
    spread = draw(st.sampled_from([8, 5000, 2**62]))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    start = draw(st.integers(-(2**40), 2**41))
    stamps = sorted(start + rnd.randrange(spread) for _ in range(size))
    offsets = sorted(base + rnd.randrange(2**31) for _ in range(size))
    entries = [TimestampOffset(t, o) for t, o in zip(stamps, offsets, strict=True)]
    near = [e.timestamp + d for e in entries[:: max(1, size // 25)] for d in (-1, 0, 1)]
    targets = (
        near
        + [start - 1, start + spread]
        + [start + rnd.randrange(-3, spread + 3) for _ in range(20)]
    )
    return base, entries, targets


@SETTINGS
@given(time_indexes())
def test_round_trip_and_lookup_match_linear_scan(
    case: tuple[int, list[TimestampOffset], list[int]],
) -> None:
    base, entries, targets = case
    index = TimeIndex(encode_time_index(entries, base), base)
    assert len(index) == len(entries)
    assert list(index.entries()) == entries
    if entries:
        assert index.last_entry() == entries[-1]
    for target in targets:
        assert index.lookup(target) == scan_lookup(entries, base, target), target


@SETTINGS
@given(st.binary(max_size=300), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**64), 2**64))
def test_random_bytes_raise_only_corrupt_index(data: bytes, base: int, target: int) -> None:
    try:
        index = TimeIndex(data, base)
    except CorruptIndexError:
        index = TimeIndex(data, base, check=False)
    index.lookup(target)
    index.last_entry()
    assert len(list(index.entries())) == len(data) // ENTRY_SIZE


def test_encoder_rejects_bad_entries() -> None:
    with pytest.raises(ValueError, match="not within"):
        encode_time_index([(1, 99)], 100)
    with pytest.raises(ValueError, match="timestamp"):
        encode_time_index([(2**63, 100)], 100)
    with pytest.raises(ValueError, match="timestamp 5 is below"):
        encode_time_index([(6, 100), (5, 101)], 100)
    with pytest.raises(ValueError, match="offset 100 is below"):
        encode_time_index([(6, 101), (7, 100)], 100)
