"""The use cases of a running gateway behind the ``Service`` seam: catalog, fetch, ListOffsets.

:class:`GatewayService` is handed its components (RLMM, segment source, reader, retrier, thread
pool, bucket scanner) by :func:`gateway.service.open.open_service`, which owns and closes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from gateway.cache.segments import SegmentSource
from gateway.deadline import Deadline
from gateway.errors import (
    CorruptDataError,
    DeadlineExceededError,
    GatewayError,
    InvalidRequestError,
    NotReadyError,
)
from gateway.metadata.follow import MetadataFollower
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.metadata.scan import BucketScanner
from gateway.remote.reader import SegmentReader
from gateway.service.bounds import PartitionCatalog
from gateway.service.committed import committed, pending_error, visible_prefix
from gateway.service.fetch import Fetcher, SegmentVanishedError
from gateway.service.metrics import CoreCollector
from gateway.service.offsets import NOT_FOUND, OffsetFinder
from gateway.service.protocol import OffsetSpec
from gateway.service.records import decode_records
from gateway.service.runs import to_batches
from gateway.service.stable import StableBounds, stable_bounds
from gateway.service.types import (
    FetchedRecord,
    FetchResult,
    IsolationLevel,
    OffsetResult,
    PartitionInfo,
    Readiness,
    SegmentInfo,
    UnreadableManifest,
)
from gateway.storage.retry import Retrier

log = logging.getLogger(__name__)

TIERED_SPECS: Final = frozenset({"earliest_local", "latest_tiered", "earliest_pending_upload"})
"""The ListOffsets specs of the tiered-storage timestamps (-4, -5, -6)."""


class GatewayService:
    """The use cases; every public method is safe to call concurrently."""

    def __init__(
        self,
        rlmm: RemoteLogMetadataManager,
        source: SegmentSource,
        *,
        reader: SegmentReader,
        retrier: Retrier,
        executor: ThreadPoolExecutor,
        scanner: BucketScanner,
        compiled_records: bool = True,
        follower: MetadataFollower | None = None,
    ) -> None:
        """``compiled_records``: decode with the compiled loop (:class:`ColumnRecords`);
        ``follower``: the metadata topic the catalog follows, if any (its status shows in
        readiness and metrics)."""
        self.follower = follower
        self.rlmm = rlmm
        self._compiled = compiled_records
        self.source = source
        self.reader = reader
        self.retrier = retrier
        self.scanner = scanner
        self._executor = executor
        # Reads and offset lookups consult the scanner's unreadable manifests: the offsets
        # such a segment would hold fail naming it instead of vanishing.
        self._fetcher = Fetcher(rlmm, source, claims=scanner.unreadable)
        self._offsets = OffsetFinder(rlmm, source, executor, self._fetcher)
        self._catalog = PartitionCatalog(
            rlmm, scanner, self._fetcher, self._offsets, self._require_ready
        )
        self._ready = False
        self._settled = asyncio.Event()  # ready, or closing
        self._not_ready_reason = "the first bucket scan has not finished"
        self._names: frozenset[str] = frozenset()
        self._names_scan = -1  # the scan count _names were read at
        self.collector = CoreCollector(
            reader.counters, retrier.counters, source, scanner, self.ready, follower
        )

    # --- readiness: data endpoints answer 503 not_ready until the first scan has finished ---

    def mark_ready(self) -> None:
        self._ready = True
        self._settled.set()

    def mark_not_ready(self, reason: str) -> None:
        """Why the catalog is not loaded yet (e.g. the first scan failed: the store cannot be
        listed); ignored once ready."""
        self._not_ready_reason = reason

    def mark_closing(self) -> None:
        """The service is closing: :meth:`wait_ready` stops waiting."""
        if not self._ready:
            self._not_ready_reason = "the service is closing"
        self._settled.set()

    async def wait_ready(self) -> None:
        """Return once the first bucket scan has completed; raise :class:`NotReadyError` if the
        service closes before that."""
        await self._settled.wait()
        self._require_ready()

    def ready(self) -> bool:
        return self._ready

    def readiness(self) -> Readiness:
        follow = None if self.follower is None else self.follower.status
        if not self._ready:
            return Readiness(False, self._not_ready_reason, follow=follow)
        return Readiness(
            True,
            None,
            tuple(
                UnreadableManifest(
                    tp.topic, tp.topic_id, tp.partition, u.start_offset, u.key, u.reason
                )
                for tp, u in self._catalog.unreadable()
            ),
            follow,
        )

    def _require_ready(self) -> None:
        if not self._ready:
            raise NotReadyError(
                f"the catalog of remote segments is not loaded yet: {self._not_ready_reason}"
            )

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        return await self._catalog.topics()

    async def partitions(self, topic: str) -> list[PartitionInfo]:
        return await self._catalog.partitions(topic)

    async def partition(
        self, topic: str, partition: int, deadline: Deadline | None = None
    ) -> PartitionInfo:
        return await self._catalog.partition(topic, partition, deadline)

    async def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        return await self._catalog.segments(topic, partition)

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        isolation: IsolationLevel,
        deadline: Deadline,
    ) -> FetchResult:
        if offset < 0:
            raise InvalidRequestError(f"offset {offset} is negative", "offset")
        if max_bytes <= 0:
            raise InvalidRequestError(f"max_bytes {max_bytes} must be positive", "max_bytes")
        tp = await self._catalog.tp(topic, partition)
        stable = None
        if isolation is IsolationLevel.READ_COMMITTED:  # a broker reads up to its LSO
            stable = await self._stable(tp, deadline)
            if stable.stable <= offset < stable.end:
                raise pending_error(tp, stable.stable, stable)
        try:
            reads, next_offset = await self._fetcher.fetch(tp, offset, max_bytes, deadline)
        except SegmentVanishedError as exc:
            # A segment deleted under the read (retention): when its manifest is gone too, the
            # catalog forgets it now (not at the next rescan); then re-resolve once. A second
            # miss is the answer: 416 when nothing covers the offset any more, else 404.
            log.info("segment gone during a fetch of %s at %d; re-resolving", tp, offset)
            await self._forget(exc.meta, deadline)
            reads, next_offset = await self._fetcher.fetch(tp, offset, max_bytes, deadline)
        except CorruptDataError as exc:
            # Bytes that fail a check are never served. They may have been damaged in transit
            # (the fetcher has dropped them from the chunk cache): read once more; bytes
            # damaged in the bucket fail again, and that is the answer (502).
            log.warning(
                "corrupt data in a fetch of %s at %d; reading once more: %s", tp, offset, exc
            )
            reads, next_offset = await self._fetcher.fetch(tp, offset, max_bytes, deadline)
        aborted = None
        if stable is not None:
            try:
                reads, found, cut = await committed(self._fetcher, tp, reads, deadline, stable)
            except DeadlineExceededError:
                # The batches read are the answer as far as they are proven without the
                # transaction indexes: up to the first transactional one.
                shown = visible_prefix(reads, stable)
                if shown is None:
                    raise
                (reads, cut), found = shown, []
            aborted = tuple(found)
            if cut is not None:
                next_offset = cut
        # Batches read before the deadline are the answer (Kafka answers at max_wait with what
        # it has); an answer that reaches the end read the last batch itself, so its
        # end_of_remote_log is the data's.
        start, end = await self._catalog.bounds(tp, deadline, answered=bool(reads))
        return FetchResult(
            tp.topic,
            tp.topic_id,
            tp.partition,
            to_batches(reads),
            next_offset,
            start,
            end,
            aborted,
            None if stable is None else min(stable.stable, end),
        )

    async def _stable(self, tp: TopicIdPartition, deadline: Deadline) -> StableBounds:
        """The remote last stable offset of ``tp``, once its bounds are known: as the end a
        fetch reports, not while a manifest that cannot be read lies outside the readable
        segments, nor before the tail's bytes have been checked (a stable point too low would
        end a read_committed reader early)."""

        async def check(start: int, end: int) -> None:
            await self._catalog.check_bounds(tp, start, end, deadline)

        return await stable_bounds(self.rlmm, self.source, tp, deadline, check)

    async def _forget(self, meta: RemoteLogSegmentMetadata, deadline: Deadline) -> None:
        try:
            if await self.scanner.forget_if_vanished(meta, self.retrier, deadline):
                await self.source.chunks.invalidate(meta.segment_id.id)  # and its chunks
                self.source.runs.drop(meta.segment_id.id)
        except GatewayError as exc:  # the check failed: the re-fetch gives the answer
            log.info("could not check segment %s: %s", meta.segment_id, exc)

    async def decode(
        self, result: FetchResult, offset: int, isolation: IsolationLevel
    ) -> Sequence[FetchedRecord]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor,
            decode_records,
            result.batches,
            offset,
            isolation,
            result.aborted_transactions,
            self._compiled,
        )

    async def list_offsets(
        self,
        topic: str,
        partition: int,
        spec: OffsetSpec,
        deadline: Deadline,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OffsetResult:
        tp = await self._catalog.tp(topic, partition)
        finder = self._offsets
        if spec == "earliest":
            return await asyncio.to_thread(finder.earliest, tp)
        committed_ = isolation is IsolationLevel.READ_COMMITTED
        if spec == "latest":
            await self._catalog.bounds(tp, deadline)
            latest = await asyncio.to_thread(finder.latest, tp)
            if not committed_:
                return latest
            stable = await self._stable(tp, deadline)
            return dataclasses.replace(latest, offset=min(latest.offset, stable.stable))
        if spec in TIERED_SPECS:
            return await self._remote_tier(tp, spec, deadline)
        if spec == "max_timestamp":
            found = await finder.max_timestamp(tp, deadline)
        elif isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
            raise InvalidRequestError(
                f"timestamp {spec!r}: a time in ms >= 0, earliest, latest or max_timestamp",
                "timestamp",
            )
        else:
            found = await finder.for_timestamp(tp, spec, deadline)
        if committed_ and found.offset >= 0:  # past the last fetchable offset: none (§12.2)
            stable = await self._stable(tp, deadline)
            if found.offset >= stable.stable:
                return NOT_FOUND
        return found

    async def _remote_tier(
        self, tp: TopicIdPartition, spec: OffsetSpec, deadline: Deadline
    ) -> OffsetResult:
        """What the tiered-storage timestamps mean for a log that is all remote tier, whatever
        the isolation level: -4 EARLIEST_LOCAL and -6 EARLIEST_PENDING_UPLOAD are the remote
        log end (where a local log would begin; nothing past it waits for an upload), -6 with
        nothing uploaded is EARLIEST (remote-read-semantics §12.1); -5 LATEST_TIERED is the
        highest remote offset, with its leader epoch."""
        await self._catalog.bounds(tp, deadline)
        finder = self._offsets
        if spec == "latest_tiered":
            return await asyncio.to_thread(finder.latest_tiered, tp)
        end = await asyncio.to_thread(finder.latest, tp)
        if spec == "earliest_local" or end.offset > 0:
            return end
        return await asyncio.to_thread(finder.earliest, tp)

    async def catalog_topics(self) -> frozenset[str]:
        """The topic names of the catalog as of the last completed scan (none before it);
        re-read once per scan."""
        scans = self.scanner.counters.scans
        if scans != self._names_scan:
            names = frozenset(await self.topics()) if self._ready else frozenset()
            self._names, self._names_scan = names, scans
        return self._names


__all__ = ["GatewayService"]
