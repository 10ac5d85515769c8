"""Leader-epoch checkpoint (spec §12.2) and cache semantics (§12.3, every table row)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptCheckpointError
from gateway.kafka.epoch import (
    EpochEntry,
    LeaderEpochCache,
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
)

SETTINGS = settings(max_examples=200, deadline=None)

SPEC_ENTRIES = [EpochEntry(0, 0), EpochEntry(3, 1500), EpochEntry(5, 4000)]
SPEC_TEXT = b"0\n3\n0 0\n3 1500\n5 4000\n"


# --- checkpoint text ------------------------------------------------------------------------


def test_spec_checkpoint_text() -> None:
    assert format_leader_epoch_checkpoint(SPEC_ENTRIES) == SPEC_TEXT
    assert parse_leader_epoch_checkpoint(SPEC_TEXT) == SPEC_ENTRIES
    assert LeaderEpochCache.from_checkpoint(SPEC_TEXT).to_checkpoint() == SPEC_TEXT


def test_empty_cache_checkpoint() -> None:
    assert format_leader_epoch_checkpoint([]) == b"0\n0\n"
    assert parse_leader_epoch_checkpoint(b"0\n0\n") == []


@pytest.mark.parametrize(
    "text",
    [
        b"0\n3\n0 0\n3 1500\n5 4000",  # last line without terminator (readLine accepts it)
        b"0\r\n3\r\n0 0\r\n3 1500\r\n5 4000\r\n",  # readLine also ends lines at \r\n
        b"0\r3\r0 0\r3 1500\r5 4000\r",  # ... and at a lone \r
        b"0\n3\n0\t0\n3   1500\n5 \t 4000  \n",  # split on \s+, trailing whitespace dropped
        b"+0\n+3\n+0 +0\n3 1500\n5 4000\n",  # Integer.parseInt accepts a leading +
    ],
)
def test_parse_accepts_what_kafka_reads(text: bytes) -> None:
    assert parse_leader_epoch_checkpoint(text) == SPEC_ENTRIES


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"", "empty"),
        (b"\n", "line 1: version is not an integer"),
        (b"1\n0\n", "line 1: version 1 is not 0"),
        (b"x\n", "line 1: version is not an integer"),
        (b" 0\n0\n", "line 1: version is not an integer"),
        (b"0\n", "no entry-count line"),
        (b"0\nthree\n", "line 2: entry count is not an integer"),
        (b"0\n-1\n", "line 2: entry count -1 is outside"),
        (b"0\n2\n0 0\n", "announces 2 entries but 1"),
        (b"0\n1\n0 0\n1 5\n", "announces 1 entries but 2"),
        (b"0\n1\n0 0\n\n", "announces 1 entries but 2"),
        (b"0\n1\n0\n", "line 3: expected '<epoch> <startOffset>'"),
        (b"0\n1\n0 0 0\n", "line 3: expected"),
        (b"0\n1\n 0 0\n", "line 3: expected"),  # Java's split keeps a leading empty field
        (b"0\n2\n0 0\nx 5\n", "line 4: epoch is not an integer"),
        (b"0\n1\n0 1_000\n", "line 3: start offset is not an integer"),
        (b"0\n1\n2147483648 0\n", "line 3: epoch 2147483648 is outside"),
        (b"0\n1\n0 9223372036854775808\n", "line 3: start offset 9223372036854775808 is outside"),
        ("0\n1\n\u0663 0\n".encode(), "line 3: epoch is not an integer"),
        (b"0\n1\n0 " + b"9" * 5000 + b"\n", "line 3: start offset '9999.* is out of range"),
        (b"0\n1\n0 " + b"0" * 41 + b"\n", "line 3: start offset '0000.* is out of range"),
        (b"0\n1\n0 \xff\n", "not valid UTF-8"),
    ],
)
def test_parse_rejects(text: bytes, message: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=message):
        parse_leader_epoch_checkpoint(text)


def test_undecodable_input_is_chained() -> None:
    with pytest.raises(CorruptCheckpointError) as info:
        parse_leader_epoch_checkpoint(b"\xc3")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


epoch_lists = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)), max_size=20
)


@SETTINGS
@given(epoch_lists)
def test_checkpoint_round_trip(entries: list[tuple[int, int]]) -> None:
    text = format_leader_epoch_checkpoint(entries)
    assert text.endswith(b"\n")
    assert parse_leader_epoch_checkpoint(text) == entries


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_checkpoint(data: bytes) -> None:
    try:
        entries = parse_leader_epoch_checkpoint(data)
    except CorruptCheckpointError:
        return
    with contextlib.suppress(CorruptCheckpointError):
        LeaderEpochCache(entries)


@SETTINGS
@given(st.text(alphabet="0123456789 +-\t\r\n", max_size=60))
def test_random_text_raises_only_corrupt_checkpoint(text: str) -> None:
    try:
        entries = parse_leader_epoch_checkpoint(("0\n" + text).encode())
    except CorruptCheckpointError:
        return
    with contextlib.suppress(CorruptCheckpointError):
        LeaderEpochCache.from_checkpoint(format_leader_epoch_checkpoint(entries))


# --- cache: §12.3 examples table ------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [(0, 0), (1499, 0), (1500, 3), (3999, 3), (4000, 5), (10**9, 5)],
)
def test_spec_epoch_for_offset(offset: int, epoch: int) -> None:
    assert LeaderEpochCache(SPEC_ENTRIES).epoch_for_offset(offset) == epoch


def test_spec_epoch_for_offset_before_first_entry_is_none() -> None:
    cache = LeaderEpochCache([EpochEntry(2, 100), EpochEntry(4, 900)])
    assert cache.epoch_for_offset(50) is None


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (2000, 5000, [EpochEntry(3, 2000), EpochEntry(5, 4000)]),
        (0, 1500, [EpochEntry(0, 0)]),
    ],
)
def test_spec_epoch_entries_in_range(start: int, end: int, expected: list[EpochEntry]) -> None:
    assert LeaderEpochCache(SPEC_ENTRIES).epoch_entries_in_range(start, end) == expected


def test_epoch_entries_in_range_unclamped_start() -> None:
    # §12.2: the uploaded LEADER_EPOCH index is epochEntriesInRange(-1, nextSegmentBaseOffset).
    cache = LeaderEpochCache(SPEC_ENTRIES)
    assert cache.epoch_entries_in_range(-1, 4000) == SPEC_ENTRIES[:2]
    assert cache.epoch_entries_in_range(-1, 4001) == SPEC_ENTRIES
    assert cache.epoch_entries_in_range(-1, -1) == SPEC_ENTRIES


def test_empty_cache() -> None:
    cache = LeaderEpochCache()
    assert cache.epoch_for_offset(0) is None
    assert cache.latest_epoch is None
    assert cache.latest_entry is None
    assert cache.entries == []
    assert cache.epoch_entries_in_range(0, 10) == []


# --- cache: validation and assign -----------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([(0, 0), (0, 10)], "entry 1 .* does not strictly follow"),
        ([(1, 0), (0, 10)], "entry 1"),
        ([(0, 10), (1, 10)], "entry 1"),
        ([(0, 10), (1, 5)], "entry 1"),
        ([(-1, 0)], "entry 0 .* is negative"),
        ([(0, -1)], "negative"),
    ],
)
def test_cache_rejects_disordered_entries(entries: list[tuple[int, int]], message: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=message):
        LeaderEpochCache(entries)


def test_assign_rules() -> None:
    cache = LeaderEpochCache(SPEC_ENTRIES)
    # Same latest epoch, same or later start: no change.
    assert not cache.assign(5, 4000)
    assert not cache.assign(5, 4500)
    assert cache.entries == SPEC_ENTRIES
    # Same latest epoch, earlier start: replaces it.
    assert cache.assign(5, 3500)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(3, 1500), EpochEntry(5, 3500)]
    # A new epoch after everything: appended.
    assert cache.assign(7, 6000)
    assert cache.latest_epoch == 7
    # An older epoch: every entry with epoch >= 4 or start >= 2000 goes.
    assert cache.assign(4, 2000)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(3, 1500), EpochEntry(4, 2000)]
    # A newer epoch at an earlier offset: entries starting at or after it go.
    assert cache.assign(9, 1500)
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(9, 1500)]
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        cache.assign(-1, 0)


# --- properties against implementations written from the rule text --------------------------


def rule_epoch_for_offset(entries: list[EpochEntry], offset: int) -> int | None:
    """§12.3 verbatim: walk ascending; exact start match -> that epoch; first start > offset ->
    previous epoch (possibly none); running off the end -> the last epoch."""
    previous: int | None = None
    for entry in entries:
        if entry.start_offset == offset:
            return entry.epoch
        if entry.start_offset > offset:
            return previous
        previous = entry.epoch
    return previous


def rule_entries_in_range(entries: list[EpochEntry], start: int, end: int) -> list[EpochEntry]:
    """§12.3: drop entries with start <= start, keeping the last dropped one rewritten to start;
    drop entries with start >= end (each side only for a non-negative bound, as in Kafka)."""
    result = list(entries)
    if start >= 0:
        dropped = [e for e in result if e.start_offset <= start]
        result = [e for e in result if e.start_offset > start]
        if dropped:
            result.insert(0, EpochEntry(dropped[-1].epoch, start))
    if end >= 0:
        result = [e for e in result if e.start_offset < end]
    return result


def rule_assign(entries: list[EpochEntry], epoch: int, start: int) -> list[EpochEntry]:
    """§12.3: a new entry removes every entry with epoch >= it or start offset >= it (unless it
    repeats the latest epoch without moving its start back: LeaderEpochFileCache ignores that)."""
    if entries and entries[-1].epoch == epoch and start >= entries[-1].start_offset:
        return entries
    kept = [e for e in entries if e.epoch < epoch and e.start_offset < start]
    return [*kept, EpochEntry(epoch, start)]


@st.composite
def epoch_caches(draw: st.DrawFn) -> list[EpochEntry]:
    epochs = sorted(draw(st.sets(st.integers(0, 40), max_size=10)))
    starts = sorted(draw(st.sets(st.integers(0, 400), min_size=len(epochs), max_size=len(epochs))))
    return [EpochEntry(e, s) for e, s in zip(epochs, starts, strict=True)]


@SETTINGS
@given(epoch_caches(), st.lists(st.integers(-2, 405), max_size=30))
def test_epoch_for_offset_matches_rule(entries: list[EpochEntry], offsets: list[int]) -> None:
    cache = LeaderEpochCache(entries)
    for offset in offsets:
        assert cache.epoch_for_offset(offset) == rule_epoch_for_offset(entries, offset)
    for entry in entries:
        for offset in (entry.start_offset - 1, entry.start_offset, entry.start_offset + 1):
            assert cache.epoch_for_offset(offset) == rule_epoch_for_offset(entries, offset)


@SETTINGS
@given(epoch_caches(), st.integers(-2, 405), st.integers(-2, 405))
def test_epoch_entries_in_range_matches_rule(
    entries: list[EpochEntry], start: int, end: int
) -> None:
    cache = LeaderEpochCache(entries)
    assert cache.epoch_entries_in_range(start, end) == rule_entries_in_range(entries, start, end)
    assert cache.entries == entries  # a query never changes the cache


@SETTINGS
@given(epoch_caches(), st.lists(st.tuples(st.integers(0, 45), st.integers(0, 450)), max_size=15))
def test_assign_matches_rule(entries: list[EpochEntry], assigns: list[tuple[int, int]]) -> None:
    cache = LeaderEpochCache(entries)
    model = list(entries)
    for epoch, start in assigns:
        changed = cache.assign(epoch, start)
        updated = rule_assign(model, epoch, start)
        assert changed == (updated is not model)
        model = updated
        assert cache.entries == model
        LeaderEpochCache(cache.entries)  # still strictly increasing in both
        assert LeaderEpochCache.from_checkpoint(cache.to_checkpoint()).entries == model
