"""read_committed for a fetch (``remote-read-semantics.md`` §8), proven against the markers.

§8's collection: from the first batch's base offset to the upper bound (the first offset-index
entry at or after the end of what was read in the last segment, else that segment's end + 1),
walking transaction indexes from the first segment read onwards until one search is complete;
segments whose transaction index is empty are skipped without a GET (KAFKA-16780), and the end
of the remote tier counts as complete.

The reads are first cut before the remote last stable offset (:mod:`gateway.service.stable`),
as a broker reads read_committed fetches up to its LSO: the transaction open at the remote tail
is then never followed to the end of the tier at every fetch. Then the proof
(:mod:`gateway.read.txn`): transactions still open where the response ends are
followed to their COMMIT or ABORT markers, and every transactional batch returned must get the
same verdict from the transaction index as from its marker. A transaction whose marker is not
in the remote tier yet ends the response before its first batch.
"""

from __future__ import annotations

import asyncio

from gateway.deadline import Deadline
from gateway.errors import TransactionPendingError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.read.framing import SegmentFramer
from gateway.read.txn import MarkerLedger, check_verdicts
from gateway.service.fetch import MIN_WINDOW, Fetcher
from gateway.service.locate import held, read_inline, resolve
from gateway.service.runs import SegmentRead, segment_bounds
from gateway.service.stable import StableBounds
from gateway.service.types import AbortedTransaction, FetchedBatches


async def aborted_transactions(
    fetcher: Fetcher, tp: TopicIdPartition, reads: list[SegmentRead], deadline: Deadline
) -> list[AbortedTransaction]:
    """§8 over what was read (see the module docstring)."""
    if not reads:
        return []
    last = reads[-1]
    indexes = await fetcher.indexes(last.meta, deadline)
    bound = indexes.upper_bound_at(last.end_position)
    upper = bound.offset if bound is not None else last.meta.end_offset + 1
    fetch_offset = reads[0].first_offset
    found: set[tuple[int, int]] = set()
    meta: RemoteLogSegmentMetadata | None = reads[0].meta
    while meta is not None:
        if not meta.txn_index_empty:
            indexes = await fetcher.indexes(meta, deadline)
            result = indexes.aborted_txns(fetch_offset, upper)
            found.update((t.producer_id, t.first_offset) for t in result.aborted_transactions)
            if result.is_complete:
                break
        meta = await _next_with_txn_index(fetcher.rlmm, tp, meta.end_offset + 1)
    return [AbortedTransaction(pid, first) for pid, first in sorted(found, key=lambda t: t[1])]


async def _next_with_txn_index(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, offset: int
) -> RemoteLogSegmentMetadata | None:
    """The next segment from ``offset`` whose transaction index is not empty: the first one
    by a point lookup on the event loop (:func:`held`); when that is not it, the skip runs in
    one thread hop, however many empty ones there are."""
    meta = await read_inline(rlmm, held, rlmm, tp, offset)
    if meta is not None and not meta.txn_index_empty:
        return meta
    return await asyncio.to_thread(_skip_empty, rlmm, tp, offset)


def _skip_empty(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, offset: int
) -> RemoteLogSegmentMetadata | None:
    meta = resolve(rlmm, tp, offset)
    while meta is not None and meta.txn_index_empty:
        meta = resolve(rlmm, tp, meta.end_offset + 1)
    return meta


async def committed(
    fetcher: Fetcher,
    tp: TopicIdPartition,
    reads: list[SegmentRead],
    deadline: Deadline,
    stable: StableBounds,
) -> tuple[list[SegmentRead], list[AbortedTransaction], int | None]:
    """read_committed, proven: ``reads`` cut before the last stable offset (as a broker reads
    up to its LSO), their aborted transactions (§8) checked against the control records.
    Returns the reads (also cut before a transaction whose marker is not tiered yet), their
    aborted transactions, and the new next offset (``None`` when not cut)."""
    new_next = None
    if reads and reads[-1].last_offset >= stable.stable:
        reads = _cut_before(reads, stable.stable)
        new_next = stable.stable
        if not reads:
            raise pending_error(tp, stable.stable, stable)
    aborted = await aborted_transactions(fetcher, tp, reads, deadline)
    ledger = MarkerLedger()
    batches = [b for r in reads for b in r.batches]
    for batch in batches:
        ledger.add(batch)
    if ledger.open_producers:
        await _follow_markers(fetcher, tp, reads[-1], ledger, deadline)
    cut = ledger.unresolved()
    if cut is not None:
        reads = _cut_before(reads, cut)
        if not reads:
            raise pending_error(tp, cut, stable)
        new_next = cut
        batches = [b for b in batches if b.base_offset < cut]
        aborted = await aborted_transactions(fetcher, tp, reads, deadline)
    check_verdicts(batches, aborted, ledger)
    return reads, aborted, new_next


