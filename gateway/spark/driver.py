"""Driver side: the metadata, the resolved bounds and the splits of one read.

Runs once per read, in the Python process Spark plans the data source in. The metadata is the
RLMM the gateway serves from: a bucket scan into memory (one listing of the manifests, the
same registration order, displacement and epoch lineage as ``serve``), or a ``--state-dir``
catalog without any listing. Executors never list.

Bounds resolve as Spark's Kafka source resolves them, against the remote tier: ``earliest`` is
the remote log start, ``latest`` one past the highest remote offset, an offset is clamped into
``[start, end]``, a timestamp is ``findOffsetByTimestamp`` (the segment from the metadata,
then the time index, the offset index and a record scan; ``remote-read-semantics.md`` §12.2).
A starting timestamp with no record at or after it fails the read unless
``startingOffsetsByTimestampStrategy=latest``; an ending one means latest. The timestamp search
is the service's: indexes checked against the metadata, the segment framed strictly from the
offset-index floor, the time index entry checked against the batches it points at
(:class:`~gateway.read.timesearch.TimestampSearch`), and a segment passed over for its
``maxTimestampMs`` must not hold the timestamp by its time index.

The lineage walk never hops over a hole silently: the next segment must start at or before the
previous one's ``endOffset + 1``. With ``failOnDataLoss=true`` (the default, as in Spark's
Kafka source) a hole inside the read's range fails the plan with
:class:`~gateway.errors.RemoteGapError` naming the missing offsets (and the manifest that would
hold them, when the scan found it unreadable); a hole after the range ends a read_committed
walk there (a marker followed into it fails the task the same way). With
``failOnDataLoss=false`` a hole is skipped with a warning naming the offsets. A manifest the
scan could not read also claims what lies before the remote log start or after its end (a read
from the start or to the end), a whole partition, or the segments a timestamp search passes
over: :class:`~gateway.errors.CorruptManifestError` naming it, or a warning with
``failOnDataLoss=false``. (A ``catalog`` records no unreadable manifests: only its holes show.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway.errors import (
    ConfigurationError,
    CorruptManifestError,
    RemoteGapError,
    UnknownTopicOrPartitionError,
)
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.read.framing import SegmentFramer
from gateway.read.timesearch import TimestampSearch
from gateway.remote.keys import ObjectKey, Suffix
from gateway.service.fetch import Claim, remote_bounds, resolve
from gateway.service.offsets import timestamp_segment
from gateway.service.types import IsolationLevel
from gateway.spark.options import Bound, BoundKind, ReadOptions
from gateway.spark.plan import SegmentRef, Split, plan_partition
from gateway.spark.read import (
    ReadContext,
    TxnChain,
    frame,
    offset_index,
    open_segment,
    sync_reader,
    time_index,
)

Claims = Mapping[TopicIdPartition, Sequence[Claim]]
"""Manifests the bucket scan could not read, by partition: their offsets stay claimed."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionRange:
    partition: int
    start_offset: int  # resolved, inclusive
    end_offset: int  # resolved, exclusive


@dataclass(frozen=True, slots=True)
class ReadPlan:
    context: ReadContext
    splits: tuple[Split, ...]
    ranges: tuple[PartitionRange, ...]


def context_of(opts: ReadOptions) -> ReadContext:
    return ReadContext(
        store=opts.store,
        key_prefix=opts.key_prefix,
        key_pairs=opts.key_pairs,
        include_headers=opts.include_headers,
        isolation=opts.isolation,
        max_rows=opts.max_rows_per_batch,
    )


async def _scan(opts: ReadOptions, rlmm: RemoteLogMetadataManager) -> Claims:
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from gateway.metadata.scan import BucketScanner, checkpoint_reader  # noqa: PLC0415
    from gateway.remote.keyring import KeyRing  # noqa: PLC0415
    from gateway.remote.reader import SegmentReader  # noqa: PLC0415
    from gateway.storage.factory import open_store  # noqa: PLC0415
    from gateway.storage.retry import Retrier, RetryPolicy  # noqa: PLC0415

    spec = opts.store
    store = await open_store(
        spec.url, endpoint_url=spec.endpoint_url, region=spec.region, path_style=spec.path_style
    )
    try:
        with ThreadPoolExecutor(2, thread_name_prefix="plan") as pool:
            reader = SegmentReader(store, Retrier(RetryPolicy()), pool)
            scanner = BucketScanner(
                store,
                rlmm,
                key_prefix=opts.key_prefix,
                checkpoint_reader=checkpoint_reader(reader, KeyRing.from_specs(opts.key_pairs)),
            )
            report = await scanner.scan()
    finally:
        await store.close()
    for key, reason in sorted(report.skipped.items()):
        log.warning("bucket scan skipped %s: %s", key, reason)
    claims: dict[TopicIdPartition, list[Claim]] = {}
    for tp, unreadable in scanner.unreadable_all():
        claims.setdefault(tp, []).append(unreadable)
    return claims


