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
file size, ``txnIdxEmpty`` is true when the manifest has no transaction index.

A store fault is not a deletion. A pass is all or nothing: the listing, the manifest reads and
the checkpoint reads all happen before the catalog changes, and a listing or read that fails
(access denied, 5xx, network, timeout) aborts the pass with that error, leaving the catalog as
it was (a warning in the log, ``counters.aborted``). Only a complete listing removes segments;
a manifest that is listed but gone when read (404) was deleted in between and is passed over.

A manifest that cannot be read still claims its offsets. One that cannot be parsed, has no
``remoteLogSegmentMetadata``, or whose metadata disagrees with its key is never guessed at: it
is reported (``ScanReport.skipped``) and kept in a registry of :class:`UnreadableSegment` by
partition (its key names the topic, topic id, partition and start offset), which readers consult
so that the offsets it would cover fail with an error naming it instead of vanishing. An entry
leaves the registry when a later pass reads the manifest fine or finds it gone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from gateway.deadline import Deadline
from gateway.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    CorruptManifestError,
    DeadlineExceededError,
    GatewayError,
    InvalidKeyError,
    ObjectNotFoundError,
    StorageError,
)
from gateway.kafka.epoch import parse_leader_epoch_checkpoint
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
from gateway.remote.reader import RemoteSegment, SegmentReader, all_or_nothing
from gateway.storage.base import ObjectStore
from gateway.storage.retry import Retrier, RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")

CheckpointReader = Callable[[ObjectKey, SegmentManifest], Awaitable[bytes | None]]
"""Reads the LEADER_EPOCH piece of a segment's ``.indexes`` (``None`` when it cannot)."""

MANIFEST_READ_TIMEOUT = 60.0
"""Seconds one manifest GET may take, retries included."""


@dataclass(frozen=True, slots=True)
class UnreadableSegment:
    """A listed ``.rsm-manifest`` that cannot be read into segment metadata (unparsable, no
    ``remoteLogSegmentMetadata``, metadata that disagrees with its key). Its key still names
    the partition and where the segment starts, so the offsets from ``start_offset`` on stay
    claimed: a read in them fails naming ``key`` rather than hopping over them."""

    start_offset: int
    key: str  # the manifest's object key
    reason: str


@dataclass(slots=True)
class ScanCounters:
    """Passes over the bucket since the scanner was made."""

    scans: int = 0  # passes that completed (and applied what they found)
    aborted: int = 0  # passes aborted by a store fault: the catalog was left as it was


