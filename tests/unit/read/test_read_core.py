"""The read core on hand-built segments: the framer's promises, read_committed proven against
the control records, the timestamp search's checks of the time index."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import CorruptIndexError, CorruptRecordError, CrcMismatchError, GatewayError
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.builder import RecordInput, build_batch, end_txn_marker
from gateway.kafka.control import ControlRecordType
from gateway.kafka.time_index import TimestampOffset
from gateway.read.framing import SegmentBounds, SegmentFramer
from gateway.read.timesearch import TimestampSearch
from gateway.read.txn import MarkerLedger, check_verdicts
from gateway.service.types import AbortedTransaction

ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def data(offset: int, n: int = 2, *, pid: int = -1, ts: int = 1000, epoch: int = 0) -> bytes:
    return build_batch(
        offset,
        [RecordInput(b"v%d" % i, key=b"k", timestamp=ts + i) for i in range(n)],
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        transactional=pid >= 0,
        partition_leader_epoch=epoch,
    )


def marker(offset: int, kind: ControlRecordType, pid: int, epoch: int = 0) -> bytes:
    return end_txn_marker(
        offset, kind, producer_id=pid, producer_epoch=0, timestamp=2000,
        partition_leader_epoch=epoch,
    )  # fmt: skip


def segment() -> tuple[bytes, SegmentBounds]:
    """Offsets 10..19: data 10-11, txn of 7 at 12-13, data 14-15 (epoch 3 from 14), txn of 8
    at 16-17, ABORT 7 at 18, COMMIT 8 at 19."""
    parts = [
        data(10),
        data(12, pid=7),
        data(14, epoch=3),
        data(16, pid=8, epoch=3),
        marker(18, ABORT, 7, 3),
        marker(19, COMMIT, 8, 3),
    ]
    raw = b"".join(parts)
    return raw, SegmentBounds("t/seg.log", 10, 19, len(raw), ((0, 10), (3, 14)))


def frame(raw: bytes, bounds: SegmentBounds, piece: int = 7) -> list[RecordBatch]:
    framer = SegmentFramer(bounds)
    out: list[RecordBatch] = []
    for i in range(0, len(raw), piece):
        out += framer.feed(raw[i : i + piece])
    framer.finish()
    return out


@given(st.integers(1, 400))
def test_any_piece_size_frames_the_same_batches(piece: int) -> None:
    raw, bounds = segment()
    got = [(b.base_offset, b.position) for b in frame(raw, bounds, piece)]
    assert got == [(b.base_offset, b.position) for b in iter_batches(raw)]


def test_every_single_byte_flip_of_the_header_region_is_caught_or_harmless() -> None:
    """A flip in baseOffset, batchLength, partitionLeaderEpoch or magic of any batch: framing
    raises a typed error or (CRC-covered fields) the CRC does; never different offsets."""
    raw, bounds = segment()
    positions = [b.position for b in iter_batches(raw)]
    for pos in positions:
        for byte in range(17):
            for mask in (0x01, 0x80):
                damaged = bytearray(raw)
                damaged[pos + byte] ^= mask
                try:
                    batches = frame(bytes(damaged), bounds)
                    for b in batches:
                        b.ensure_valid()
                except GatewayError:
                    continue
                assert [(b.base_offset, b.last_offset) for b in batches] == [
                    (b.base_offset, b.last_offset) for b in iter_batches(raw)
                ]


def test_a_segment_must_end_at_its_end_offset() -> None:
    raw, bounds = segment()
    short = SegmentBounds(bounds.key, 10, 20, bounds.size, bounds.epochs)
    with pytest.raises(CorruptRecordError, match="metadata says 20"):
        frame(raw, short)


def test_an_index_entry_past_its_batch_is_corrupt() -> None:
    raw, bounds = segment()
    third = [b.position for b in iter_batches(raw)][2]  # offsets 14-15
    with pytest.raises(CorruptRecordError, match="offset-index entry"):
        SegmentFramer(bounds, third, 13).feed(raw[third:])
    assert SegmentFramer(bounds, third, 15).feed(raw[third:])  # a per-append entry: fine


def committed_of(raw: bytes, aborted: list[AbortedTransaction]) -> None:
    batches = list(iter_batches(raw))
    ledger = MarkerLedger()
    for b in batches:
        ledger.add(b)
    check_verdicts(batches, aborted, ledger)


def test_the_index_that_matches_the_markers_passes() -> None:
    raw, _ = segment()
    committed_of(raw, [AbortedTransaction(7, 12)])


@pytest.mark.parametrize(
    "aborted",
    [
        [],  # the ABORT's entry is missing: aborted records would be returned
        [AbortedTransaction(8, 12)],  # producer id flipped
        [AbortedTransaction(7, 12), AbortedTransaction(8, 16)],  # a committed txn listed
        [AbortedTransaction(7, 14)],  # first offset past the txn's first batch
    ],
)
def test_an_index_that_disagrees_with_the_markers_is_corrupt(
    aborted: list[AbortedTransaction],
) -> None:
    raw, _ = segment()
    with pytest.raises(CorruptIndexError):
        committed_of(raw, aborted)


def test_an_open_transaction_is_resolved_by_the_batches_after_the_read() -> None:
    raw, _ = segment()
    batches = list(iter_batches(raw))
    ledger = MarkerLedger()
    for b in batches[:4]:
        ledger.add(b)
    assert ledger.open_producers == {7, 8}
    assert ledger.unresolved() == 12
    for b in batches[4:]:
        ledger.close(b)
    assert not ledger.open_producers
    check_verdicts(batches[:4], [AbortedTransaction(7, 12)], ledger)
    with pytest.raises(CorruptIndexError):
        check_verdicts(batches[:4], [], ledger)


def test_the_timestamp_search_checks_the_time_index_entry() -> None:
    raw, _ = segment()
    batches = list(iter_batches(raw))
    # (1001, 11): the largest timestamp up to offset 11 is 1001, in the batch holding 11.
    ok = TimestampSearch("k", 1001, 0, TimestampOffset(1001, 11), from_segment_start=True)
    hit = next(h for b in batches if (h := ok.add(b)) is not None)
    assert hit.offset == 11
    lying = TimestampSearch("k", 1001, 0, TimestampOffset(999, 11), from_segment_start=True)
    with pytest.raises(CorruptIndexError):
        for b in batches:
            lying.add(b)


def test_the_timestamp_search_checks_the_crc_of_batches_it_passes_over() -> None:
    """``maxTimestamp`` decides whether a batch is passed over; it is covered by the CRC, so a
    damaged one is an error, not a later (wrong) answer."""
    raw, _ = segment()
    damaged = bytearray(raw)
    damaged[35] ^= 0x40  # the first batch's maxTimestamp, now far in the past
    search = TimestampSearch("k", 1000, 0, TimestampOffset(-1, 10), from_segment_start=True)
    with pytest.raises(CrcMismatchError):
        for b in iter_batches(bytes(damaged)):
            search.add(b)