def load_metadata(opts: ReadOptions) -> RemoteLogMetadataManager:
    """The RLMM of the read: the catalog when one is given, else a scan of the bucket."""
    return _load(opts)[0]


def _load(opts: ReadOptions) -> tuple[RemoteLogMetadataManager, Claims]:
    """The RLMM and the unreadable manifests the scan found (none known from a catalog)."""
    from gateway.metadata.open import open_manager  # noqa: PLC0415

    if opts.catalog is not None:
        path = Path(opts.catalog)
        if not path.is_dir():
            raise ConfigurationError(f"option catalog={opts.catalog!r}: not a directory")
        return open_manager(path), {}
    rlmm = open_manager(None)
    try:
        claims = asyncio.run(_scan(opts, rlmm))
    except BaseException:
        rlmm.close()
        raise
    return rlmm, claims


def object_key(meta: RemoteLogSegmentMetadata, key_prefix: str, suffix: Suffix) -> str:
    tp = meta.partition
    return ObjectKey(
        key_prefix, tp.topic, tp.topic_id, tp.partition, meta.start_offset,
        meta.segment_id.id, suffix,
    ).key  # fmt: skip


def segment_ref(meta: RemoteLogSegmentMetadata, key_prefix: str, walk: int) -> SegmentRef:
    return SegmentRef(
        object_key(meta, key_prefix, Suffix.LOG),
        meta.start_offset,
        meta.end_offset,
        meta.segment_size_in_bytes,
        meta.txn_index_empty,
        walk,
        tuple(sorted(meta.segment_leader_epochs, key=lambda e: e[1])),
    )


@dataclass(frozen=True, slots=True)
class Walk:
    """A lineage walk: each finished segment with the offsets ``[lo, hi)`` only it
    contributes; ``gap``: the hole (inclusive) after the read's range where it stopped."""

    segments: list[tuple[RemoteLogSegmentMetadata, int, int]] = field(default_factory=list)
    gap: tuple[int, int] | None = None


def _hole(tp: TopicIdPartition, lo: int, hi: int, claims: Sequence[Claim], *, fail: bool) -> None:
    """Offsets ``lo..hi`` are held by no readable segment: fail, or warn and skip them."""
    where = f"{tp.topic}-{tp.partition}"
    message = f"no remote segment of {where} holds offsets {lo}..{hi}: the metadata has a hole"
    lost = [c for c in claims if lo <= c.start_offset <= hi]
    if lost:
        message += "; " + "; ".join(
            f"the manifest {c.key} of the segment from offset {c.start_offset} cannot be read "
            f"({c.reason})"
            for c in lost
        )
    if fail:
        raise RemoteGapError(f"{message} (failOnDataLoss=false skips it)", lo, hi)
    log.warning("%s: skipped (failOnDataLoss=false)", message)


def walk_segments(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    start: int,
    until: int,
    *,
    to_end: bool = False,
    fail_on_data_loss: bool = True,
    claims: Sequence[Claim] = (),
) -> Walk:
    """The lineage walk from ``start`` (a consumer's fetch path) up to the segment holding
    ``until - 1``, or to the end of the remote log when ``to_end``.

    The next segment must start at or before the previous one's ``endOffset + 1``. A hole
    before ``until`` raises :class:`RemoteGapError` (``fail_on_data_loss``) or is logged and
    skipped; one after it ends the walk (``Walk.gap``) or is skipped the same way."""
    walk = Walk()
    target = query = start
    meta = resolve(rlmm, tp, start)
    while meta is not None and (to_end or target < until):
        if meta.start_offset > target:
            if target >= until and fail_on_data_loss:
                return Walk(walk.segments, (target, meta.start_offset - 1))
            _hole(tp, target, meta.start_offset - 1, claims, fail=fail_on_data_loss)
        hi = meta.end_offset + 1
        if hi > target:
            walk.segments.append((meta, max(target, meta.start_offset), hi))
            target = hi
        query = max(query, meta.end_offset) + 1  # always forward
        meta = resolve(rlmm, tp, query)
    if target < until:  # the segments end before the remote log's end
        _hole(tp, target, until - 1, claims, fail=fail_on_data_loss)
    return walk


