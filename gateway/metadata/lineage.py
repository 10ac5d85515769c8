"""The leader-epoch lineage of a bucket scan: checkpoints read, checked and recorded.

Each partition's newest new segment carries, in its ``.indexes``, the broker's leader-epoch
checkpoint: the whole epoch lineage up to that segment. It is read before the catalog changes
(a store fault aborts the pass), and recorded only where the segments' own epoch maps agree
with it (:func:`check_lineage`); a checkpoint that cannot be parsed or is missing, or one the
configured keys cannot open, is reported and passed over (the lineage then comes from the
epoch maps). One that parses but disagrees with the epoch maps is reported and recorded as a
dispute (:meth:`~gateway.metadata.manager.RemoteLogMetadataManager.dispute_epoch_lineage`):
either it or an epoch map is damaged, and the answers that carry or depend on leader epochs
are refused while it stands (:mod:`gateway.service.offsets`), rather than given from epoch
maps that may be the damaged ones.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from gateway.deadline import Deadline
from gateway.errors import ConfigurationError, CorruptCheckpointError, GatewayError
from gateway.kafka.epoch import LeaderEpochCache, parse_leader_epoch_checkpoint
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.manifests import ReadManifest, ScanReport, is_store_fault
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.metadata.views import MetadataViews
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix
from gateway.remote.manifest import IndexType, SegmentManifest
from gateway.remote.reader import RemoteSegment, SegmentReader

CheckpointReader = Callable[[ObjectKey, SegmentManifest], Awaitable[bytes | None]]
"""Reads the LEADER_EPOCH piece of a segment's ``.indexes`` (``None`` when it cannot)."""

Checkpoint = tuple[RemoteLogSegmentMetadata, ObjectKey, bytes, bytes | None]
"""A segment, its key, its checkpoint, and the checkpoint of the partition's segment before it
when this pass read that too (two agreeing checkpoints reveal a moved log start)."""


def checkpoint_reader(
    reader: SegmentReader, keys: KeyRing, *, timeout: float = 30.0
) -> CheckpointReader:
    """A :data:`CheckpointReader` over a segment reader; segments encrypted with a key pair
    that is not in ``keys`` are passed over (``None``), not failed."""

    async def read(key: ObjectKey, manifest: SegmentManifest) -> bytes | None:
        enc = manifest.encryption
        if enc is not None and enc.key_id not in keys:
            return None
        segment = await asyncio.to_thread(RemoteSegment.open, key, manifest, keys)  # RSA unwrap
        pieces = await reader.read_indexes(segment, Deadline.after(timeout))
        return pieces[IndexType.LEADER_EPOCH]

    return read


def _skip(report: ScanReport, key: ObjectKey, exc: GatewayError) -> None:
    report.skipped[key.with_suffix(Suffix.INDEXES).key] = f"{type(exc).__name__}: {exc}"


async def read_checkpoints(
    read_checkpoint: CheckpointReader,
    read: list[ReadManifest],
    known: dict[uuid.UUID, RemoteLogSegmentMetadata],
    listed: dict[uuid.UUID, ObjectKey],
    report: ScanReport,
) -> list[Checkpoint]:
    """The leader-epoch checkpoint of each partition's newest new segment (``read``), unless
    a segment the catalog keeps (``known`` and still ``listed``) ends later. A corrupt or
    missing checkpoint, or one that cannot be opened with the configured keys, is reported and
    passed over; a store fault raises."""
    newest: dict[TopicIdPartition, ReadManifest] = {}
    before: dict[TopicIdPartition, ReadManifest] = {}  # the one before the newest, if read
    for entry in sorted(read, key=lambda e: e[2].end_offset):
        tp = entry[2].partition
        if tp in newest:
            before[tp] = newest[tp]
        newest[tp] = entry
    staying: dict[TopicIdPartition, int] = {}  # partition -> highest end already kept
    for sid, m in known.items():
        if sid in listed:
            staying[m.partition] = max(staying.get(m.partition, -1), m.end_offset)
    out: list[Checkpoint] = []
    for tp, (key, manifest, meta) in newest.items():
        if staying.get(tp, -1) > meta.end_offset:
            continue  # an older segment than what the manager has: its lineage is shorter
        data = await _read_one(read_checkpoint, key, manifest, report)
        if data is None:
            continue
        previous = None
        if tp in before:
            previous = await _read_one(read_checkpoint, before[tp][0], before[tp][1], report)
        out.append((meta, key, data, previous))
    return out


