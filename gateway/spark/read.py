"""Executor side: one split's records as Arrow record batches (no pyspark imported here).

Per split: the segment (:mod:`gateway.spark.segments`: its manifest, the RSA unwrap of its data
key when it is encrypted), its offset index only when the split is part of a segment
(:func:`~gateway.spark.plan.split_byte_range`), checked against the segment's metadata before it
is used, then the split's bytes framed strictly (:func:`~gateway.spark.segments.frame`): no
truncated tail, contiguous offsets inside the segment's range, the leader epoch of every batch
by the segment's map, the offset-index entry a split starts from. A split that reads to the end
of its segment gets the end checks (no bytes left over, the last batch ends at ``endOffset``);
one that ends at an offset-index position inside the segment must end exactly there, the next
batch there must continue its offsets (8 bytes read past the split, usually from the chunk
already read), and when it is the last split of a range ending inside the segment its batches
must reach the range's last offset. Every batch in the range has its CRC checked, control
batches included; batches outside ``[start_offset, end_offset)`` are skipped and records
filtered to it.

read_committed follows ``remote-read-semantics.md`` §8 per split: the aborted transactions
overlapping ``[first batch's base offset, segment end]`` are collected from the transaction
indexes (checked against the metadata) of this segment and the following ones (segments whose
index is empty are skipped without a GET), until one search is complete or the remote log ends;
then the consumer's filter (:class:`~gateway.read.txn.AbortedFilter`) drops aborted batches and
control batches. The verdicts are then proven against the control records
(:class:`~gateway.read.txn.MarkerLedger`, :func:`~gateway.read.txn.check_verdicts`): a
transaction still open where the split ends is followed forward, through the rest of the
segment and the following segments of the partition's lineage, to its marker; one whose marker
is not in the remote tier yet fails the split (:class:`~gateway.errors.TransactionPendingError`),
one whose marker could lie in a hole of the lineage fails it with
:class:`~gateway.errors.RemoteGapError`. The proof completes when the split's batches have all
been read, so a failure fails the task (and the job) after earlier Arrow batches of the split
were yielded: a job never succeeds with them, but a consumer that stops early (``limit``) gets
rows whose transaction was not proven yet.

Batches in range are decoded many at a time by :class:`~gateway.spark.columns.FastColumns`
(a compiled pass straight into Arrow buffers, the reference decoder when it objects) and
yielded as Arrow batches of at most ``max_rows`` rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa

from gateway.errors import (
    CorruptDataError,
    CorruptIndexError,
    RemoteGapError,
    TransactionPendingError,
    add_context,
)
from gateway.heap import task_started
from gateway.kafka.batch import HEADER_SIZE, RecordBatch
from gateway.read.framing import SegmentFramer
from gateway.read.txn import AbortedFilter, MarkerLedger, check_verdicts
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.service.types import AbortedTransaction, IsolationLevel
from gateway.spark.columns import FastColumns
from gateway.spark.plan import SegmentRef, Split, region, split_byte_range, start_entry
from gateway.spark.segments import (
    ReadContext,
    TxnChain,
    frame,
    offset_index,
    open_segment,
    sync_reader,
    txn_index,
)

MAX_GROUP_BYTES: Final = 64 << 20  # records bytes decoded in one pass (int32 Arrow offsets)


def _chain_from(ctx: ReadContext, split: Split) -> tuple[tuple[SegmentRef, ...], TxnChain | None]:
    """The split's segment and the ones after it in its partition's lineage."""
    chain = ctx.txn_chain(split.topic, split.partition)
    ref = split.segment
    if chain is None:
        return (ref,), None
    return (ref, *(r for r in chain.refs if r.walk > ref.walk)), chain


def aborted_transactions(
    ctx: ReadContext, reader: SyncSegmentReader, split: Split, fetch_offset: int
) -> list[AbortedTransaction]:
    """§8 for a split: from ``fetch_offset`` (its first batch's base offset) up to its
    segment's end, walking transaction indexes forward until a search is complete (the end of
    the remote tier counts as one)."""
    upper = split.segment.end_offset + 1
    found: set[tuple[int, int]] = set()
    refs, _ = _chain_from(ctx, split)
    for ref in refs:
        if ref.txn_index_empty:
            continue
        index = txn_index(reader, open_segment(ctx, ref), ref)
        result = index.collect_aborted_txns(fetch_offset, upper)
        found.update((t.producer_id, t.first_offset) for t in result.aborted_transactions)
        if result.is_complete:
            break
    return [AbortedTransaction(pid, first) for pid, first in sorted(found, key=lambda t: t[1])]


@dataclass(slots=True)
class _Proof:
    """read_committed of one split: the index's verdicts (the consumer's filter over the §8
    collection) and what is needed to prove them against the markers afterwards."""

    aborted: list[AbortedTransaction]
    live: AbortedFilter = field(init=False)
    ledger: MarkerLedger = field(default_factory=MarkerLedger)
    # the batches check_verdicts replays: control batches whole, transactional data batches
    # the split returns as their header only (verdicts read nothing else), copied so that the
    # read's buffers are not held
    kept: list[RecordBatch] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.live = AbortedFilter(self.aborted)

    def accepts(self, batch: RecordBatch, returned: bool) -> bool:
        """The index's verdict; ``returned``: the batch has offsets the split returns."""
        verdict = self.live.accepts(batch)
        if batch.is_control:
            self.ledger.add(batch)
            self.kept.append(RecordBatch(memoryview(bytes(batch.view)), batch.position))
        elif returned and batch.is_transactional and batch.producer_id >= 0:
            self.ledger.add(batch)
            header = memoryview(bytes(batch.view[:HEADER_SIZE]))
            self.kept.append(RecordBatch(header, batch.position))
        return verdict