def _check_skipped(ctx: ReadContext, meta: RemoteLogSegmentMetadata | None, timestamp: int) -> None:
    """A segment passed over because its metadata's max timestamp is below ``timestamp`` must
    hold no such timestamp: its time index's last entry (its largest timestamp) says so; else
    the metadata is corrupt (as the service's ``OffsetFinder``)."""
    if meta is None or meta.max_timestamp_ms >= timestamp:
        return
    ref = segment_ref(meta, ctx.key_prefix, 0)
    last = time_index(sync_reader(ctx), open_segment(ctx, ref), ref).last_entry()
    if last.timestamp >= timestamp:
        raise CorruptManifestError(
            f"{object_key(meta, ctx.key_prefix, Suffix.MANIFEST)}: maxTimestampMs is "
            f"{meta.max_timestamp_ms}, but the segment's time index holds timestamp "
            f"{last.timestamp} at offset {last.offset}"
        )


def offset_for_timestamp(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    timestamp: int,
    ctx: ReadContext,
    *,
    claims: Sequence[Claim] = (),
    fail_on_data_loss: bool = True,
) -> int | None:
    """``findOffsetByTimestamp`` on the remote tier (None: no record at or after it). A search
    that passes over a segment whose manifest cannot be read (``claims``) cannot know the
    answer was not in it: an error, or a warning without ``fail_on_data_loss``."""
    picked = timestamp_segment(rlmm, tp, timestamp)
    where = f"partition {tp.partition} of {tp.topic}: timestamp {timestamp}"
    passed = [c for c in claims if picked is None or c.start_offset < picked[0].start_offset]
    if passed:
        _lost(fail_on_data_loss, f"{where}: the answer may be in an unreadable segment", passed)
    if picked is None:
        _, end = remote_bounds(rlmm, tp)
        _check_skipped(ctx, resolve(rlmm, tp, end - 1) if end > 0 else None, timestamp)
        return None
    meta, start = picked
    if meta.start_offset > start:
        _check_skipped(ctx, resolve(rlmm, tp, meta.start_offset - 1), timestamp)
    ref = segment_ref(meta, ctx.key_prefix, 0)
    reader = sync_reader(ctx)
    segment = open_segment(ctx, ref)
    entry = time_index(reader, segment, ref).lookup(timestamp)
    floor = offset_index(reader, segment, ref).lookup(max(start, entry.offset, ref.start_offset))
    framer = SegmentFramer(ref.bounds, floor.position, floor.offset)
    search = TimestampSearch(ref.key, timestamp, start, entry, from_segment_start=framer.start == 0)
    for batch in frame(reader, segment, framer, ref.size):
        hit = search.add(batch)
        if hit is not None:
            return hit.offset
    search.finish(meta.max_timestamp_ms, meta.start_offset)
    return None


def _resolve(
    bound: Bound,
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    ctx: ReadContext,
    *,
    ending: bool,
    strategy: str,
    claims: Sequence[Claim] = (),
    fail_on_data_loss: bool = True,
) -> int:
    start, end = remote_bounds(rlmm, tp)
    if bound.kind is BoundKind.EARLIEST:
        return start
    if bound.kind is BoundKind.LATEST:
        return end
    if bound.kind is BoundKind.OFFSET:
        return min(max(bound.value, start), end)
    found = offset_for_timestamp(
        rlmm, tp, bound.value, ctx, claims=claims, fail_on_data_loss=fail_on_data_loss
    )
    if found is not None:
        return found
    if ending or strategy == "latest":
        return end
    raise ConfigurationError(
        f"startingTimestamp {bound.value}: partition {tp.partition} of {tp.topic} has no record "
        "at or after it in the remote tier (startingOffsetsByTimestampStrategy=latest reads "
        "nothing from it instead)"
    )


