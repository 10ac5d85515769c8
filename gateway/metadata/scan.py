"""Bucket scan: build the RLMM from the ``.rsm-manifest`` objects a bucket already holds.

The Aiven plugin writes ``remoteLogSegmentMetadata`` into every manifest, and writes the
manifest last, so a manifest's presence means a finished upload. The scan lists every manifest
under the key prefix, reads its metadata and registers each segment as the broker would have:
COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED. Segments are applied in the order of their
event time (then start offset), so of two uploads of the same range the later one displaces the
earlier exactly as Kafka's cache does. A rescan applies the difference only: new manifests are
registered, and finished segments whose manifest vanished (retention, a partition delete) go
through DELETE_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED.

What the manifest does not say is derived: ``segmentSizeInBytes`` is the chunk index's original
file size, ``txnIdxEmpty`` is true when the manifest has no transaction index. A manifest that
cannot be parsed, has no ``remoteLogSegmentMetadata``, or whose metadata disagrees with its key
is skipped and reported (never guessed at); the scan goes on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.errors import (
    CorruptManifestError,
    GatewayError,
    InvalidKeyError,
    ObjectNotFoundError,
)
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
    TopicIdPartition,
)
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.remote.manifest import IndexType, SegmentManifest, parse_manifest
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.storage.base import ObjectStore
from gateway.storage.retry import Deadline, Retrier
from indexcache.epoch import parse_leader_epoch_checkpoint

log = logging.getLogger(__name__)

CheckpointReader = Callable[[ObjectKey, SegmentManifest], Awaitable[bytes | None]]
"""Reads the LEADER_EPOCH piece of a segment's ``.indexes`` (``None`` when it cannot)."""


@dataclass
class ScanReport:
    """What one scan saw and did."""

    manifests: int = 0
    registered: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # manifest key -> reason
    lineages: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "manifests": self.manifests,
            "registered": self.registered,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "skipped": dict(sorted(self.skipped.items())),
            "lineages": self.lineages,
        }


def metadata_from_manifest(key: ObjectKey, manifest: SegmentManifest) -> RemoteLogSegmentMetadata:
    """The COPY_SEGMENT_STARTED event for a manifest; :class:`CorruptManifestError` when its
    ``remoteLogSegmentMetadata`` is missing or disagrees with the object key."""
    meta = manifest.remote_log_segment_metadata
    if meta is None:
        raise CorruptManifestError(f"manifest {key.key!r} has no remoteLogSegmentMetadata")
    expected = (key.topic, key.topic_id, key.partition, key.segment_id, key.start_offset)
    found = (meta.topic, meta.topic_id, meta.partition, meta.segment_id, meta.start_offset)
    if expected != found:
        raise CorruptManifestError(
            f"manifest {key.key!r}: remoteLogSegmentMetadata names "
            f"{meta.topic}-{meta.partition} segment {meta.segment_id} at {meta.start_offset}, "
            "not the segment of its key"
        )
    tp = TopicIdPartition(key.topic_id, key.partition, key.topic)
    try:
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, key.segment_id),
            meta.start_offset,
            meta.end_offset,
            meta.max_timestamp_ms,
            meta.broker_id,
            meta.event_timestamp_ms,
            meta.segment_leader_epochs,
            manifest.chunk_index.original_file_size,
            None,
            SegmentState.COPY_SEGMENT_STARTED,
            txn_index_empty=manifest.segment_indexes.transaction is None,
        )
    except ValueError as exc:
        raise CorruptManifestError(f"manifest {key.key!r}: {exc}") from exc


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


def finished(meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        meta.segment_id,
        meta.event_timestamp_ms,
        None,
        SegmentState.COPY_SEGMENT_FINISHED,
        meta.broker_id,
    )


