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
``startingOffsetsByTimestampStrategy=latest``; an ending one means latest.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import ConfigurationError, UnknownTopicOrPartitionError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.remote.keys import ObjectKey, Suffix
from gateway.remote.manifest import IndexType
from gateway.service.fetch import remote_bounds, resolve
from gateway.service.offsets import scan_window, timestamp_segment
from gateway.service.types import IsolationLevel
from gateway.spark.options import Bound, BoundKind, ReadOptions
from gateway.spark.plan import SegmentRef, Split, plan_partition
from gateway.spark.read import ReadContext, open_segment, sync_reader
from indexcache.offset_index import OffsetIndex
from indexcache.time_index import TimeIndex

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


async def _scan(opts: ReadOptions, rlmm: RemoteLogMetadataManager) -> None:
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


def load_metadata(opts: ReadOptions) -> RemoteLogMetadataManager:
    """The RLMM of the read: the catalog when one is given, else a scan of the bucket."""
    from gateway.commands.common import open_manager  # noqa: PLC0415

    if opts.catalog is not None:
        path = Path(opts.catalog)
        if not path.is_dir():
            raise ConfigurationError(f"option catalog={opts.catalog!r}: not a directory")
        return open_manager(path)
    rlmm = open_manager(None)
    try:
        asyncio.run(_scan(opts, rlmm))
    except BaseException:
        rlmm.close()
        raise
    return rlmm


def segment_ref(meta: RemoteLogSegmentMetadata, key_prefix: str, walk: int) -> SegmentRef:
    tp = meta.partition
    key = ObjectKey(
        key_prefix, tp.topic, tp.topic_id, tp.partition, meta.start_offset,
        meta.segment_id.id, Suffix.LOG,
    )  # fmt: skip
    return SegmentRef(
        key.key,
        meta.start_offset,
        meta.end_offset,
        meta.segment_size_in_bytes,
        meta.txn_index_empty,
        walk,
    )


def walk_segments(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, start: int, until: int | None
) -> list[tuple[RemoteLogSegmentMetadata, int, int]]:
    """The lineage walk from ``start`` (a consumer's fetch path): each finished segment with the
    offsets ``[lo, hi)`` only it contributes, up to the segment holding ``until - 1`` (to the
    end of the remote log when ``until`` is None)."""
    out: list[tuple[RemoteLogSegmentMetadata, int, int]] = []
    target = start
    meta = resolve(rlmm, tp, start)
    while meta is not None and (until is None or target < until):
        hi = meta.end_offset + 1
        if hi > target:
            out.append((meta, max(target, meta.start_offset), hi))
            target = hi
        meta = resolve(rlmm, tp, meta.end_offset + 1)
    return out


def offset_for_timestamp(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, timestamp: int, ctx: ReadContext
) -> int | None:
    """``findOffsetByTimestamp`` on the remote tier (None: no record at or after it)."""
    picked = timestamp_segment(rlmm, tp, timestamp)
    if picked is None:
        return None
    meta, start = picked
    ref = segment_ref(meta, ctx.key_prefix, 0)
    reader = sync_reader(ctx)
    segment = open_segment(ctx, ref)
    times = TimeIndex(
        reader.read_index_piece(segment, IndexType.TIMESTAMP) or b"", ref.start_offset
    )
    offsets = OffsetIndex(
        reader.read_index_piece(segment, IndexType.OFFSET) or b"", meta.start_offset
    )
    found = times.lookup(timestamp)
    cursor = offsets.lookup(max(start, found.offset, meta.start_offset)).position
    pending = b""
    for piece in reader.iter_range(segment, cursor, segment.size):
        buf = pending + piece
        hit, consumed = scan_window(buf, meta, timestamp, start)
        if hit is not None:
            return hit.offset
        pending = buf[consumed:]
    return None


def _resolve(
    bound: Bound,
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    ctx: ReadContext,
    *,
    ending: bool,
    strategy: str,
) -> int:
    start, end = remote_bounds(rlmm, tp)
    if bound.kind is BoundKind.EARLIEST:
        return start
    if bound.kind is BoundKind.LATEST:
        return end
    if bound.kind is BoundKind.OFFSET:
        return min(max(bound.value, start), end)
    found = offset_for_timestamp(rlmm, tp, bound.value, ctx)
    if found is not None:
        return found
    if ending or strategy == "latest":
        return end
    raise ConfigurationError(
        f"startingTimestamp {bound.value}: partition {tp.partition} of {tp.topic} has no record "
        "at or after it in the remote tier (startingOffsetsByTimestampStrategy=latest reads "
        "nothing from it instead)"
    )


def _partitions(rlmm: RemoteLogMetadataManager, opts: ReadOptions) -> list[TopicIdPartition]:
    topic_id = rlmm.resolve_topic(opts.topic, opts.topic_id)
    known = {tp.partition: tp for tp in rlmm.partitions(topic_id)}
    if opts.partitions is None:
        return [known[p] for p in sorted(known)]
    missing = sorted(set(opts.partitions) - set(known))
    if missing:
        raise UnknownTopicOrPartitionError(
            f"topic {opts.topic!r} has no remote data for partitions {missing}"
        )
    return [known[p] for p in opts.partitions]


def build_plan(opts: ReadOptions, rlmm: RemoteLogMetadataManager | None = None) -> ReadPlan:
    """Resolve bounds and cut splits (``rlmm``: already loaded metadata, else loaded here)."""
    own = rlmm is None
    manager = load_metadata(opts) if rlmm is None else rlmm
    ctx = context_of(opts)
    committed = opts.isolation is IsolationLevel.READ_COMMITTED
    splits: list[Split] = []
    ranges: list[PartitionRange] = []
    chains: list[tuple[int, tuple[SegmentRef, ...]]] = []
    try:
        for tp in _partitions(manager, opts):
            p = tp.partition
            lo = _resolve(
                opts.start.for_partition(p), manager, tp, ctx,
                ending=False, strategy=opts.start_timestamp_strategy,
            )  # fmt: skip
            hi = _resolve(opts.end.for_partition(p), manager, tp, ctx, ending=True, strategy="")
            if lo > hi:
                raise ConfigurationError(
                    f"partition {p} of {opts.topic}: the starting offset {lo} is after the "
                    f"ending offset {hi}"
                )
            ranges.append(PartitionRange(p, lo, hi))
            if lo == hi:
                continue
            walk = walk_segments(manager, tp, lo, None if committed else hi)
            refs = [segment_ref(meta, opts.key_prefix, i) for i, (meta, _, _) in enumerate(walk)]
            shares = [
                (ref, seg_lo, min(seg_hi, hi))
                for ref, (_, seg_lo, seg_hi) in zip(refs, walk, strict=True)
                if seg_lo < hi
            ]
            splits += plan_partition(opts.topic, p, shares, opts.max_bytes_per_partition)
            if committed:
                chains.append((p, tuple(r for r in refs if not r.txn_index_empty)))
    finally:
        if own:
            manager.close()
    context = ReadContext(
        ctx.store, ctx.key_prefix, ctx.key_pairs, ctx.include_headers, ctx.isolation,
        ctx.max_rows, tuple(chains),
    )  # fmt: skip
    return ReadPlan(context, tuple(splits), tuple(ranges))
