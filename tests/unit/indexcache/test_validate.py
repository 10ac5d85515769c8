"""Index checks against the metadata (``indexcache.validate``): what Kafka's O(1) sanity checks
let through, and a damaged byte makes of an index, is refused before a read trusts it."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import CorruptIndexError
from gateway.kafka.offset_index import OffsetIndex, encode_offset_index
from gateway.kafka.time_index import TimeIndex, encode_time_index
from gateway.kafka.txn_index import AbortedTxn, TransactionIndex, encode_txn_index
from indexcache.validate import check_offset_index, check_time_index, check_txn_index

BASE, END, SIZE = 100, 199, 10_000
GOOD_OFFSETS = [(110, 1000), (130, 3000), (150, 5000), (199, 9000)]
GOOD_TIMES = [(1000, 110), (1005, 130), (1005, 150), (1010, 199)]


def offsets(entries: list[tuple[int, int]]) -> OffsetIndex:
    """Entries as bytes, however wrong (the encoder refuses what Kafka would never write)."""
    return OffsetIndex(b"".join(struct.pack(">ii", o - BASE, p) for o, p in entries), BASE)


def times(entries: list[tuple[int, int]]) -> TimeIndex:
    return TimeIndex(b"".join(struct.pack(">qi", t, o - BASE) for t, o in entries), BASE)


def test_the_helpers_write_what_the_encoders_write() -> None:
    assert offsets(GOOD_OFFSETS)._buf == encode_offset_index(GOOD_OFFSETS, BASE)
    assert times(GOOD_TIMES)._buf == encode_time_index(GOOD_TIMES, BASE)


def test_good_indexes_pass() -> None:
    check_offset_index(offsets(GOOD_OFFSETS), END, SIZE)
    check_time_index(times(GOOD_TIMES), END)
    check_txn_index(TransactionIndex(encode_txn_index([AbortedTxn(7, 90, 120, 90)]), BASE), END)


@pytest.mark.parametrize(
    "entries",
    [
        [(110, 1000), (130, 3000), (120, 5000)],  # offsets fall: Kafka's check looks at the last
        [(110, 1000), (130, 900)],  # positions fall
        [(110, 1000), (110, 2000)],  # an offset repeats
        [(110, -4096)],  # a negative position (read loops forever before issue 13)
        [(110, SIZE)],  # at or past the end of the log
        [(110, 1000), (250, 2000)],  # an offset past the segment's end offset
    ],
)
def test_offset_index_damage_is_refused(entries: list[tuple[int, int]]) -> None:
    index = offsets(entries)  # Kafka's sanity check passes all of these
    with pytest.raises(CorruptIndexError):
        check_offset_index(index, END, SIZE)


@pytest.mark.parametrize(
    "entries",
    [[(1000, 110), (999, 130)], [(1000, 130), (1005, 110)], [(1000, 110), (1001, 300)]],
)
def test_time_index_damage_is_refused(entries: list[tuple[int, int]]) -> None:
    with pytest.raises(CorruptIndexError):
        check_time_index(times(entries), END)


@pytest.mark.parametrize(
    "txns",
    [
        [AbortedTxn(7, 130, 120, 90)],  # first after last
        [AbortedTxn(7, 90, 250, 90)],  # the marker past the segment
        [AbortedTxn(7, 90, 150, 90), AbortedTxn(8, 140, 140, 90)],  # markers out of order
        [AbortedTxn(-3, 90, 150, 90)],  # no producer
    ],
)
def test_txn_index_damage_is_refused(txns: list[AbortedTxn]) -> None:
    index = TransactionIndex(encode_txn_index(txns), BASE)
    with pytest.raises(CorruptIndexError):
        check_txn_index(index, END)


@given(st.binary(min_size=0, max_size=64))
def test_any_bytes_pass_or_raise_the_typed_error(data: bytes) -> None:
    """Never an untyped error, whatever the bytes."""
    whole = data[: len(data) // 8 * 8]
    with contextlib.suppress(CorruptIndexError):
        check_offset_index(OffsetIndex(whole, BASE), END, SIZE)
    whole = data[: len(data) // 12 * 12]
    with contextlib.suppress(CorruptIndexError):
        check_time_index(TimeIndex(whole, BASE, check=False), END)
