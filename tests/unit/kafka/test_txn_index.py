"""Transaction index: spec §11 golden bytes, version and sanity checks, collectAbortedTxns."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptIndexError
from gateway.kafka.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
    encode_txn_index,
)

SETTINGS = settings(max_examples=200, deadline=None)

# §11: producerId 1000, firstOffset 100, lastOffset 200, lastStableOffset 100
GOLDEN = bytes.fromhex("000000000000000003E8000000000000006400000000000000C80000000000000064")
GOLDEN_TXN = AbortedTxn(producer_id=1000, first_offset=100, last_offset=200, last_stable_offset=100)


def scan_collect(txns: list[AbortedTxn], fetch: int, upper: int) -> TxnIndexSearchResult:
    """Spec §11, word for word."""
    kept: list[AbortedTxn] = []
    for txn in txns:
        if txn.last_offset >= fetch and txn.first_offset < upper:
            kept.append(txn)
        if txn.last_stable_offset >= upper:
            return TxnIndexSearchResult(kept, True)
    return TxnIndexSearchResult(kept, False)


def test_spec_example_bytes() -> None:
    assert len(GOLDEN) == ENTRY_SIZE == 34
    assert encode_txn_index([GOLDEN_TXN]) == GOLDEN
    index = TransactionIndex(GOLDEN, start_offset=0)
    assert list(index) == [GOLDEN_TXN]
    assert len(index) == 1
    assert index.all_aborted_txns() == [GOLDEN_TXN]


def test_bytes_after_last_whole_entry_are_ignored() -> None:
    for tail in (1, 2, 33):
        assert list(TransactionIndex(GOLDEN + b"\x7f" * tail, 0)) == [GOLDEN_TXN]
    assert list(TransactionIndex(b"\x01" * 33, 0)) == []


def test_empty_index() -> None:
    index = TransactionIndex(b"", 500)
    assert list(index) == []
    assert index.collect_aborted_txns(0, 10) == TxnIndexSearchResult([], False)


def test_version_above_zero_is_rejected() -> None:
    bad = b"\x01" + GOLDEN[1:]
    with pytest.raises(CorruptIndexError, match=r"entry 1 .*version 1"):
        TransactionIndex(GOLDEN + bad, 0)
    with pytest.raises(CorruptIndexError, match="version 127"):
        TransactionIndex(b"\x7f" + GOLDEN[1:], 0, check=False)


def test_version_is_the_first_byte_only_and_signed_like_kafka() -> None:
    # AbortedTxn.version() is buffer.get(0): the second byte is ignored and 0x80-0xFF are
    # negative versions, which Kafka does not reject.
    for prefix in (b"\x00\x05", b"\xff\x00", b"\x80\x01"):
        assert list(TransactionIndex(prefix + GOLDEN[2:], 0)) == [GOLDEN_TXN]


def test_last_offset_below_start_offset() -> None:
    with pytest.raises(CorruptIndexError, match="less than the segment start offset 201"):
        TransactionIndex(GOLDEN, start_offset=201)
    assert list(TransactionIndex(GOLDEN, start_offset=200)) == [GOLDEN_TXN]
    assert list(TransactionIndex(GOLDEN, start_offset=201, check=False)) == [GOLDEN_TXN]


def test_collect_aborted_txns_worked_example() -> None:
    txns = [
        AbortedTxn(1, 100, 200, 100),
        AbortedTxn(2, 150, 260, 150),
        AbortedTxn(3, 300, 400, 420),
        AbortedTxn(4, 410, 500, 500),
    ]
    index = TransactionIndex(encode_txn_index(txns), 0)
    # fetch [210, 350): txn 1 ends before 210; txn 3 has LSO 420 >= 350 -> complete.
    assert index.collect_aborted_txns(210, 350) == TxnIndexSearchResult([txns[1], txns[2]], True)
    # fetch [0, 1000): nothing has LSO >= 1000 -> all, incomplete.
    assert index.collect_aborted_txns(0, 1000) == TxnIndexSearchResult(txns, False)
    # The stopping entry is kept when it matches, dropped when it does not.
    assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult([], True)
    assert index.collect_aborted_txns(0, 101) == TxnIndexSearchResult([txns[0]], True)


offsets = st.integers(-5, 60)
txn_lists = st.lists(
    st.builds(AbortedTxn, st.integers(-(2**63), 2**63 - 1), offsets, offsets, offsets),
    max_size=12,
)


@SETTINGS
@given(txn_lists, offsets, offsets)
def test_collect_matches_spec_walk(txns: list[AbortedTxn], fetch: int, upper: int) -> None:
    index = TransactionIndex(encode_txn_index(txns), start_offset=-(2**63), check=True)
    assert list(index) == txns
    assert index.collect_aborted_txns(fetch, upper) == scan_collect(txns, fetch, upper)


int64 = st.integers(-(2**63), 2**63 - 1)


@SETTINGS
@given(st.lists(st.builds(AbortedTxn, int64, int64, int64, int64), max_size=20))
def test_round_trip(txns: list[AbortedTxn]) -> None:
    data = encode_txn_index(txns)
    assert len(data) == ENTRY_SIZE * len(txns)
    assert TransactionIndex(data, 0, check=False).all_aborted_txns() == txns


@SETTINGS
@given(st.binary(max_size=400), int64, st.integers(), st.integers())
def test_random_bytes_raise_only_corrupt_index(
    data: bytes, start: int, fetch: int, upper: int
) -> None:
    try:
        index = TransactionIndex(data, start)
    except CorruptIndexError:
        return
    index.collect_aborted_txns(fetch, upper)
    assert len(index) == len(data) // ENTRY_SIZE


def test_encoder_rejects_out_of_range_fields() -> None:
    with pytest.raises(ValueError, match="last_offset"):
        encode_txn_index([AbortedTxn(1, 2, 2**63, 4)])


def test_entry_layout_matches_struct() -> None:
    txn = AbortedTxn(-1, 2**62, -(2**63), 7)
    assert encode_txn_index([txn]) == struct.pack(">hqqqq", 0, *txn)