class BucketScanner:
    """Keeps one manager in step with the manifests under one key prefix."""

    def __init__(
        self,
        store: ObjectStore,
        manager: RemoteLogMetadataManager,
        *,
        key_prefix: str = "",
        concurrency: int = 16,
        checkpoint_reader: CheckpointReader | None = None,
    ) -> None:
        self._store = store
        self._manager = manager
        self._prefix = key_prefix
        self._concurrency = concurrency
        self._read_checkpoint = checkpoint_reader
        self._lock = asyncio.Lock()

    async def _manifest_keys(self, report: ScanReport) -> dict[uuid.UUID, ObjectKey]:
        keys: dict[uuid.UUID, ObjectKey] = {}
        async for info in self._store.list(self._prefix):
            if not info.key.endswith("." + Suffix.MANIFEST.value):
                continue
            report.manifests += 1
            try:
                key = parse_object_key(info.key, self._prefix)
            except InvalidKeyError as exc:
                report.skipped[info.key] = str(exc)
                continue
            keys[key.segment_id] = key
        return keys

    async def _read(
        self, keys: list[ObjectKey], report: ScanReport
    ) -> list[tuple[ObjectKey, SegmentManifest, RemoteLogSegmentMetadata]]:
        gate = asyncio.Semaphore(self._concurrency)

        async def one(
            key: ObjectKey,
        ) -> tuple[ObjectKey, SegmentManifest, RemoteLogSegmentMetadata] | None:
            async with gate:
                try:
                    data = await self._store.get(key.key)
                    manifest = parse_manifest(data, key.key)
                    return key, manifest, metadata_from_manifest(key, manifest)
                except GatewayError as exc:  # a vanished or corrupt manifest: report, go on
                    report.skipped[key.key] = f"{type(exc).__name__}: {exc}"
                    log.warning("bucket scan skips %s: %s", key.key, exc)
                    return None

        found = await asyncio.gather(*(one(k) for k in keys))
        return [f for f in found if f is not None]

    async def scan(self) -> ScanReport:
        """One (incremental) pass over the bucket; safe to call again at any time."""
        async with self._lock:
            report = ScanReport()
            keys = await self._manifest_keys(report)
            known = await asyncio.to_thread(self._known_finished)
            new = [k for sid, k in keys.items() if sid not in known]
            report.unchanged = len(keys) - len(new)
            read = await self._read(new, report)
            read.sort(
                key=lambda r: (r[2].event_timestamp_ms, r[2].start_offset, r[2].segment_id.id)
            )
            vanished = [m for sid, m in known.items() if sid not in keys]
            report.registered, report.removed = await asyncio.to_thread(
                self._apply, [m for _, _, m in read], vanished
            )
            if self._read_checkpoint is not None and read:
                report.lineages = await self._lineages(read, report)
            return report

    def _known_finished(self) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
        out: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for tp in self._manager.partitions():
            for meta in self._manager.list_remote_log_segments(tp):
                if meta.state is SegmentState.COPY_SEGMENT_FINISHED:
                    out[meta.segment_id.id] = meta
        return out

    def _apply(
        self, new: list[RemoteLogSegmentMetadata], vanished: list[RemoteLogSegmentMetadata]
    ) -> tuple[int, int]:
        manager, registered = self._manager, 0
        with manager.batch():
            for meta in new:
                existing = manager.segment(meta.segment_id)
                if existing is not None and existing.state is not SegmentState.COPY_SEGMENT_STARTED:
                    continue  # deleting or deleted by another source: leave it to that source
                manager.apply(meta)
                manager.apply(finished(meta))
                registered += 1
            for meta in vanished:
                for state in (
                    SegmentState.DELETE_SEGMENT_STARTED,
                    SegmentState.DELETE_SEGMENT_FINISHED,
                ):
                    manager.apply(
                        RemoteLogSegmentMetadataUpdate(
                            meta.segment_id, meta.event_timestamp_ms, None, state, meta.broker_id
                        )
                    )
        return registered, len(vanished)

    async def forget_if_vanished(
        self, meta: RemoteLogSegmentMetadata, retrier: Retrier, deadline: Deadline
    ) -> bool:
        """A read found an object of ``meta`` missing. When its manifest is gone too (retention
        deleted the segment), take the segment out of the manager now, as the next rescan
        would; a segment whose manifest is still there is left alone. One HEAD, retried
        within the caller's deadline; never waits for a running scan (which will see the
        deletion itself)."""
        tp = meta.partition
        key = ObjectKey(
            self._prefix, tp.topic, tp.topic_id, tp.partition, meta.start_offset,
            meta.segment_id.id, Suffix.MANIFEST,
        )  # fmt: skip
        try:
            await retrier.run(f"HEAD {key.key}", lambda: self._store.head(key.key), deadline)
            return False
        except ObjectNotFoundError:
            pass
        if self._lock.locked():
            return False

        def forget() -> bool:
            current = self._manager.segment(meta.segment_id)
            if current is None or current.state is not SegmentState.COPY_SEGMENT_FINISHED:
                return False  # another reader got there first
            self._apply([], [current])
            return True

        async with self._lock:
            forgotten = await asyncio.to_thread(forget)
        if forgotten:
            log.info("segment %s vanished from the bucket; removed from the catalog", key.key)
        return forgotten

    async def _lineages(
        self,
        read: list[tuple[ObjectKey, SegmentManifest, RemoteLogSegmentMetadata]],
        report: ScanReport,
    ) -> int:
        """Record the leader-epoch checkpoint of each partition's newest new segment."""
        assert self._read_checkpoint is not None
        newest: dict[
            TopicIdPartition, tuple[ObjectKey, SegmentManifest, RemoteLogSegmentMetadata]
        ] = {}
        for entry in read:
            tp = entry[2].partition
            if tp not in newest or entry[2].end_offset > newest[tp][2].end_offset:
                newest[tp] = entry
        count = 0
        for tp, (key, manifest, meta) in newest.items():
            latest = await asyncio.to_thread(self._manager.list_remote_log_segments, tp)
            if latest and max(m.end_offset for m in latest) > meta.end_offset:
                continue  # an older segment than what the manager has: its lineage is shorter
            try:
                data = await self._read_checkpoint(key, manifest)
            except GatewayError as exc:
                report.skipped[key.with_suffix(Suffix.INDEXES).key] = f"{type(exc).__name__}: {exc}"
                continue
            if data is None:
                continue
            try:
                entries = [(e.epoch, e.start_offset) for e in parse_leader_epoch_checkpoint(data)]
                await asyncio.to_thread(
                    self._manager.set_epoch_lineage, tp, meta.segment_id.id, entries
                )
            except GatewayError as exc:
                report.skipped[key.with_suffix(Suffix.INDEXES).key] = f"{type(exc).__name__}: {exc}"
                continue
            count += 1
        return count

    async def run_forever(self, interval: float) -> None:
        """Rescan every ``interval`` seconds until cancelled; a failed pass is logged."""
        while True:
            try:
                report = await self.scan()
                if report.registered or report.removed:
                    log.info("bucket rescan: %s", report.to_json())
            except Exception:  # any failure: log it and try again next interval
                log.warning("bucket rescan failed (retrying in %.0f s)", interval, exc_info=True)
            await asyncio.sleep(interval)