async def _read_one(
    read_checkpoint: CheckpointReader, key: ObjectKey, manifest: SegmentManifest, report: ScanReport
) -> bytes | None:
    """One checkpoint; a corrupt or missing one is reported (``None``), a store fault raises."""
    try:
        return await read_checkpoint(key, manifest)
    except GatewayError as exc:
        if is_store_fault(exc) and not isinstance(exc, ConfigurationError):
            raise
        _skip(report, key, exc)
        return None


def record_lineages(
    manager: RemoteLogMetadataManager, checkpoints: list[Checkpoint], report: ScanReport
) -> int:
    """Record the checkpoints :func:`read_checkpoints` read, each checked against the catalog
    (blocking); returns how many were recorded."""
    count = 0
    for meta, key, data, before in checkpoints:
        tp = meta.partition
        latest = manager.list_remote_log_segments(tp)
        if latest and max(m.end_offset for m in latest) > meta.end_offset:
            continue  # an older segment than what the manager has: its lineage is shorter
        where = key.with_suffix(Suffix.INDEXES).key
        try:
            entries = [(e.epoch, e.start_offset) for e in parse_leader_epoch_checkpoint(data)]
            LeaderEpochCache(entries)  # increasing, non-negative
        except GatewayError as exc:  # unreadable, out of order: the damaged one, maps stand
            _skip(report, key, exc)
            continue
        try:
            check_lineage(manager, tp, entries, where)
        except CorruptCheckpointError as exc:  # it or an epoch map is damaged: which, unknown
            _skip(report, key, exc)
            manager.dispute_epoch_lineage(tp, meta.segment_id.id, entries, where)
            continue
        manager.set_epoch_lineage(tp, meta.segment_id.id, entries, _entries(before))
        count += 1
    return count


def _entries(data: bytes | None) -> list[tuple[int, int]] | None:
    """A checkpoint's entries, ``None`` when absent or unreadable (then it confirms nothing)."""
    if data is None:
        return None
    try:
        return [(e.epoch, e.start_offset) for e in parse_leader_epoch_checkpoint(data)]
    except GatewayError:
        return None


def check_lineage(
    views: MetadataViews,
    tp: TopicIdPartition,
    entries: list[tuple[int, int]],
    where: str,
) -> None:
    """A checkpoint (read from ``where``) is trusted only where the segments' own epoch maps
    agree with it: each of its epochs that starts inside the remote log starts there in the
    map of the segment holding that offset, and the epoch it gives the remote log's first
    offset is the first segment's. A checkpoint that starts after the remote log's first
    offset was cut at the log start by the broker (``truncateFromStart``: DeleteRecords, or
    retention moving the log start before its segments are deleted): its first entry need
    only lie in that epoch in its segment's map. Raises :class:`CorruptCheckpointError`
    (O(entries) lookups, blocking)."""
    start, end = views.remote_log_start_offset(tp), views.remote_log_end_offset(tp)
    if start is None or end is None:
        return
    before = [e for e in entries if e[1] <= start]
    if before:
        first = views.remote_log_segment_metadata(tp, before[-1][0], start)
        if first is None or first.segment_leader_epochs[0][0] != before[-1][0]:
            raise CorruptCheckpointError(
                f"{where}: the leader-epoch checkpoint {entries} does not give the remote "
                f"log's first offset {start} the epoch its segment does"
            )
    for i, (epoch, offset) in enumerate(entries):
        if start < offset <= end:
            holder = views.remote_log_segment_metadata(tp, epoch, offset)
            cut = i == 0 and not before  # the log start, inside the epoch
            if holder is None or not (
                _in_epoch(holder, epoch, offset) if cut
                else (epoch, offset) in holder.segment_leader_epochs
            ):  # fmt: skip
                raise CorruptCheckpointError(
                    f"{where}: the leader-epoch checkpoint starts epoch {epoch} at offset "
                    f"{offset}; no segment's epoch map says so"
                )


def _in_epoch(meta: RemoteLogSegmentMetadata, epoch: int, offset: int) -> bool:
    return any(e == epoch and s <= offset <= last for e, s, last in meta.epoch_ranges())
