"""Driver side: the metadata, the resolved bounds and the splits of one read.

Runs once per read, in the Python process Spark plans the data source in. The metadata is the
RLMM the gateway serves from (:mod:`gateway.spark.rlmm`): a bucket scan into memory (one
listing of the manifests, the same registration order, displacement and epoch lineage as
``serve``), or a ``--state-dir`` catalog without any listing. Executors never list.

Bounds resolve as Spark's Kafka source resolves them, against the remote tier: ``earliest`` is
the remote log start, ``latest`` one past the highest remote offset (with read_committed the
remote last stable offset, :mod:`gateway.spark.stable`, as a broker's), an offset is clamped into
``[start, end]``, a timestamp is ``findOffsetByTimestamp`` (the segment from the metadata,
then the time index, the offset index and a record scan; ``remote-read-semantics.md`` §12.2).
A starting timestamp with no record at or after it fails the read unless
``startingOffsetsByTimestampStrategy=latest``; an ending one means latest. The timestamp search
(the service's) is :mod:`gateway.spark.timestamps`.

The lineage walk (:mod:`gateway.spark.walk`) never hops over a hole silently: the next segment
must start at or before the previous one's ``endOffset + 1``. With ``failOnDataLoss=true`` (the
default, as in Spark's Kafka source) a hole inside the read's range fails the plan with
:class:`~gateway.errors.RemoteGapError` naming the missing offsets (and the manifest that would
hold them, when the scan found it unreadable); a hole after the range ends a read_committed
walk there (a marker followed into it fails the task the same way). With
``failOnDataLoss=false`` a hole is skipped with a warning naming the offsets. A manifest the
scan could not read also claims what lies before the remote log start or after its end (a read
from the start or to the end), a whole partition, or the segments a timestamp search passes
over: :class:`~gateway.errors.CorruptManifestError` naming it, or a warning with
``failOnDataLoss=false`` (:mod:`gateway.spark.dataloss`). (A ``catalog`` records no unreadable
manifests: only its holes show.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import (
    ConfigurationError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.service.locate import Claim, remote_bounds
from gateway.service.types import IsolationLevel
from gateway.spark.dataloss import lost, missing
from gateway.spark.plan import SegmentRef, Split, plan_partition, segment_ref, share_bytes
from gateway.spark.read_options import Bound, BoundKind, ReadOptions
from gateway.spark.rlmm import Claims, load_with_claims
from gateway.spark.segments import ReadContext, TxnChain
from gateway.spark.stable import stable_end
from gateway.spark.timestamps import offset_for_timestamp
from gateway.spark.walk import walk_segments

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionRange:
    partition: int
    start_offset: int  # resolved, inclusive
    end_offset: int  # resolved, exclusive
    topic: str = ""


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
    """``bound`` as an offset of ``tp``'s remote tier. An explicit offset before the remote log
    start asks for records retention deleted: data loss (``failOnDataLoss``; skipped, the read
    starts at the log start). One past the remote end asks for records not tiered yet:
    :class:`OffsetOutOfRangeError` (Spark's Kafka source reports an offset past the latest as
    data loss in a streaming query, and refuses it in a batch one)."""
    start, end = remote_bounds(rlmm, tp)
    if bound.kind is BoundKind.EARLIEST:
        return start
    if bound.kind is BoundKind.LATEST:
        # read_committed: the remote LSO, as a broker's latest; unless an unreadable manifest
        # lies after the end (failOnDataLoss decides that read, as before the LSO existed)
        beyond = any(c.start_offset >= end for c in claims)
        if ctx.isolation is IsolationLevel.READ_COMMITTED and not beyond:
            return stable_end(rlmm, tp, ctx)
        return end
    if bound.kind is BoundKind.OFFSET:
        side = "ending" if ending else "starting"
        if bound.value < start:
            reason = f"the {side} offset {bound.value} is before the remote log start {start}"
            missing(tp, bound.value, start - 1, reason, fail=fail_on_data_loss)
            return start
        if bound.value > end:
            raise OffsetOutOfRangeError(
                f"{tp.topic}-{tp.partition}: the {side} offset {bound.value} is past the remote "
                f"log end {end} (records not tiered yet are not in the remote tier)",
                start,
                end,
            )
        return bound.value
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


def _topics(rlmm: RemoteLogMetadataManager, opts: ReadOptions, claims: Claims) -> list[str]:
    """The topics the read subscribes to: the named ones, or those of the remote tier (the
    metadata, and the manifests it could not read) whose names match ``subscribePattern``."""
    sub = opts.subscription
    if sub.pattern is None:
        return list(sub.topics)
    return sub.select([*rlmm.topics(), *(tp.topic for tp in claims)])


def _partitions(
    rlmm: RemoteLogMetadataManager,
    opts: ReadOptions,
    topic: str,
    claims: Claims,
    *,
    streaming: bool = False,
) -> list[TopicIdPartition]:
    """The partitions of ``topic`` the read takes. A named topic or partition without remote
    data fails a batch read with :class:`UnknownTopicOrPartitionError`; a streaming query
    logs it and takes it when it is tiered."""
    try:
        topic_id = rlmm.resolve_topic(topic, opts.topic_id)
    except UnknownTopicOrPartitionError as exc:
        if not streaming:
            raise
        log.warning("%s: nothing of it is tiered yet; read when it is", exc)
        return []
    known = {tp.partition: tp for tp in rlmm.partitions(topic_id)}
    claimed = {
        tp.partition: c
        for tp, c in claims.items()
        if tp.topic_id == topic_id and tp.partition not in known and c
    }
    asked = opts.partitions_of(topic)
    for p in sorted(claimed) if asked is None else asked:
        if p in claimed:
            lost(
                opts.fail_on_data_loss,
                f"partition {p} of {topic} has no readable segment",
                claimed[p],
            )
    if asked is None:
        return [known[p] for p in sorted(known)]
    absent = sorted(set(asked) - set(known) - set(claimed))
    if absent:
        message = f"topic {topic!r} has no remote data for partitions {absent}"
        if not streaming:
            raise UnknownTopicOrPartitionError(message)
        log.warning("%s yet; read when they are tiered", message)
    return [known[p] for p in asked if p in known]


def subscribed_partitions(
    rlmm: RemoteLogMetadataManager, opts: ReadOptions, claims: Claims, *, streaming: bool = False
) -> list[TopicIdPartition]:
    """Every partition the read takes, topic by topic. A pattern that matches no topic is
    :class:`UnknownTopicOrPartitionError` naming the topics there are; in ``streaming``, where
    a later trigger may find them, a warning, as for named topics not tiered yet."""
    topics = _topics(rlmm, opts, claims)
    if not topics:
        there = sorted(rlmm.topics())
        message = (
            f"{opts.subscription.describe()} matches no topic of the remote tier "
            f"(it holds {there if there else 'none'})"
        )
        if streaming:
            log.warning("%s", message)
            return []
        raise UnknownTopicOrPartitionError(message)
    return [
        tp for topic in topics for tp in _partitions(rlmm, opts, topic, claims, streaming=streaming)
    ]


def check_ends(
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
    where = f"partition {tp.partition} of {tp.topic}"
    before = [c for c in claims if c.start_offset < start]
    if before and lo == start:
        lost(
            opts.fail_on_data_loss, f"{where}: offsets before the remote log start {start}", before
        )
    after = [c for c in claims if c.start_offset >= end]
    if after and hi == end:
        lost(opts.fail_on_data_loss, f"{where}: offsets after the remote log end {end}", after)


def resolve_ranges(
    opts: ReadOptions, rlmm: RemoteLogMetadataManager, claims: Claims
) -> list[tuple[TopicIdPartition, int, int]]:
    """Each subscribed partition with its bounds resolved: offsets ``[lo, hi)``."""
    ctx = context_of(opts)
    out = []
    fail = opts.fail_on_data_loss
    for tp in subscribed_partitions(rlmm, opts, claims):
        p = tp.partition
        claimed = claims.get(tp, ())
        lo = _resolve(
            opts.start.for_partition(tp.topic, p), rlmm, tp, ctx, ending=False,
            strategy=opts.start_timestamp_strategy, claims=claimed, fail_on_data_loss=fail,
        )  # fmt: skip
        hi = _resolve(
            opts.end.for_partition(tp.topic, p), rlmm, tp, ctx, ending=True, strategy="",
            claims=claimed, fail_on_data_loss=fail,
        )  # fmt: skip
        if lo > hi:
            raise ConfigurationError(
                f"partition {p} of {tp.topic}: the starting offset {lo} is after the "
                f"ending offset {hi}"
            )
        bounds = remote_bounds(rlmm, tp)
        # A read to latest reads to the end even when read_committed stops it at the last
        # stable offset: a manifest after the end could hold the markers that move it.
        to_end = opts.end.for_partition(tp.topic, p).kind is BoundKind.LATEST
        check_ends(opts, tp, claimed, bounds=bounds, lo=lo, hi=bounds[1] if to_end else hi)
        out.append((tp, lo, hi))
    return out


def resolve_starts(
    opts: ReadOptions, rlmm: RemoteLogMetadataManager, claims: Claims
) -> list[tuple[TopicIdPartition, int]]:
    """A new streaming query's first offset of each subscribed partition (no ending bound to
    compare with: a start past read_committed's last stable offset waits for it)."""
    ctx = context_of(opts)
    out = []
    fail = opts.fail_on_data_loss
    for tp in subscribed_partitions(rlmm, opts, claims, streaming=True):
        claimed = claims.get(tp, ())
        lo = _resolve(
            opts.start.for_partition(tp.topic, tp.partition), rlmm, tp, ctx, ending=False,
            strategy=opts.start_timestamp_strategy, claims=claimed, fail_on_data_loss=fail,
        )  # fmt: skip
        check_ends(opts, tp, claimed, bounds=remote_bounds(rlmm, tp), lo=lo, hi=-1)
        out.append((tp, lo))
    return out