def _partitions(
    rlmm: RemoteLogMetadataManager, opts: ReadOptions, claims: Claims
) -> list[TopicIdPartition]:
    topic_id = rlmm.resolve_topic(opts.topic, opts.topic_id)
    known = {tp.partition: tp for tp in rlmm.partitions(topic_id)}
    claimed = {
        tp.partition: c
        for tp, c in claims.items()
        if tp.topic_id == topic_id and tp.partition not in known and c
    }
    asked = sorted(claimed) if opts.partitions is None else opts.partitions
    for p in asked:
        if p in claimed:
            _lost(
                opts.fail_on_data_loss,
                f"partition {p} of {opts.topic} has no readable segment",
                claimed[p],
            )
    if opts.partitions is None:
        return [known[p] for p in sorted(known)]
    missing = sorted(set(opts.partitions) - set(known) - set(claimed))
    if missing:
        raise UnknownTopicOrPartitionError(
            f"topic {opts.topic!r} has no remote data for partitions {missing}"
        )
    return [known[p] for p in opts.partitions if p in known]


def _lost(fail: bool, what: str, claims: Sequence[Claim]) -> None:
    """Records the read would include are in segments whose manifests cannot be read."""
    message = f"{what}: " + "; ".join(
        f"the manifest {c.key} of the segment from offset {c.start_offset} cannot be read "
        f"({c.reason})"
        for c in claims
    )
    if fail:
        raise CorruptManifestError(f"{message} (failOnDataLoss=false skips it)")
    log.warning("%s: skipped (failOnDataLoss=false)", message)


def _check_ends(
    opts: ReadOptions,
    tp: TopicIdPartition,
    claims: Sequence[Claim],
    *,
    bounds: tuple[int, int],
    lo: int,
    hi: int,
) -> None:
    """Unreadable manifests before the remote log start (a read from it) or after its end (a
    read to it) would have held records of the read."""
    start, end = bounds
    where = f"partition {tp.partition} of {opts.topic}"
    before = [c for c in claims if c.start_offset < start]
    if before and lo == start:
        _lost(
            opts.fail_on_data_loss, f"{where}: offsets before the remote log start {start}", before
        )
    after = [c for c in claims if c.start_offset >= end]
    if after and hi == end:
        _lost(opts.fail_on_data_loss, f"{where}: offsets after the remote log end {end}", after)


def build_plan(
    opts: ReadOptions,
    rlmm: RemoteLogMetadataManager | None = None,
    claims: Claims | None = None,
) -> ReadPlan:
    """Resolve bounds and cut splits (``rlmm``: already loaded metadata, else loaded here,
    with ``claims``, the manifests its scan could not read)."""
    own = rlmm is None
    if rlmm is None:
        manager, claims = _load(opts)
    else:
        manager, claims = rlmm, claims or {}
    ctx = context_of(opts)
    committed = opts.isolation is IsolationLevel.READ_COMMITTED
    splits: list[Split] = []
    ranges: list[PartitionRange] = []
    chains: list[TxnChain] = []
    try:
        for tp in _partitions(manager, opts, claims):
            p = tp.partition
            claimed = claims.get(tp, ())
            fail = opts.fail_on_data_loss
            lo = _resolve(
                opts.start.for_partition(p), manager, tp, ctx, ending=False,
                strategy=opts.start_timestamp_strategy, claims=claimed, fail_on_data_loss=fail,
            )  # fmt: skip
            hi = _resolve(
                opts.end.for_partition(p), manager, tp, ctx, ending=True, strategy="",
                claims=claimed, fail_on_data_loss=fail,
            )  # fmt: skip
            if lo > hi:
                raise ConfigurationError(
                    f"partition {p} of {opts.topic}: the starting offset {lo} is after the "
                    f"ending offset {hi}"
                )
            ranges.append(PartitionRange(p, lo, hi))
            _check_ends(opts, tp, claimed, bounds=remote_bounds(manager, tp), lo=lo, hi=hi)
            if lo == hi:
                continue
            walk = walk_segments(
                manager, tp, lo, hi,
                to_end=committed, fail_on_data_loss=fail, claims=claimed,
            )  # fmt: skip
            refs = [
                segment_ref(meta, opts.key_prefix, i)
                for i, (meta, _, _) in enumerate(walk.segments)
            ]
            shares = [
                (ref, seg_lo, min(seg_hi, hi))
                for ref, (_, seg_lo, seg_hi) in zip(refs, walk.segments, strict=True)
                if seg_lo < hi
            ]
            splits += plan_partition(opts.topic, p, shares, opts.max_bytes_per_partition)
            if committed:
                chains.append(TxnChain(p, tuple(refs), walk.gap))
    finally:
        if own:
            manager.close()
    context = ReadContext(
        ctx.store, ctx.key_prefix, ctx.key_pairs, ctx.include_headers, ctx.isolation,
        ctx.max_rows, tuple(chains),
    )  # fmt: skip
    return ReadPlan(context, tuple(splits), tuple(ranges))
