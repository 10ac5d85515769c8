"""The gateway service: wires the RLMM, the caches and the readers behind the ``Service`` seam.

:func:`open_service` builds everything a running gateway owns (store client, thread pool,
segment reader with retries, decoded-chunk cache, index cache, RLMM with its bucket scan and
rescan task) and closes all of it on exit. The HTTP layer calls it from its lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, Protocol

from gateway.cache.chunk_disk import ChunkDiskTier
from gateway.cache.chunks import ChunkCache
from gateway.deadline import Deadline
from gateway.errors import (
    CorruptDataError,
    CorruptManifestError,
    GatewayError,
    InvalidRequestError,
    NotReadyError,
    UnknownTopicOrPartitionError,
)
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.metadata.open import STATE_DB
from gateway.metadata.scan import BucketScanner, UnreadableSegment, checkpoint_reader
from gateway.metadata.sqlite import SQLiteBackend
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import encode_uuid
from gateway.remote.reader import SegmentReader
from gateway.service.committed import committed
from gateway.service.fetch import Fetcher, SegmentVanishedError, remote_bounds, to_batches
from gateway.service.metrics import render_metrics
from gateway.service.offsets import OffsetFinder
from gateway.service.protocol import OffsetSpec
from gateway.service.records import decode_records
from gateway.service.segments import SegmentSource
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
from gateway.storage.base import ObjectStore
from gateway.storage.factory import open_store
from gateway.storage.retry import Retrier, RetryPolicy

log = logging.getLogger(__name__)


class ServiceSettings(Protocol):
    """What :func:`open_service` reads from the settings object."""

    store: str
    key_prefix: str
    key_pairs: list[str]
    state_dir: Path | None
    s3_endpoint_url: str | None
    s3_region: str | None
    s3_path_style: bool
    s3_data_plane: Literal["aioboto3", "httpx"]
    index_cache_bytes: int
    index_cache_dir: Path | None
    chunk_cache_bytes: int
    chunk_cache_dir: Path | None
    chunk_cache_disk_bytes: int
    readahead_bytes: int
    max_get_bytes: int
    max_concurrent_gets: int
    retry_max_attempts: int
    retry_base_delay_s: float
    retry_max_delay_s: float
    retry_attempt_timeout_s: float
    threads: int
    rescan_interval_s: float


class GatewayService:
    """The use cases; every public method is safe to call concurrently."""

    def __init__(
        self,
        rlmm: RemoteLogMetadataManager,
        source: SegmentSource,
        reader: SegmentReader,
        retrier: Retrier,
        executor: ThreadPoolExecutor,
    ) -> None:
        self.rlmm = rlmm
        self.source = source
        self.reader = reader
        self.retrier = retrier
        self._executor = executor
        self._fetcher = Fetcher(rlmm, source)
        self._offsets = OffsetFinder(rlmm, source, executor, self._fetcher)
        self._ready = False
        self._not_ready_reason = "the first bucket scan has not finished"
        self.scanner: BucketScanner | None = None

    # --- readiness: data endpoints answer 503 not_ready until the first scan has finished ---

    def claims_from(self, scanner: BucketScanner) -> None:
        """Reads and offset lookups consult the scanner's unreadable manifests: the offsets
        such a segment would hold fail naming it instead of vanishing."""
        self._fetcher.claims = scanner.unreadable

    def mark_ready(self) -> None:
        self._ready = True

    def mark_not_ready(self, reason: str) -> None:
        """Why the catalog is not loaded yet (e.g. the first scan failed: the store cannot be
        listed); ignored once ready."""
        self._not_ready_reason = reason

    def ready(self) -> bool:
        return self._ready

    def readiness(self) -> Readiness:
        if not self._ready:
            return Readiness(False, self._not_ready_reason)
        return Readiness(
            True,
            None,
            tuple(
                UnreadableManifest(
                    tp.topic, tp.topic_id, tp.partition, u.start_offset, u.key, u.reason
                )
                for tp, u in self._unreadable()
            ),
        )

    def _require_ready(self) -> None:
        if not self._ready:
            raise NotReadyError(
                f"the catalog of remote segments is not loaded yet: {self._not_ready_reason}"
            )

    def _unreadable(
        self, topic: str | None = None
    ) -> Sequence[tuple[TopicIdPartition, UnreadableSegment]]:
        """The manifests the scanner could not read (of ``topic`` when given)."""
        if self.scanner is None:
            return ()
        found = self.scanner.unreadable_all()
        return found if topic is None else [e for e in found if e[0].topic == topic]

    async def _tp(self, topic: str, partition: int) -> TopicIdPartition:
        if partition < 0:
            raise InvalidRequestError(f"partition {partition} is negative", "partition")
        self._require_ready()
        try:
            # RLMM reads are SQLite calls: off the event loop.
            return await asyncio.to_thread(self.rlmm.partition, topic, partition)
        except UnknownTopicOrPartitionError:
            # Known only from manifests that cannot be read: they claim its offsets.
            claims = [e for e in self._unreadable(topic) if e[0].partition == partition]
            if claims:
                raise _unreadable_error(claims) from None
            raise

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        self._require_ready()
        topics = await asyncio.to_thread(self.rlmm.topics)
        for tp, _ in self._unreadable():  # a topic whose manifests are all unreadable still is
            ids = topics.setdefault(tp.topic, [])
            if tp.topic_id not in ids:
                ids.append(tp.topic_id)
        return topics

    def _info(self, tp: TopicIdPartition) -> PartitionInfo:
        """The partition's bounds; a segment whose manifest cannot be read before the first or
        after the last readable one makes them unknown (502 naming it, never a shorter log)."""
        rlmm = self.rlmm
        start, end = remote_bounds(rlmm, tp)
        self._offsets.claim_outside(tp, start, end)
        return PartitionInfo(
            tp.topic,
            tp.topic_id,
            tp.partition,
            start,
            end,
            rlmm.remote_log_size(tp),
            rlmm.segment_count(tp),
            tuple((e.epoch, e.start_offset) for e in rlmm.epoch_lineage(tp)),
        )

    async def partitions(self, topic: str) -> list[PartitionInfo]:
        """The partitions of the topic's newest incarnation; a partition of it known only from
        manifests that cannot be read fails the listing (502, naming them) rather than being
        left out of it."""
        self._require_ready()
        claims = self._unreadable(topic)

        def read() -> list[PartitionInfo]:
            try:
                topic_id = self.rlmm.resolve_topic(topic)
            except UnknownTopicOrPartitionError:
                if claims:
                    raise _unreadable_error(claims) from None
                raise
            infos = [self._info(tp) for tp in self.rlmm.partitions(topic_id)]
            listed = {i.partition for i in infos}
            missing = [
                e for e in claims if e[0].topic_id == topic_id and e[0].partition not in listed
            ]
            if missing:
                raise _unreadable_error(missing)
            return infos

        return await asyncio.to_thread(read)

    async def partition(self, topic: str, partition: int) -> PartitionInfo:
        tp = await self._tp(topic, partition)
        return await asyncio.to_thread(self._info, tp)

    async def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        tp = await self._tp(topic, partition)
        metas = await asyncio.to_thread(self.rlmm.list_remote_log_segments, tp)
        return [
            SegmentInfo(
                encode_uuid(m.segment_id.id),
                m.start_offset,
                m.end_offset,
                m.state.name,
                m.segment_size_in_bytes,
                m.max_timestamp_ms,
                m.event_timestamp_ms,
                m.segment_leader_epochs,
                m.txn_index_empty,
            )
            for m in metas
        ]

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
        tp = await self._tp(topic, partition)
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
        if isolation is IsolationLevel.READ_COMMITTED and reads:
            reads, found, cut = await committed(self._fetcher, tp, reads, deadline)
            aborted = tuple(found)
            if cut is not None:
                next_offset = cut
        elif isolation is IsolationLevel.READ_COMMITTED:
            aborted = ()
        start, end = await asyncio.to_thread(remote_bounds, self.rlmm, tp)
        await self._fetcher.check_tail(tp, end, deadline)
        # The answer carries the log's bounds: unknown while a manifest before or after the
        # readable segments cannot be read (a shorter log would end a consumer's walk early).
        self._offsets.claim_outside(tp, start, end)
        return FetchResult(
            tp.topic, tp.topic_id, tp.partition, to_batches(reads), next_offset, start, end, aborted
        )

    async def _forget(self, meta: RemoteLogSegmentMetadata, deadline: Deadline) -> None:
        if self.scanner is None:
            return
        try:
            if await self.scanner.forget_if_vanished(meta, self.retrier, deadline):
                await self.source.chunks.invalidate(meta.segment_id.id)  # and its chunks
        except GatewayError as exc:  # the check failed: the re-fetch gives the answer
            log.info("could not check segment %s: %s", meta.segment_id, exc)

    async def decode(
        self, result: FetchResult, offset: int, isolation: IsolationLevel
    ) -> list[FetchedRecord]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor,
            decode_records,
            result.batches,
            offset,
            isolation,
            result.aborted_transactions,
        )

    async def list_offsets(
        self, topic: str, partition: int, spec: OffsetSpec, deadline: Deadline
    ) -> OffsetResult:
        tp = await self._tp(topic, partition)
        finder = self._offsets
        if spec == "earliest":
            return await asyncio.to_thread(finder.earliest, tp)
        if spec == "latest":
            _, end = await asyncio.to_thread(remote_bounds, self.rlmm, tp)
            await self._fetcher.check_tail(tp, end, deadline)
            return await asyncio.to_thread(finder.latest, tp)
        if spec == "max_timestamp":
            return await finder.max_timestamp(tp, deadline)
        if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
            raise InvalidRequestError(
                f"timestamp {spec!r}: a time in ms >= 0, earliest, latest or max_timestamp",
                "timestamp",
            )
        return await finder.for_timestamp(tp, spec, deadline)

    def metrics_text(self) -> bytes:
        return render_metrics(self)


def _unreadable_error(
    claims: Sequence[tuple[TopicIdPartition, UnreadableSegment]],
) -> CorruptManifestError:
    """The error for partitions that only unreadable manifests name (502, naming them)."""
    parts = sorted({f"{tp.topic}-{tp.partition}" for tp, _ in claims})
    named = "; ".join(f"{u.key} ({u.reason})" for _, u in claims[:5])
    more = f" and {len(claims) - 5} more" if len(claims) > 5 else ""
    return CorruptManifestError(
        f"{', '.join(parts)}: the remote segments are claimed by manifests that cannot be "
        f"read: {named}{more}"
    )


async def _scan_until_ready(
    scanner: BucketScanner, service: GatewayService, max_delay: float = 30.0
) -> None:
    """The first scan, retried with backoff until it completes: until then the service is not
    ready (and says why), never ready with an empty catalog because the store failed."""
    delay = 1.0
    while True:
        try:
            report = await scanner.scan()
        except Exception as exc:  # the store may not be reachable yet: keep trying
            log.warning("initial bucket scan failed (retrying in %.0f s): %s", delay, exc)
            service.mark_not_ready(f"the first bucket scan failed: {type(exc).__name__}: {exc}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
            continue
        log.info("bucket scan: %s", report.to_json())
        service.mark_ready()
        return


@contextlib.asynccontextmanager
async def open_service(settings: ServiceSettings) -> AsyncIterator[GatewayService]:
    """Everything a running gateway owns, opened in order and closed in reverse."""
    keys = KeyRing.from_specs(settings.key_pairs)
    async with contextlib.AsyncExitStack() as stack:
        executor = ThreadPoolExecutor(settings.threads, thread_name_prefix="gateway-cpu")
        stack.callback(executor.shutdown, wait=False, cancel_futures=True)
        store: ObjectStore = await open_store(
            settings.store,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            path_style=settings.s3_path_style,
            data_plane=settings.s3_data_plane,
        )
        stack.push_async_callback(store.close)
        retrier = Retrier(
            RetryPolicy(
                max_attempts=settings.retry_max_attempts,
                base_delay=settings.retry_base_delay_s,
                max_delay=settings.retry_max_delay_s,
                attempt_timeout=settings.retry_attempt_timeout_s,
            )
        )
        reader = SegmentReader(
            store,
            retrier,
            executor,
            max_get_bytes=settings.max_get_bytes,
            max_concurrent_gets=settings.max_concurrent_gets,
        )
        disk = None
        if settings.chunk_cache_dir is not None:
            disk = ChunkDiskTier(settings.chunk_cache_dir, settings.chunk_cache_disk_bytes)
            kept = await asyncio.to_thread(disk.open)
            log.info("chunk disk tier %s: %d chunks kept", settings.chunk_cache_dir, kept)
        chunks = ChunkCache(
            reader,
            max_bytes=settings.chunk_cache_bytes,
            readahead_bytes=settings.readahead_bytes,
            disk=disk,
            executor=executor,
        )
        index_dir = settings.index_cache_dir
        source = SegmentSource(
            reader,
            keys,
            key_prefix=settings.key_prefix,
            executor=executor,
            chunk_cache=chunks,
            index_cache_bytes=settings.index_cache_bytes,
            index_cache_dir=None if index_dir is None else str(index_dir),
        )
        await source.start()
        stack.push_async_callback(source.aclose)
        backend = (
            MemoryBackend()
            if settings.state_dir is None
            else SQLiteBackend(settings.state_dir / STATE_DB)
        )
        rlmm = RemoteLogMetadataManager(backend)
        stack.callback(rlmm.close)
        service = GatewayService(rlmm, source, reader, retrier, executor)
        scanner = BucketScanner(
            store,
            rlmm,
            key_prefix=settings.key_prefix,
            checkpoint_reader=checkpoint_reader(reader, keys),
        )
        service.scanner = scanner
        service.claims_from(scanner)
        tasks: list[asyncio.Task[None]] = []

        async def background() -> None:
            await _scan_until_ready(scanner, service)
            if settings.rescan_interval_s > 0:
                await asyncio.sleep(settings.rescan_interval_s)
                await scanner.run_forever(settings.rescan_interval_s)

        tasks.append(asyncio.create_task(background(), name="bucket-scan"))

        async def stop() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        stack.push_async_callback(stop)
        yield service


__all__ = ["GatewayService", "ServiceSettings", "open_service"]