def is_store_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the store (access denied, 5xx, network, timeout) rather
    than an answer about an object: it says nothing about what the bucket holds, so it must
    never be read as a deletion or as a corrupt object."""
    if isinstance(exc, ObjectNotFoundError | InvalidKeyError):
        return False
    return isinstance(
        exc, StorageError | DeadlineExceededError | ConfigurationError | OSError | TimeoutError
    )


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


def _epochs_fit(epochs: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """The copier writes the epochs of ``[start, end]``, the first clamped to ``start``
    (``remote-read-semantics.md`` §2): starts rise with the epochs, inside the segment."""
    ordered = sorted(epochs, key=lambda e: e[1])
    if not ordered or ordered[0][1] != start or ordered[-1][1] > end:
        return False
    return all(b[0] > a[0] and b[1] > a[1] for a, b in itertools.pairwise(ordered))


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
    if not _epochs_fit(meta.segment_leader_epochs, meta.start_offset, meta.end_offset):
        # The copier writes the epochs of [startOffset, endOffset], the first one clamped to
        # startOffset (remote-read-semantics.md §2), each starting after the one before.
        raise CorruptManifestError(
            f"manifest {key.key!r}: segmentLeaderEpochs {dict(meta.segment_leader_epochs)} do not "
            f"start at the segment's start offset {meta.start_offset} and rise within its "
            f"offsets up to {meta.end_offset}"
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


ReadManifest = tuple[ObjectKey, SegmentManifest, RemoteLogSegmentMetadata]
Unreadable = dict[str, tuple[TopicIdPartition, UnreadableSegment]]  # manifest key -> entry


class BucketScanner:
    """Keeps one manager in step with the manifests under one key prefix, and keeps the
    registry of manifests it cannot read (:meth:`unreadable`)."""

    def __init__(
        self,
        store: ObjectStore,
        manager: RemoteLogMetadataManager,
        *,
        key_prefix: str = "",
        concurrency: int = 16,
        checkpoint_reader: CheckpointReader | None = None,
        retrier: Retrier | None = None,
    ) -> None:
        self._store = store
        self._manager = manager
        self._prefix = key_prefix
        self._concurrency = concurrency
        self._read_checkpoint = checkpoint_reader
        self._retrier = retrier if retrier is not None else Retrier(RetryPolicy())
        self._lock = asyncio.Lock()
        self._unreadable_all: tuple[tuple[TopicIdPartition, UnreadableSegment], ...] = ()
        self._unreadable: dict[TopicIdPartition, tuple[UnreadableSegment, ...]] = {}
        self.counters = ScanCounters()

    # --- the registry of unreadable manifests --------------------------------------------

    def unreadable(self, tp: TopicIdPartition) -> Sequence[UnreadableSegment]:
        """The manifests of ``tp`` the last completed pass could not read, by start offset
        (a dictionary lookup: cheap enough for every read)."""
        return self._unreadable.get(tp, ())

    def unreadable_all(self) -> Sequence[tuple[TopicIdPartition, UnreadableSegment]]:
        """Every unreadable manifest with its partition, by topic, topic id, partition and
        start offset."""
        return self._unreadable_all

    def _set_unreadable(self, found: Unreadable) -> None:
        entries = sorted(
            found.values(),
            key=lambda e: (e[0].topic, e[0].topic_id, e[0].partition, e[1].start_offset, e[1].key),
        )
        by_tp: dict[TopicIdPartition, list[UnreadableSegment]] = {}
        for tp, entry in entries:
            by_tp.setdefault(tp, []).append(entry)
        self._unreadable_all = tuple(entries)
        self._unreadable = {tp: tuple(e) for tp, e in by_tp.items()}

    # --- one pass ------------------------------------------------------------------------

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
    ) -> tuple[list[ReadManifest], Unreadable]:
        """The manifests of ``keys`` that read fine, and those that do not (corrupt). A
        manifest gone since the listing (404) is in neither; a store fault raises (and
        cancels the other reads)."""
        gate = asyncio.Semaphore(self._concurrency)
        unreadable: Unreadable = {}

        async def one(key: ObjectKey) -> ReadManifest | None:
            async with gate:
                deadline = Deadline.after(MANIFEST_READ_TIMEOUT)
                try:
                    data = await self._retrier.run(
                        f"GET {key.key}", lambda: self._store.get(key.key), deadline
                    )
                except ObjectNotFoundError:  # deleted since the listing: the next pass agrees
                    log.info("bucket scan: %s vanished since the listing", key.key)
                    return None
                except InvalidKeyError as exc:  # the store refuses the key: unreadable
                    error: GatewayError = exc
                else:
                    try:
                        manifest = parse_manifest(data, key.key)
                        return key, manifest, metadata_from_manifest(key, manifest)
                    except GatewayError as exc:  # corrupt: report it, and it keeps its claim
                        error = exc
                reason = f"{type(error).__name__}: {error}"
                report.skipped[key.key] = reason
                tp = TopicIdPartition(key.topic_id, key.partition, key.topic)
                unreadable[key.key] = (tp, UnreadableSegment(key.start_offset, key.key, reason))
                log.warning("bucket scan cannot read %s: %s", key.key, error)
                return None

        found = await all_or_nothing([one(k) for k in keys])
        return [f for f in found if f is not None], unreadable

    async def scan(self) -> ScanReport:
        """One (incremental) pass over the bucket; safe to call again at any time.

        All or nothing: everything is listed and read before the catalog changes. A store
        fault (access denied, 5xx, network, timeout) in the listing or in any read aborts the
        pass with that error and leaves the catalog and the unreadable registry exactly as they
        were (a warning, ``counters.aborted``); only a complete listing removes segments."""
        async with self._lock:
            report = ScanReport()
            try:
                keys = await self._manifest_keys(report)
                known = await asyncio.to_thread(self._known_finished)
                new = [k for sid, k in keys.items() if sid not in known]
                report.unchanged = len(keys) - len(new)
                read, unreadable = await self._read(new, report)
                read.sort(
                    key=lambda r: (r[2].event_timestamp_ms, r[2].start_offset, r[2].segment_id.id)
                )
                checkpoints = await self._checkpoints(read, known, keys, report)
            except Exception as exc:
                if is_store_fault(exc):
                    self.counters.aborted += 1
                log.warning(
                    "bucket scan aborted, the catalog is left as it was: %s: %s",
                    type(exc).__name__,
                    exc,
                )
                raise
            vanished = [m for sid, m in known.items() if sid not in keys]
            report.registered, report.removed = await asyncio.to_thread(
                self._apply, [m for _, _, m in read], vanished
            )
            self._set_unreadable(unreadable)  # every manifest not in the catalog was just read
            if checkpoints:
                report.lineages = await asyncio.to_thread(self._lineages, checkpoints, report)
            self.counters.scans += 1
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
        would; a segment whose manifest is still there is left alone. A HEAD that answers 404
        is confirmed by a listing of the manifest's key (a store that answers 404 for what it
        cannot reach, such as a filesystem store whose volume is gone, fails to list instead),
        each retried within the caller's deadline; never waits for a running scan (which will
        see the deletion itself)."""
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

        async def listed() -> bool:
            async for info in self._store.list(key.key):
                if info.key == key.key:
                    return True
            return False

        if await retrier.run(f"LIST {key.key}", listed, deadline) or self._lock.locked():
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

    async def _checkpoints(
        self,
        read: list[ReadManifest],
        known: dict[uuid.UUID, RemoteLogSegmentMetadata],
        listed: dict[uuid.UUID, ObjectKey],
        report: ScanReport,
    ) -> list[tuple[RemoteLogSegmentMetadata, ObjectKey, bytes]]:
        """The leader-epoch checkpoint of each partition's newest new segment, read before the
        catalog changes. A corrupt or missing checkpoint, or one that cannot be opened with the
        configured keys, is reported and passed over (the lineage then comes from the epoch
        maps); a store fault raises."""
        if self._read_checkpoint is None:
            return []
        newest: dict[TopicIdPartition, ReadManifest] = {}
        for entry in read:
            tp = entry[2].partition
            if tp not in newest or entry[2].end_offset > newest[tp][2].end_offset:
                newest[tp] = entry
        staying: dict[TopicIdPartition, int] = {}  # partition -> highest end already kept
        for sid, m in known.items():
            if sid in listed:
                staying[m.partition] = max(staying.get(m.partition, -1), m.end_offset)
        out: list[tuple[RemoteLogSegmentMetadata, ObjectKey, bytes]] = []
        for tp, (key, manifest, meta) in newest.items():
            if staying.get(tp, -1) > meta.end_offset:
                continue  # an older segment than what the manager has: its lineage is shorter
            try:
                data = await self._read_checkpoint(key, manifest)
            except GatewayError as exc:
                if is_store_fault(exc) and not isinstance(exc, ConfigurationError):
                    raise
                report.skipped[key.with_suffix(Suffix.INDEXES).key] = f"{type(exc).__name__}: {exc}"
                continue
            if data is not None:
                out.append((meta, key, data))
        return out

    def _lineages(
        self,
        checkpoints: list[tuple[RemoteLogSegmentMetadata, ObjectKey, bytes]],
        report: ScanReport,
    ) -> int:
        """Record the checkpoints read by :meth:`_checkpoints` (blocking)."""
        count = 0
        for meta, key, data in checkpoints:
            tp = meta.partition
            latest = self._manager.list_remote_log_segments(tp)
            if latest and max(m.end_offset for m in latest) > meta.end_offset:
                continue  # an older segment than what the manager has: its lineage is shorter
            try:
                entries = [(e.epoch, e.start_offset) for e in parse_leader_epoch_checkpoint(data)]
                self._check_lineage(tp, entries, key)
                self._manager.set_epoch_lineage(tp, meta.segment_id.id, entries)
            except GatewayError as exc:
                report.skipped[key.with_suffix(Suffix.INDEXES).key] = f"{type(exc).__name__}: {exc}"
                continue
            count += 1
        return count

    def _check_lineage(
        self, tp: TopicIdPartition, entries: list[tuple[int, int]], key: ObjectKey
    ) -> None:
        """A checkpoint is trusted only where the segments' own epoch maps agree with it: each
        of its epochs that starts inside the remote log starts there in the map of the segment
        holding that offset, and the epoch it gives the remote log's first offset is the first
        segment's. Raises :class:`CorruptCheckpointError` (O(entries) lookups, blocking)."""
        manager = self._manager
        start, end = manager.remote_log_start_offset(tp), manager.remote_log_end_offset(tp)
        if start is None or end is None:
            return
        where = key.with_suffix(Suffix.INDEXES).key
        before = [e for e in entries if e[1] <= start]
        first = manager.remote_log_segment_metadata(tp, before[-1][0], start) if before else None
        if first is None or first.segment_leader_epochs[0][0] != before[-1][0]:
            raise CorruptCheckpointError(
                f"{where}: the leader-epoch checkpoint {entries} does not give the remote log's "
                f"first offset {start} the epoch its segment does"
            )
        for epoch, offset in entries:
            if start < offset <= end:
                holder = manager.remote_log_segment_metadata(tp, epoch, offset)
                if holder is None or (epoch, offset) not in holder.segment_leader_epochs:
                    raise CorruptCheckpointError(
                        f"{where}: the leader-epoch checkpoint starts epoch {epoch} at offset "
                        f"{offset}; no segment's epoch map says so"
                    )

    async def run_forever(self, interval: float) -> None:
        """Rescan every ``interval`` seconds until cancelled; a failed pass is logged (and,
        aborted by a store fault, changed nothing)."""
        while True:
            try:
                report = await self.scan()
                if report.registered or report.removed:
                    log.info("bucket rescan: %s", report.to_json())
            except Exception as exc:  # any failure: try again next interval
                if not is_store_fault(exc):  # a store fault was logged by scan() already
                    log.warning(
                        "bucket rescan failed (retrying in %.0f s)", interval, exc_info=True
                    )
            await asyncio.sleep(interval)
