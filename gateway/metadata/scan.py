"""Bucket scan: build the RLMM from the ``.rsm-manifest`` objects a bucket already holds.

The scan lists every manifest under the key prefix, reads its metadata
(:mod:`gateway.metadata.manifests`) and registers each segment as the broker would have:
COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED. Segments are applied in the order of their
event time (then start offset), so of two uploads of the same range the later one displaces the
earlier exactly as Kafka's cache does. A rescan applies the difference only: new manifests are
registered, and finished segments whose manifest vanished (retention, a partition delete) go
through DELETE_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED. The epoch lineage comes from the
newest segments' checkpoints (:mod:`gateway.metadata.lineage`).

A store fault is not a deletion. A pass is all or nothing: the listing, the manifest reads and
the checkpoint reads all happen before the catalog changes, and a listing or read that fails
(access denied, 5xx, network, timeout) aborts the pass with that error, leaving the catalog as
it was (a warning in the log, ``counters.aborted``). Only a complete listing removes segments;
a manifest that is listed but gone when read (404) was deleted in between and is passed over.

A manifest that cannot be read still claims its offsets: it is reported
(``ScanReport.skipped``) and kept in a registry of :class:`UnreadableSegment` by partition,
which readers consult so that the offsets it would cover fail with an error naming it instead
of vanishing. An entry leaves the registry when a later pass reads the manifest fine or finds
it gone.

A complete pass that finds no manifest in its scope (a wrong prefix, a missing folder) is
diagnosed (:mod:`gateway.metadata.scope`): ``ScanReport.scope_warning`` says what is wrong, with a
did-you-mean, and the scanner logs it once as a warning (again only after a pass that found
manifests), so ``serve`` says it too.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.deadline import Deadline
from gateway.errors import ObjectNotFoundError, UnknownTopicOrPartitionError
from gateway.metadata.lineage import (
    CheckpointReader,
    read_checkpoints,
    record_lineages,
)
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.manifests import (
    ScanReport,
    Unreadable,
    UnreadableSegment,
    finished,
    is_store_fault,
    list_manifests,
    read_manifests,
)
from gateway.metadata.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
    TopicIdPartition,
)
from gateway.metadata.scope import diagnose_empty_scope, look_around, misprefixed_note
from gateway.remote.keys import Suffix, segment_key
from gateway.storage.base import ObjectStore
from gateway.storage.retry import Retrier, RetryPolicy

__all__ = ["BucketScanner", "ScanCounters"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ScanCounters:
    """Passes over the bucket since the scanner was made."""

    scans: int = 0  # passes that completed (and applied what they found)
    aborted: int = 0  # passes aborted by a store fault: the catalog was left as it was


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
        defer_to_known: bool = False,
    ) -> None:
        """``defer_to_known``: another source (a followed metadata topic) owns every segment
        it names: a pass registers only segments the catalog has never seen, in any state."""
        self._store = store
        self._defer = defer_to_known
        self._manager = manager
        self._prefix = key_prefix
        self._concurrency = concurrency
        self._read_checkpoint = checkpoint_reader
        self._retrier = retrier if retrier is not None else Retrier(RetryPolicy())
        self._lock = asyncio.Lock()
        self._unreadable_all: tuple[tuple[TopicIdPartition, UnreadableSegment], ...] = ()
        self._unreadable: dict[TopicIdPartition, tuple[UnreadableSegment, ...]] = {}
        self.counters = ScanCounters()
        self._scope_warned = False

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

    async def scan(self) -> ScanReport:
        """One (incremental) pass over the bucket; safe to call again at any time.

        All or nothing: everything is listed and read before the catalog changes. A store
        fault (access denied, 5xx, network, timeout) in the listing or in any read aborts the
        pass with that error and leaves the catalog and the unreadable registry exactly as they
        were (a warning, ``counters.aborted``); only a complete listing removes segments."""
        async with self._lock:
            report = ScanReport()
            try:
                keys = await list_manifests(self._store, self._prefix, report)
                known = await asyncio.to_thread(self._known_finished)
                new = [k for sid, k in keys.items() if sid not in known]
                report.unchanged = len(keys) - len(new)
                read, unreadable = await read_manifests(
                    self._store, self._retrier, new, report, concurrency=self._concurrency
                )
                read.sort(
                    key=lambda r: (r[2].event_timestamp_ms, r[2].start_offset, r[2].segment_id.id)
                )
                checkpoints = (
                    []
                    if self._read_checkpoint is None
                    else await read_checkpoints(self._read_checkpoint, read, known, keys, report)
                )
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
                report.lineages = await asyncio.to_thread(
                    record_lineages, self._manager, checkpoints, report
                )
            self.counters.scans += 1
            await self._check_scope(report)
            return report

    async def _check_scope(self, report: ScanReport) -> None:
        """After a complete pass: an empty scope (or manifests under ``prefix + "/"``) is
        diagnosed and logged once, until a pass finds manifests again."""
        if report.manifests and not report.misprefixed:
            self._scope_warned = False
            return
        if self._scope_warned:
            return
        if report.manifests:
            warning = misprefixed_note(self._prefix, report.misprefixed)
        else:
            around = None if report.misprefixed else await look_around(self._store, self._prefix)
            warning = diagnose_empty_scope(
                self._prefix, misprefixed=report.misprefixed, around=around
            )
        report.scope_warning = warning
        log.warning("bucket scan: %s", warning)
        self._scope_warned = True

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
                if existing is not None and (
                    self._defer or existing.state is not SegmentState.COPY_SEGMENT_STARTED
                ):
                    continue  # another source's (deleting, deleted, or its upload in flight)
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

    async def refresh_lineages(self, tps: set[TopicIdPartition]) -> set[TopicIdPartition]:
        """Read and record the leader-epoch checkpoint of each partition's newest finished
        segment (for a catalog another source fills: a followed metadata topic); returns the
        partitions whose newest checkpoint is not recorded (its manifest not in the bucket
        yet, or a checkpoint that cannot be read: the lineage then comes from the epoch maps
        until a later try). A store fault raises."""
        if self._read_checkpoint is None:
            return set()
        newest: dict[TopicIdPartition, RemoteLogSegmentMetadata] = {}
        keys = []
        for tp in tps:
            finished_segments = await asyncio.to_thread(self._finished_of, tp)
            last_two = sorted(finished_segments, key=lambda m: m.end_offset)[-2:]
            if last_two:  # the one before confirms a moved log start (set_epoch_lineage)
                newest[tp] = last_two[-1]
                keys += [segment_key(self._prefix, m, Suffix.MANIFEST) for m in last_two]
        if keys:
            report = ScanReport()
            read, _ = await read_manifests(self._store, self._retrier, keys, report)
            checkpoints = await read_checkpoints(self._read_checkpoint, read, {}, {}, report)
            await asyncio.to_thread(record_lineages, self._manager, checkpoints, report)
        return {
            tp
            for tp, meta in newest.items()
            if await asyncio.to_thread(self._manager.lineage_segment, tp) != meta.segment_id.id
        }

    def _finished_of(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        try:
            listed = self._manager.list_remote_log_segments(tp)
        except UnknownTopicOrPartitionError:
            return []
        return [m for m in listed if m.state is SegmentState.COPY_SEGMENT_FINISHED]

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
        key = segment_key(self._prefix, meta, Suffix.MANIFEST)
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

    async def run_forever(self, interval: float) -> None:
        """Rescan every ``interval`` seconds until cancelled; a failed pass is logged (and,
        aborted by a store fault, changed nothing)."""
        while True:
            try:
                report = await self.scan()
                if report.registered or report.removed:
                    log.info("bucket rescan: %s", report.describe())
            except Exception as exc:  # any failure: try again next interval
                if not is_store_fault(exc):  # a store fault was logged by scan() already
                    log.warning(
                        "bucket rescan failed (retrying in %.0f s)", interval, exc_info=True
                    )
            await asyncio.sleep(interval)
