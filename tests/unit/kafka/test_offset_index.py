"""Offset index: spec §8 golden bytes, §10 sanity checks, lookups against a linear scan."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptIndexError
from gateway.kafka.offset_index import (
    ENTRY_SIZE,
    OffsetIndex,
    OffsetPosition,
    encode_offset_index,
)

SETTINGS = settings(max_examples=200, deadline=None)
ZERO_ENTRY = bytes(ENTRY_SIZE)


def raw(*pairs: tuple[int, int]) -> bytes:
    """Entries as (relative offset, position) without any validation."""
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in pairs)


def scan_lookup(entries: list[OffsetPosition], base: int, target: int) -> OffsetPosition:
    """Spec §8: the entry with the largest offset <= target, else (base, 0)."""
    below = [e for e in entries if e.offset <= target]
    return max(below, key=lambda e: e.offset) if below else OffsetPosition(base, 0)


def scan_upper_bound(entries: list[OffsetPosition], position: int) -> OffsetPosition | None:
    """Spec §8: the smallest entry whose position is >= position, else none."""
    return next((e for e in entries if e.position >= position), None)


# --- golden bytes ---------------------------------------------------------------------------


def test_spec_example_bytes() -> None:
    # §8: relative offset 5 at position 4096 -> 00 00 00 05 00 00 10 00
    golden = bytes.fromhex("00000005 00001000")
    assert encode_offset_index([(105, 4096)], base_offset=100) == golden
    index = OffsetIndex(golden, base_offset=100)
    assert len(index) == 1
    assert index.entry(0) == OffsetPosition(105, 4096)
    assert list(index.entries()) == [OffsetPosition(105, 4096)]
    assert index.last_offset == 105
    assert index.size_in_bytes == 8


def test_lookup_rules() -> None:
    index = OffsetIndex(encode_offset_index([(110, 4096), (130, 9000), (150, 20000)], 100), 100)
    assert index.lookup(0) == OffsetPosition(100, 0)
    assert index.lookup(109) == OffsetPosition(100, 0)
    assert index.lookup(110) == OffsetPosition(110, 4096)
    assert index.lookup(129) == OffsetPosition(110, 4096)
    assert index.lookup(130) == OffsetPosition(130, 9000)
    assert index.lookup(10**12) == OffsetPosition(150, 20000)


def test_empty_index() -> None:
    index = OffsetIndex(b"", base_offset=7)
    assert len(index) == 0
    assert index.lookup(100) == OffsetPosition(7, 0)
    assert index.fetch_upper_bound_offset(0) is None
    assert index.last_offset == 7
    assert list(index.entries()) == []


def test_fetch_upper_bound_offset() -> None:
    index = OffsetIndex(encode_offset_index([(110, 4096), (130, 9000), (150, 20000)], 100), 100)
    assert index.fetch_upper_bound_offset(0) == OffsetPosition(110, 4096)
    assert index.fetch_upper_bound_offset(4096) == OffsetPosition(110, 4096)
    assert index.fetch_upper_bound_offset(4097) == OffsetPosition(130, 9000)
    assert index.fetch_upper_bound_offset(20000) == OffsetPosition(150, 20000)
    assert index.fetch_upper_bound_offset(20001) is None


def test_entry_out_of_range() -> None:
    index = OffsetIndex(encode_offset_index([(1, 0)], 0), 0)
    with pytest.raises(IndexError):
        index.entry(1)
    with pytest.raises(IndexError):
        index.entry(-1)


def test_accepts_memoryview_and_bytearray() -> None:
    data = encode_offset_index([(3, 10), (9, 99)], 0)
    for buf in (bytearray(data), memoryview(data), memoryview(bytearray(data)).cast("I")):
        index = OffsetIndex(buf, 0)
        assert list(index.entries()) == [OffsetPosition(3, 10), OffsetPosition(9, 99)]
        assert index.lookup(5) == OffsetPosition(3, 10)


# --- sanity checks (§10) --------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 7, 9, 15, 17])
def test_length_not_multiple_of_eight(length: int) -> None:
    with pytest.raises(CorruptIndexError, match="not a multiple of the 8-byte entry size"):
        OffsetIndex(bytes(length), 0)


def test_unchecked_counts_whole_entries_like_kafka() -> None:
    index = OffsetIndex(raw((5, 100)) + b"\x01\x02\x03", 0, check=False)
    assert len(index) == 1
    assert index.lookup(6) == OffsetPosition(5, 100)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()


def test_last_offset_below_base() -> None:
    with pytest.raises(CorruptIndexError, match="last offset 99 is less than the base offset 100"):
        OffsetIndex(raw((5, 0), (-1, 10)), 100)


def test_trailing_zero_entries_pass() -> None:
    data = encode_offset_index([(110, 4096), (120, 8192)], 100) + ZERO_ENTRY * 3
    index = OffsetIndex(data, 100)
    assert len(index) == 5
    assert index.entry(4) == OffsetPosition(100, 0)
    assert index.last_offset == 100


def test_trailing_zeros_follow_kafka_probe_sequence() -> None:
    # rel [0, 10, 20, 0, 0]; Kafka: firstHot = 0, key 0 < 20 -> warm search over [0, 4],
    # first probe mid = 2 hits key 20 exactly and returns it. A plain "largest slot <= target"
    # bisection would walk into the zero tail and answer (base, 0).
    data = raw((0, 0), (10, 4096), (20, 8192), (0, 0), (0, 0))
    index = OffsetIndex(data, 1000)
    assert index.lookup(1020) == OffsetPosition(1020, 8192)
    # Target 1015: probes mid 2 (20 > 15 -> hi 1), mid 1 (10 < 15 -> lo 1): slot 1.
    assert index.lookup(1015) == OffsetPosition(1010, 4096)
    # Target 1025: probes 2, 3, 4 all <= 25: the last zero slot, i.e. (base, 0).
    assert index.lookup(1025) == OffsetPosition(1000, 0)


# --- properties -----------------------------------------------------------------------------


@st.composite
def offset_indexes(draw: st.DrawFn) -> tuple[int, list[OffsetPosition], list[int], list[int]]:
    """(base, entries, target offsets, target positions); some indexes span the warm section."""
    base = draw(st.integers(0, 2**40))
    size = draw(st.one_of(st.integers(0, 12), st.integers(1000, 2500)))
    universe = draw(st.sampled_from([40, 10_000, 2**31 - 1]))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    size = min(size, universe)
    relatives = sorted(rnd.sample(range(universe), size))
    positions = sorted(rnd.randrange(0, min(universe * 64, 2**31)) for _ in range(size))
    entries = [OffsetPosition(base + r, p) for r, p in zip(relatives, positions, strict=True)]
    near = [e.offset + d for e in entries[:: max(1, size // 20)] for d in (-1, 0, 1)]
    offsets = (
        near
        + [base - 1, base, base + universe]
        + [base + rnd.randrange(-5, universe + 5) for _ in range(20)]
    )
    near_pos = [e.position + d for e in entries[:: max(1, size // 20)] for d in (-1, 0, 1)]
    top = (positions[-1] if positions else 0) + 2
    targets_pos = near_pos + [-1, 0, top] + [rnd.randrange(-2, top) for _ in range(20)]
    return base, entries, offsets, targets_pos


@SETTINGS
@given(offset_indexes())
def test_round_trip_and_lookups_match_linear_scan(
    case: tuple[int, list[OffsetPosition], list[int], list[int]],
) -> None:
    base, entries, offsets, positions = case
    data = encode_offset_index(entries, base)
    assert len(data) == ENTRY_SIZE * len(entries)
    index = OffsetIndex(data, base)
    assert len(index) == len(entries)
    assert list(index.entries()) == entries
    assert [index.entry(i) for i in range(len(entries))] == entries
    for target in offsets:
        assert index.lookup(target) == scan_lookup(entries, base, target), target
    for position in positions:
        assert index.fetch_upper_bound_offset(position) == scan_upper_bound(entries, position)


@SETTINGS
@given(offset_indexes(), st.integers(1, 1500))
def test_trailing_zeros_answer_true_floor_or_segment_start(
    case: tuple[int, list[OffsetPosition], list[int], list[int]], zeros: int
) -> None:
    """§10: with zero entries appended a lookup may only fall back to (base, 0)."""
    base, entries, offsets, positions = case
    index = OffsetIndex(encode_offset_index(entries, base) + ZERO_ENTRY * zeros, base)
    for target in offsets:
        assert index.lookup(target) in (scan_lookup(entries, base, target), (base, 0))
    for position in positions:
        if position > 0:
            found = index.fetch_upper_bound_offset(position)
            assert found in (scan_upper_bound(entries, position), None)


def kafka_lookup(relatives: list[int], base: int, target: int) -> int:
    """Slot ``OffsetIndex.lookup`` picks, transliterated from ``AbstractIndex.indexSlotRangeFor``
    and ``binarySearch`` (LARGEST_LOWER_BOUND on the key); -1 for (base, 0)."""
    entries = len(relatives)
    if entries == 0:
        return -1
    first_hot_entry = max(0, entries - 1 - 8192 // ENTRY_SIZE)
    if base + relatives[first_hot_entry] < target:
        begin, end = first_hot_entry, entries - 1
    elif base + relatives[0] > target:
        return -1
    else:
        begin, end = 0, first_hot_entry
    lo, hi = begin, end
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        found = base + relatives[mid]
        if found > target:
            hi = mid - 1
        elif found < target:
            lo = mid
        else:
            return mid
    return lo


@SETTINGS
@given(offset_indexes(), st.sampled_from([0, 1, 3, 1023, 1024, 1025, 1026, 3000]))
def test_untrimmed_lookup_equals_kafka_slot_choice(
    case: tuple[int, list[OffsetPosition], list[int], list[int]], zeros: int
) -> None:
    """Not only a safe answer: the very entry the broker would pick (startPos included)."""
    base, entries, offsets, _ = case
    index = OffsetIndex(encode_offset_index(entries, base) + ZERO_ENTRY * zeros, base)
    relatives = [e.offset - base for e in entries] + [0] * zeros
    for target in offsets:
        slot = kafka_lookup(relatives, base, target)
        expected = OffsetPosition(base, 0) if slot < 0 else index.entry(slot)
        assert index.lookup(target) == expected, target


@SETTINGS
@given(st.binary(max_size=300), st.integers(-(2**63), 2**63 - 1), st.integers(), st.integers())
def test_random_bytes_raise_only_corrupt_index(
    data: bytes, base: int, target: int, position: int
) -> None:
    try:
        index = OffsetIndex(data, base)
    except CorruptIndexError:
        index = OffsetIndex(data, base, check=False)
    index.lookup(target)
    index.lookup(base)
    index.fetch_upper_bound_offset(position)
    assert len(list(index.entries())) == len(data) // ENTRY_SIZE


def test_encoder_rejects_bad_entries() -> None:
    with pytest.raises(ValueError, match="not within"):
        encode_offset_index([(99, 0)], 100)
    with pytest.raises(ValueError, match="not within"):
        encode_offset_index([(100 + 2**31, 0)], 100)
    with pytest.raises(ValueError, match="position"):
        encode_offset_index([(100, -1)], 100)
    with pytest.raises(ValueError, match="not increasing"):
        encode_offset_index([(101, 0), (101, 5)], 100)
    with pytest.raises(ValueError, match="below the previous"):
        encode_offset_index([(101, 50), (102, 5)], 100)
