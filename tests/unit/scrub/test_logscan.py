"""The streaming log scan on the shared framer: chunk borders anywhere, every framing rule as
a finding of its own check, the end checks, the transaction verdicts, the per-check cap."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace

import pytest

from gateway.demo import DemoBucket
from gateway.kafka.batch import PEEK_SIZE, RecordBatch, iter_batches
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.time_index import TimeIndex
from gateway.kafka.txn_index import AbortedTxn, TransactionIndex
from gateway.read.framing import SegmentBounds
from gateway.remote.tiering import LocalSegment, read_segment_dir, segment_metadata
from gateway.scrub import findings as checks
from gateway.scrub.findings import MAX_PER_CHECK, FindingSink, Severity, Where
from gateway.scrub.logscan import UNKNOWN_END, IndexView, LogScanner


def local_segment(demo: DemoBucket, folder: str, n: int = 0) -> LocalSegment:
    segments = list(read_segment_dir(demo.root / "segments" / folder, include_active=True))
    return segments[n]


def view_of(segment: LocalSegment) -> IndexView:
    base = segment.base_offset
    return IndexView(
        list(OffsetIndex(segment.offset_index, base).entries()),
        list(TimeIndex(segment.time_index, base).entries()),
        TransactionIndex(segment.txn_index or b"", base).all_aborted_txns(),
    )


def bounds_of(segment: LocalSegment, size: int | None = None) -> SegmentBounds:
    """What the manifest would promise: offsets and leader epochs from the whole segment."""
    meta = segment_metadata(segment, topic="t", topic_id=uuid.uuid4(), partition=0)
    epochs = tuple(sorted(meta.segment_leader_epochs, key=lambda e: e[1]))
    size = len(segment.log) if size is None else size
    return SegmentBounds("k.log", meta.start_offset, meta.end_offset, size, epochs)


def batches_of(segment: LocalSegment) -> list[RecordBatch]:
    return list(iter_batches(segment.log))


@dataclass(frozen=True)
class Scan:
    batches: int
    records: int
    last_offset: int
    stopped_at: int | None
    findings: list[tuple[str, Severity, str]]  # (check, severity, message)

    def problems(self) -> list[tuple[str, Severity]]:
        return [(c, s) for c, s, _ in self.findings if s != "info"]


def scan(
    log: bytes | bytearray,
    view: IndexView,
    bounds: SegmentBounds,
    *,
    pieces: int = 1,
    seed: int = 0,
    end_known: bool = True,
) -> Scan:
    sink = FindingSink(Where("t", 0, "s", "k"))
    scanner = LogScanner(view, sink, bounds, indexes_key="k.indexes", end_known=end_known)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(log)), pieces - 1)) if pieces > 1 else []
    for lo, hi in zip([0, *cuts], [*cuts, len(log)], strict=True):
        scanner.feed(bytes(log[lo:hi]))
    scanner.finish()
    findings = [(f.check, f.severity, f.message) for f in sink.close()]
    return Scan(scanner.batches, scanner.records, scanner.last_offset, scanner.stopped_at, findings)


def flipped(log: bytes, position: int, mask: int = 0xFF) -> bytearray:
    out = bytearray(log)
    out[position] ^= mask
    return out


def same_whatever_the_borders(
    log: bytes | bytearray, view: IndexView, bounds: SegmentBounds
) -> Scan:
    """The scan of ``log`` fed whole, checked to be the same when fed in pieces."""
    whole = scan(log, view, bounds)
    for pieces, seed in ((2, 1), (7, 2), (50, 3), (min(1000, len(log) - 1), 4)):
        assert scan(log, view, bounds, pieces=pieces, seed=seed) == whole, pieces
    return whole


@pytest.fixture
def payments(demo: DemoBucket) -> LocalSegment:
    return local_segment(demo, "payments-1")


# --- clean ----------------------------------------------------------------------------------


@pytest.mark.parametrize("pieces", [2, 7, 100, 1000])
def test_batches_crossing_chunk_borders_give_the_same_answer(
    payments: LocalSegment, pieces: int
) -> None:
    view, bounds = view_of(payments), bounds_of(payments)
    whole = scan(payments.log, view, bounds)
    assert whole.batches > 10 and whole.findings == []
    assert whole.last_offset == bounds.end_offset and whole.stopped_at is None
    assert scan(payments.log, view, bounds, pieces=pieces, seed=pieces) == whole


def test_every_demo_segment_is_clean(demo: DemoBucket) -> None:
    for folder in ("orders-0", "inventory-0", "payments-0", "audit-0"):
        for segment in read_segment_dir(demo.root / "segments" / folder, include_active=True):
            result = scan(segment.log, view_of(segment), bounds_of(segment), pieces=20)
            assert result.findings == [], (folder, segment.base_offset)


def test_without_metadata_where_the_batches_end_is_not_checked(payments: LocalSegment) -> None:
    bounds = replace(bounds_of(payments), end_offset=UNKNOWN_END, epochs=())
    assert scan(payments.log, view_of(payments), bounds, end_known=False).findings == []


# --- per batch ------------------------------------------------------------------------------


def test_a_corrupt_batch_is_found_whatever_the_borders(payments: LocalSegment) -> None:
    result = same_whatever_the_borders(
        flipped(payments.log, 500), view_of(payments), bounds_of(payments)
    )
    assert result.problems() == [(checks.BATCH_CRC, "error")]
    assert result.stopped_at is None  # a bad CRC does not stop framing


# --- framing: batch-framing -----------------------------------------------------------------


def test_a_batch_length_past_the_end_stops_framing_at_once(payments: LocalSegment) -> None:
    # bytes 8..11 are the first batch's length: 0x00FF.... claims ~16 MiB, past the end
    result = same_whatever_the_borders(
        flipped(payments.log, 9), view_of(payments), bounds_of(payments)
    )
    assert result.batches == 0 and result.stopped_at == 0
    assert [(c, s) for c, s, _ in result.findings] == [
        (checks.BATCH_FRAMING, "error"),
        (checks.BATCH_FRAMING, "info"),
    ]
    assert "runs " in result.findings[0][2] and "past the segment's" in result.findings[0][2]


def test_a_later_batch_length_past_the_end(payments: LocalSegment) -> None:
    batch = batches_of(payments)[-3]
    log = bytearray(payments.log)
    log[batch.position + 8 : batch.position + 12] = (len(log)).to_bytes(4, "big")
    result = same_whatever_the_borders(log, view_of(payments), bounds_of(payments))
    assert result.problems() == [(checks.BATCH_FRAMING, "error")]
    assert result.stopped_at == batch.position
    assert result.last_offset == batch.base_offset - 1  # the batches before it were checked


@pytest.mark.parametrize("cut", [5, 30, 200])
def test_a_truncated_tail_is_an_error(payments: LocalSegment, cut: int) -> None:
    # a segment whose last batch is cut short, with a size that says so: not a broker's
    # truncated tail but corruption
    last = batches_of(payments)[-1]
    log = payments.log[: last.position + cut]
    bounds = bounds_of(payments, size=len(log))
    result = same_whatever_the_borders(log, view_of(payments), bounds)
    [(check, severity, message)] = [f for f in result.findings if f[1] == "error"]
    assert (check, severity) == (checks.BATCH_FRAMING, "error")
    if cut < PEEK_SIZE:  # not even the header: found at the end
        assert f"record batch at byte {last.position} is cut off: {cut} bytes" in message
    else:  # the header says where the batch would end
        missing = last.size_in_bytes - cut
        assert f"record batch at byte {last.position} runs {missing} bytes past" in message
    assert result.stopped_at == last.position


@pytest.mark.parametrize("trailing", [b"\0" * 8, b"\0" * 100])
def test_bytes_after_the_last_batch_are_an_error(payments: LocalSegment, trailing: bytes) -> None:
    log = payments.log + trailing
    result = same_whatever_the_borders(log, view_of(payments), bounds_of(payments, len(log)))
    assert result.problems() == [(checks.BATCH_FRAMING, "error")]
    assert result.stopped_at == len(payments.log)


def test_a_flipped_magic_is_framing_not_legacy(payments: LocalSegment) -> None:
    second = batches_of(payments)[1]
    log = flipped(payments.log, second.position + 16, 0x03)  # magic 2 -> 1
    result = same_whatever_the_borders(log, view_of(payments), bounds_of(payments))
    assert result.problems() == [(checks.BATCH_FRAMING, "error")]
    assert "has magic 1" in result.findings[0][2]


# --- framing: offsets -----------------------------------------------------------------------


def test_a_first_batch_that_does_not_start_at_the_start_offset(payments: LocalSegment) -> None:
    log = flipped(payments.log, 7, 0x01)  # baseOffset is outside the CRC
    result = same_whatever_the_borders(log, view_of(payments), bounds_of(payments))
    assert result.problems() == [(checks.OFFSETS, "error")]
    assert f"the segment starts at {payments.base_offset}" in result.findings[0][2]
    assert result.stopped_at == 0


def test_offsets_that_are_not_contiguous(payments: LocalSegment) -> None:
    batch = batches_of(payments)[4]
    log = flipped(payments.log, batch.position + 7, 0x40)
    result = same_whatever_the_borders(log, view_of(payments), bounds_of(payments))
    assert result.problems() == [(checks.OFFSETS, "error")]
    assert "offsets in a segment are contiguous" in result.findings[0][2]
    assert result.stopped_at == batch.position


def test_a_last_batch_that_ends_before_the_end_offset(payments: LocalSegment) -> None:
    # the log ends on a batch boundary, one batch early: whole batches, a wrong end
    last = batches_of(payments)[-1]
    log = payments.log[: last.position]
    bounds = bounds_of(payments, size=len(log))
    result = same_whatever_the_borders(log, view_of(payments), bounds)
    errors = [f for f in result.findings if f[1] == "error"]
    assert errors[0][:2] == (checks.OFFSETS, "error")
    assert (
        f"the segment's batches end at offset {last.base_offset - 1}; its metadata says "
        f"{bounds.end_offset}" in errors[0][2]
    )
    assert result.stopped_at is None  # the index entries after the end are still checked
    assert {c for c, _, _ in errors[1:]} <= {checks.OFFSET_INDEX, checks.TIME_INDEX}
    # without metadata the same log is clean as far as its batches go
    unknown = replace(bounds, end_offset=UNKNOWN_END)
    assert checks.OFFSETS not in {
        c for c, _, _ in scan(log, view_of(payments), unknown, end_known=False).findings
    }


@pytest.mark.parametrize(
    ("shift", "says"), [(1, "batches end at offset"), (-1, "outside the segment's")]
)
def test_an_end_offset_that_is_not_the_last_batch_end(
    payments: LocalSegment, shift: int, says: str
) -> None:
    bounds = bounds_of(payments)
    bounds = replace(bounds, end_offset=bounds.end_offset + shift)
    result = scan(payments.log, view_of(payments), bounds)
    assert result.problems()[0] == (checks.OFFSETS, "error")
    assert says in result.findings[0][2]


def test_an_empty_segment_is_an_error(payments: LocalSegment) -> None:
    result = scan(b"", IndexView(), bounds_of(payments, size=0))
    assert result.problems() == [(checks.OFFSETS, "error")]
    assert "batches end at no batch" in result.findings[0][2]


# --- framing: leader-epoch ------------------------------------------------------------------


def test_a_flipped_partition_leader_epoch_is_an_error(demo: DemoBucket) -> None:
    # inventory-0's first segment changes epoch inside (0, then 2): a batch of each
    segment = local_segment(demo, "inventory-0")
    view, bounds = view_of(segment), bounds_of(segment)
    assert len(bounds.epochs) == 2
    for batch in (batches_of(segment)[2], batches_of(segment)[-1]):
        log = flipped(segment.log, batch.position + 15, 0x01)  # outside the CRC
        result = same_whatever_the_borders(log, view, bounds)
        assert result.problems() == [(checks.LEADER_EPOCH, "error")]
        assert "carries leader epoch" in result.findings[0][2]
        assert result.stopped_at == batch.position


def test_a_batch_whose_epoch_belongs_to_the_other_side_of_a_change(demo: DemoBucket) -> None:
    segment = local_segment(demo, "inventory-0")
    bounds = bounds_of(segment)
    _, (second, second_start) = bounds.epochs
    before = [b for b in batches_of(segment) if b.last_offset < second_start][-1]
    log = bytearray(segment.log)
    log[before.position + 12 : before.position + 16] = second.to_bytes(4, "big")
    result = scan(log, view_of(segment), bounds)
    assert result.problems() == [(checks.LEADER_EPOCH, "error")]


# --- the transaction index against the markers ----------------------------------------------


@pytest.fixture
def txn_segment(demo: DemoBucket) -> LocalSegment:
    """payments-0's first segment: producer 5000 commits 0..13 (marker 14), aborts 24..38
    (marker 39) in one transaction that the index lists as (5000, 24, 39)."""
    segment = local_segment(demo, "payments-0")
    assert view_of(segment).txns[0][:3] == (5000, 24, 39)
    return segment


def with_txns(view: IndexView, txns: list[AbortedTxn]) -> IndexView:
    return replace(view, txns=txns)


def test_an_aborted_transaction_that_starts_too_late_returns_aborted_records(
    txn_segment: LocalSegment,
) -> None:
    view = view_of(txn_segment)
    (txn,) = view.txns
    view = with_txns(view, [txn._replace(first_offset=31)])
    result = same_whatever_the_borders(txn_segment.log, view, bounds_of(txn_segment))
    [(check, severity, message)] = result.findings
    assert (check, severity) == (checks.TXN_INDEX, "error")
    assert "ABORT marker of producer 5000 at offset 39" in message
    assert "its batches at offsets 24," in message and "return these aborted records" in message


def test_an_aborted_transaction_that_starts_too_early_drops_committed_records(
    txn_segment: LocalSegment,
) -> None:
    view = view_of(txn_segment)
    (txn,) = view.txns
    view = with_txns(view, [txn._replace(first_offset=8)])
    result = scan(txn_segment.log, view, bounds_of(txn_segment))
    [(check, severity, message)] = result.findings
    assert (check, severity) == (checks.TXN_INDEX, "error")
    assert "COMMIT marker of producer 5000 at offset 14" in message
    assert "drop these committed records" in message


def test_an_abort_marker_without_its_entry(txn_segment: LocalSegment) -> None:
    view = with_txns(view_of(txn_segment), [])
    result = scan(txn_segment.log, view, bounds_of(txn_segment))
    messages = [m for c, s, m in result.findings if (c, s) == (checks.TXN_INDEX, "error")]
    assert len(messages) == len(result.findings) == 2
    assert "at offset 39 has no transaction index entry" in messages[0]
    assert "return these aborted records" in messages[1]


def test_a_transaction_open_at_the_segment_end_is_not_judged(demo: DemoBucket) -> None:
    # payments-0's first segment ends inside producer 5000's transaction (47..48): its marker
    # is in the next segment, so its verdict cannot be checked here
    segment = local_segment(demo, "payments-0")
    assert batches_of(segment)[-2].is_transactional
    assert scan(segment.log, view_of(segment), bounds_of(segment)).findings == []


# --- the sink -------------------------------------------------------------------------------


def test_findings_per_check_are_capped_with_a_count_of_the_rest() -> None:
    sink = FindingSink(Where("t", 0, "s", "k"))
    for i in range(MAX_PER_CHECK + 7):
        sink.error("batch-crc", f"batch {i}")
    sink.warning("batch-crc", "other severity")
    out = sink.close()
    assert len(out) == MAX_PER_CHECK + 2
    assert out[-1].message.startswith("... and 7 more batch-crc findings")