def read_split(split: Split, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
    """The records of ``split`` as Arrow batches of at most ``ctx.max_rows`` rows."""
    task_started()
    reader = sync_reader(ctx)
    ref = split.segment
    segment = open_segment(ctx, ref)
    index = None if split.whole_segment else offset_index(reader, segment, ref)
    start, end = split_byte_range(split, index)
    if start >= end:
        return
    region_end = region(split, index)[1]
    framer = SegmentFramer(ref.bounds, start, start_entry(index, start))
    read_committed = ctx.isolation is IsolationLevel.READ_COMMITTED
    proof: _Proof | None = None
    lo, hi = split.start_offset, split.end_offset
    columns = FastColumns(split.topic, split.partition, ctx.include_headers, lo, hi)
    last: RecordBatch | None = None  # the last batch taken (base offset below hi)
    for batch in frame(reader, segment, framer, end, check_next=end < region_end):
        if batch.base_offset >= hi:
            break
        try:
            batch.ensure_valid()
        except CorruptDataError as exc:
            raise add_context(exc, ref.key) from None
        last = batch
        if read_committed:
            if proof is None:
                # From the first batch read, as Kafka's fetch: a marker before it is another
                # split's business (it would otherwise abort this producer's later batches).
                proof = _Proof(aborted_transactions(ctx, reader, split, batch.base_offset))
            if not proof.accepts(batch, batch.last_offset >= lo):
                continue
        if batch.is_control or batch.last_offset < lo:
            continue
        if columns.held and columns.size + batch.size_in_bytes > MAX_GROUP_BYTES:
            yield from _pieces(columns.flush(), ctx.max_rows)
        columns.add(batch)
        if columns.rows >= ctx.max_rows:
            yield from _pieces(columns.flush(), ctx.max_rows)
    if end == region_end < ref.size and framer.last_offset < hi - 1:
        # The range ends inside the segment, where the offset index says: at the entry after
        # the one holding hi - 1, so the batches before it must reach hi - 1.
        raise CorruptIndexError(
            f"{ref.key}: the offset index puts offset {hi - 1} before byte {end}, but the "
            f"batches there end at offset {framer.last_offset}"
        )
    if proof is not None and last is not None:
        if proof.ledger.open_producers:
            _follow_markers(ctx, reader, split, proof.ledger, last)
        check_verdicts(proof.kept, proof.aborted, proof.ledger)
    if columns.held:
        yield from _pieces(columns.flush(), ctx.max_rows)


def _follow_markers(
    ctx: ReadContext,
    reader: SyncSegmentReader,
    split: Split,
    ledger: MarkerLedger,
    last: RecordBatch,
) -> None:
    """Read on after ``last`` (the split's last batch) until every transaction open in
    ``ledger`` has met its marker: through the rest of the segment, then the following
    segments of the lineage (each from byte 0, framed and checked like any read)."""
    refs, chain = _chain_from(ctx, split)
    end = last.position + last.size_in_bytes
    framer = SegmentFramer(refs[0].bounds, end, after=last.last_offset)
    seen = last.last_offset + 1  # an overlapping upload repeats batches already followed
    pending = ledger.open_producers
    where = f"{split.topic}-{split.partition}"
    for n, ref in enumerate(refs):
        if n and ref.start_offset > seen:
            # A hole the walk skipped (failOnDataLoss=false): the open transactions' markers
            # may be in it, so their batches cannot be proven committed or aborted.
            raise RemoteGapError(
                f"{where}: the transaction starting at offset {ledger.unresolved()} has no "
                f"marker before offset {seen}, and no remote segment holds offsets "
                f"{seen}..{ref.start_offset - 1}: its marker may be lost",
                seen,
                ref.start_offset - 1,
            )
        if n:
            framer = SegmentFramer(ref.bounds)
        for batch in frame(reader, open_segment(ctx, ref), framer, ref.size):
            if batch.last_offset < seen or batch.producer_id not in pending:
                continue
            batch.ensure_valid()
            ledger.close(batch)
            pending = ledger.open_producers
            if not pending:
                return
        seen = max(seen, framer.last_offset + 1)
    first = ledger.unresolved()
    if chain is not None and chain.gap is not None:
        lo, hi = chain.gap
        raise RemoteGapError(
            f"{where}: the transaction starting at offset {first} has no marker before offset "
            f"{lo}, and no remote segment holds offsets {lo}..{hi}: its marker may be lost",
            lo,
            hi,
        )
    raise TransactionPendingError(
        f"{where}: the transaction starting at offset {first} has no COMMIT or ABORT marker in "
        "the remote tier yet; read_committed cannot return it before its marker is tiered"
    )


def _pieces(batch: pa.RecordBatch, max_rows: int) -> Iterator[pa.RecordBatch]:
    """``batch`` in zero-copy slices of at most ``max_rows`` rows (none when it is empty)."""
    for start in range(0, batch.num_rows, max_rows):
        yield batch.slice(start, max_rows)