def visible_prefix(
    reads: list[SegmentRead], stable: StableBounds
) -> tuple[list[SegmentRead], int | None] | None:
    """The answer of a read_committed fetch whose deadline passed before its transactions were
    proven: ``reads`` before their first transactional batch and before the last stable offset
    (batches read_committed shows whatever the transaction index says), with the offset they
    stop at (``None`` when all of ``reads`` is kept); ``None`` when no batch is left."""
    stop = stable.stable
    for batch in (b for r in reads for b in r.batches):
        if batch.base_offset >= stop or batch.is_transactional:
            stop = min(stop, batch.base_offset)
            break
    if not reads:
        return None
    if stop > reads[-1].last_offset:
        return reads, None
    kept = _cut_before(reads, stop)
    return (kept, stop) if kept else None


def pending_error(
    tp: TopicIdPartition, offset: int, bounds: StableBounds
) -> TransactionPendingError:
    """read_committed stops at ``offset``, the first offset of a transaction not decided in
    the remote tier: the typed error, with the partition's bounds."""
    return TransactionPendingError(
        f"{tp.topic}-{tp.partition}: the transaction starting at offset {offset} has no "
        "COMMIT or ABORT marker in the remote tier yet; read_committed cannot return it "
        "before its marker is tiered",
        log_start_offset=bounds.start,
        log_end_offset=bounds.end,
        last_stable_offset=bounds.stable,
        topic_id=tp.topic_id,
    )


async def _follow_markers(
    fetcher: Fetcher,
    tp: TopicIdPartition,
    last: SegmentRead,
    ledger: MarkerLedger,
    deadline: Deadline,
) -> None:
    """Read on from the end of ``last`` until every open transaction has met its marker or the
    remote tier ends (within the request's deadline)."""
    meta = last.meta
    framer = SegmentFramer(
        segment_bounds(meta, fetcher.object_key(meta)), last.end_position, after=last.last_offset
    )
    seen = last.last_offset + 1  # an overlapping upload repeats batches already followed
    while True:
        async for batches in fetcher.batches(meta, framer, MIN_WINDOW, deadline, grow=True):
            for batch in batches:
                if batch.last_offset >= seen:
                    ledger.close(batch)
            if not ledger.open_producers:
                return
        seen = framer.last_offset + 1
        following = await fetcher.following(tp, meta)
        if following is None:
            return
        meta = following
        framer = fetcher.framer(meta, await fetcher.indexes(meta, deadline), seen)


def _cut_before(reads: list[SegmentRead], offset: int) -> list[SegmentRead]:
    """``reads`` with every batch at or after ``offset`` dropped (views, not copies)."""
    out: list[SegmentRead] = []
    for r in reads:
        if r.first_offset >= offset:
            break
        if r.last_offset < offset:
            out.append(r)
            continue
        parts, positions = [], []
        for part, position in zip(r.parts, r.positions, strict=True):
            if part.first_offset >= offset:
                break
            if part.last_offset >= offset:  # the kept head of this part
                one = SegmentRead(r.meta, (part,), (position,))
                keep = [b for b in one.batches if b.base_offset < offset]
                end = keep[-1].position + keep[-1].size_in_bytes - position
                part = FetchedBatches(  # noqa: PLW2901 (the kept head of this part)
                    part.segment_start_offset,
                    part.data[:end],
                    part.first_offset,
                    keep[-1].last_offset,
                )
            parts.append(part)
            positions.append(position)
        out.append(SegmentRead(r.meta, tuple(parts), tuple(positions)))
        break
    return out