def plan_ranges(
    opts: ReadOptions,
    rlmm: RemoteLogMetadataManager,
    claims: Claims,
    ranges: Sequence[tuple[TopicIdPartition, int, int]],
) -> ReadPlan:
    """The splits reading offsets ``[lo, hi)`` of each partition: the lineage walk of each
    (a hole inside a range fails or is skipped by ``failOnDataLoss``), cut by
    ``maxBytesPerPartition``, or finer until there are ``minPartitions`` splits."""
    ctx = context_of(opts)
    committed = opts.isolation is IsolationLevel.READ_COMMITTED
    shares: list[tuple[TopicIdPartition, list[tuple[SegmentRef, int, int]]]] = []
    chains: list[TxnChain] = []
    for tp, lo, hi in ranges:
        if lo >= hi:
            continue
        walk = walk_segments(
            rlmm, tp, lo, hi, to_end=committed, fail_on_data_loss=opts.fail_on_data_loss,
            claims=claims.get(tp, ()),
        )  # fmt: skip
        refs = [
            segment_ref(meta, opts.key_prefix, i) for i, (meta, _, _) in enumerate(walk.segments)
        ]
        shares.append((
            tp,
            [
                (ref, seg_lo, min(seg_hi, hi))
                for ref, (_, seg_lo, seg_hi) in zip(refs, walk.segments, strict=True)
                if seg_lo < hi
            ],
        ))  # fmt: skip
        if committed:
            chains.append(TxnChain(tp.partition, tuple(refs), walk.gap, tp.topic))
    max_bytes = opts.max_bytes_per_partition
    if opts.min_partitions is not None:
        total = sum(share_bytes(ref, lo, hi) for _, walk in shares for ref, lo, hi in walk)
        max_bytes = min(max_bytes, max(1, total // opts.min_partitions))
    splits = [
        split
        for tp, walk in shares
        for split in plan_partition(tp.topic, tp.partition, walk, max_bytes)
    ]
    context = ReadContext(
        ctx.store, ctx.key_prefix, ctx.key_pairs, ctx.include_headers, ctx.isolation,
        ctx.max_rows, tuple(chains),
    )  # fmt: skip
    partition_ranges = tuple(
        PartitionRange(tp.partition, lo, hi, tp.topic) for tp, lo, hi in ranges
    )
    return ReadPlan(context, tuple(splits), partition_ranges)


def build_plan(
    opts: ReadOptions,
    rlmm: RemoteLogMetadataManager | None = None,
    claims: Claims | None = None,
) -> ReadPlan:
    """Resolve bounds and cut splits (``rlmm``: already loaded metadata, else loaded here,
    with ``claims``, the manifests its scan could not read)."""
    own = rlmm is None
    if rlmm is None:
        manager, claims = load_with_claims(opts)
    else:
        manager, claims = rlmm, claims or {}
    try:
        return plan_ranges(opts, manager, claims, resolve_ranges(opts, manager, claims))
    finally:
        if own:
            manager.close()
