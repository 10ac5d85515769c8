"""Everything a running gateway owns, opened from :class:`gateway.config.Settings`.

:func:`open_service` builds the store client, thread pool, segment reader with retries,
decoded-chunk cache, index cache, RLMM with its bucket scan and rescan task, and closes all of
it on exit. The HTTP layer calls it from its lifespan.

After the first scan it warns once for every key pair id that the scanned manifests name and
the settings do not configure (reads of those segments answer 500 ``key_not_configured``). The
scan reads the leader-epoch checkpoint of each partition's newest new segment only, so the key
ids seen are those segments'; an older segment wrapped by a retired key is named when read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from gateway.cache import shared_runs
from gateway.cache.chunk_disk import ChunkDiskTier
from gateway.cache.chunks import ChunkCache
from gateway.cache.segments import SegmentSource
from gateway.cache.verified import CacheMemory, VerifiedRuns
from gateway.config import Settings, env_name, flag_name
from gateway.errors import GatewayError
from gateway.kafka import fast
from gateway.metadata.follow import Consumer, FollowConfig, MetadataFollower
from gateway.metadata.lineage import CheckpointReader, checkpoint_reader
from gateway.metadata.model import TopicIdPartition
from gateway.metadata.open import open_manager
from gateway.metadata.scan import BucketScanner
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey
from gateway.remote.local_tiered import LocalTieredStorageView
from gateway.remote.manifest import SegmentManifest
from gateway.remote.reader import SegmentReader
from gateway.service.core import GatewayService
from gateway.storage.base import ObjectStore
from gateway.storage.factory import open_store
from gateway.storage.retry import Retrier

log = logging.getLogger(__name__)


class MissingKeys:
    """The key pair ids that scanned manifests name and the key ring lacks: warned all at
    once after the first scan (:meth:`warn`), then each as a rescan first meets it."""

    def __init__(self, keys: KeyRing) -> None:
        self._keys = keys
        self._topics: dict[str, set[str]] = {}  # key id -> topics naming it, not yet warned
        self._warned: set[str] = set()
        self._armed = False

    def watching(self, read: CheckpointReader) -> CheckpointReader:
        """``read``, noting the key id of each encrypted manifest it is handed."""

        async def noted(key: ObjectKey, manifest: SegmentManifest) -> bytes | None:
            enc = manifest.encryption
            if enc is not None and enc.key_id not in self._keys:
                if enc.key_id not in self._warned:
                    self._topics.setdefault(enc.key_id, set()).add(key.topic)
                if self._armed:
                    self.warn()
            return await read(key, manifest)

        return noted

    def warn(self) -> None:
        """Warn for each key id noted since the last call; from now on, as soon as noted."""
        self._armed = True
        for key_id, topics in sorted(self._topics.items()):
            self._warned.add(key_id)
            log.warning(
                "encrypted segments of topic(s) %s name key pair id %r, which is not "
                "configured: reads of them answer 500 key_not_configured; add %s %s=PATH "
                "(or %s)",
                ", ".join(sorted(topics)),
                key_id,
                flag_name("key_pairs"),
                key_id,
                env_name("key_pairs"),
            )
        self._topics.clear()


async def _scan_until_ready(
    scanner: BucketScanner, service: GatewayService, max_delay: float = 30.0
) -> None:
    """The first scan, retried with backoff until it completes: until then the service is not
    ready (and says why), never ready with an empty catalog because the store failed. Only a
    fault the domain names (:class:`GatewayError`: the store, its credentials, a deadline) is
    retried; anything else is a bug in the gateway, logged with its traceback and shown by
    ``/readyz``, and not retried forever behind a 503 that looks like a store fault."""
    delay = 1.0
    while True:
        try:
            report = await scanner.scan()
        except GatewayError as exc:  # the store may not be reachable yet: keep trying
            log.warning("initial bucket scan failed (retrying in %.0f s): %s", delay, exc)
            service.mark_not_ready(f"the first bucket scan failed: {type(exc).__name__}: {exc}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
            continue
        except Exception as exc:
            log.critical("the first bucket scan failed with a bug, not retried", exc_info=True)
            service.mark_not_ready(
                f"the first bucket scan failed with an internal error (a bug in the gateway, "
                f"not a store fault; see the log): {type(exc).__name__}: {exc}"
            )
            return
        log.info("bucket scan: %s", report.describe())
        service.mark_ready()
        return


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _follow_until_caught_up(follower: MetadataFollower, service: GatewayService) -> None:
    """Not ready (saying why) until the follower has reached the end offsets it saw at start:
    a cluster that cannot be reached is 503 not_ready, never an empty catalog."""
    config = follower.config
    while not follower.wait_caught_up(0):
        status = follower.status
        why = status.last_error if status.last_error else f"{status.lag} records to apply"
        service.mark_not_ready(f"following {config.topic} at {config.bootstrap}: {why}")
        await asyncio.sleep(0.1)


class LineageQueue:
    """Partitions whose segments a followed topic changed, handed from the follower's thread
    to the event loop, where their newest checkpoints are read (one pass at a time)."""

    def __init__(self, scanner: BucketScanner) -> None:
        self._scanner = scanner
        self._pending: set[TopicIdPartition] = set()
        self._wake = asyncio.Event()

    def threadsafe_add(self) -> Callable[[set[TopicIdPartition]], None]:
        """A callback for the follower's thread (bound to the running loop)."""
        loop = asyncio.get_running_loop()

        def add(tps: set[TopicIdPartition]) -> None:
            loop.call_soon_threadsafe(self._add, set(tps))

        return add

    def _add(self, tps: set[TopicIdPartition]) -> None:
        self._pending |= tps
        self._wake.set()

    async def run_forever(self, retry_s: float = 1.0, tries: int = 30) -> None:
        """Refresh what changed; a partition whose newest checkpoint could not be recorded
        (its manifest not in the bucket yet, a store fault) is tried again every ``retry_s``
        seconds, ``tries`` times, then left to its next change."""
        missed: dict[TopicIdPartition, int] = {}
        while True:
            if missed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), retry_s)
            else:
                await self._wake.wait()
            self._wake.clear()
            todo, self._pending = self._pending | set(missed), set()
            try:
                left = await self._scanner.refresh_lineages(todo)
            except Exception as exc:  # a store fault: try them again
                log.warning("leader-epoch checkpoints of %d partitions: %s", len(todo), exc)
                left = todo
            missed = {tp: missed.get(tp, 0) + 1 for tp in left if missed.get(tp, 0) < tries}


async def _chunk_cache(
    settings: Settings, reader: SegmentReader, executor: ThreadPoolExecutor, memory: CacheMemory
) -> ChunkCache:
    disk = None
    if settings.chunk_cache_dir is not None:
        disk = ChunkDiskTier(settings.chunk_cache_dir, settings.chunk_cache_disk_bytes)
        kept = await asyncio.to_thread(disk.open)
        log.info("chunk disk tier %s: %d chunks kept", settings.chunk_cache_dir, kept)
    return ChunkCache(
        reader,
        max_bytes=settings.chunk_cache_bytes,
        readahead_bytes=settings.readahead_bytes,
        block_bytes=settings.block_bytes,
        disk=disk,
        executor=executor,
        memory=memory,
    )


@contextlib.asynccontextmanager
async def open_service(settings: Settings) -> AsyncIterator[GatewayService]:
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
        if settings.layout == "local-tiered-storage":  # Kafka's own files, read as the plugin's
            store = LocalTieredStorageView(store)
        stack.push_async_callback(store.close)
        retrier = Retrier(settings.retry_policy())
        reader = SegmentReader(
            store,
            retrier,
            executor,
            max_get_bytes=settings.max_get_bytes,
            max_concurrent_gets=settings.max_concurrent_gets,
            get_rate_per_prefix=settings.get_rate_per_prefix,
            hedge=settings.hedge_policy(),
        )
        index_dir = settings.index_cache_dir
        # One budget for the units reads load and the verified runs made of them.
        memory = CacheMemory(settings.chunk_cache_bytes)
        source = SegmentSource(
            reader,
            keys,
            key_prefix=settings.key_prefix,
            executor=executor,
            chunk_cache=await _chunk_cache(settings, reader, executor, memory),
            index_cache_bytes=settings.index_cache_bytes,
            index_cache_dir=None if index_dir is None else str(index_dir),
            runs=VerifiedRuns(memory, shared_runs.current()),
        )
        await source.start()
        stack.push_async_callback(source.aclose)
        rlmm = open_manager(settings.state_dir)
        stack.callback(rlmm.close)
        missing = MissingKeys(keys)
        follow = settings.follow_config()
        scanner = BucketScanner(
            store,
            rlmm,
            key_prefix=settings.key_prefix,
            checkpoint_reader=missing.watching(checkpoint_reader(reader, keys)),
            defer_to_known=follow is not None,
        )
        lineages = LineageQueue(scanner)
        follower = (
            None
            if follow is None
            else MetadataFollower(rlmm, follow, _connect(), on_change=lineages.threadsafe_add())
        )
        fast.use_compiled(settings.compiled_records)
        service = GatewayService(
            rlmm, source, reader=reader, retrier=retrier, executor=executor, scanner=scanner,
            compiled_records=settings.compiled_records, follower=follower,
        )  # fmt: skip
        halt = threading.Event()
        thread = None
        if follower is not None:
            thread = threading.Thread(
                target=follower.run, args=(halt,), name="rlmm-follow", daemon=True
            )
            thread.start()

        async def background() -> None:
            if follower is not None:
                await _follow_until_caught_up(follower, service)
                if settings.metadata_source == "topic":
                    service.mark_ready()
                    await lineages.run_forever()
                    return
                lineage_task = asyncio.create_task(lineages.run_forever(), name="lineages")
                stack.push_async_callback(_cancel, lineage_task)
            await _scan_until_ready(scanner, service)
            missing.warn()
            if settings.rescan_interval_s > 0:
                await asyncio.sleep(settings.rescan_interval_s)
                await scanner.run_forever(settings.rescan_interval_s)

        task = asyncio.create_task(background(), name="catalog")

        async def stop() -> None:
            service.mark_closing()
            halt.set()
            await _cancel(task)
            if thread is not None:  # its poll returns within poll_timeout_ms
                await asyncio.to_thread(thread.join, 10.0)

        stack.push_async_callback(stop)
        yield service


__all__ = ["MissingKeys", "open_service"]


def _connect() -> Callable[[FollowConfig], Consumer]:
    """The Kafka client that reads the metadata topic (kafka-python loads only when following)."""
    from gateway.metadata.follow_kafka import connect  # noqa: PLC0415

    return connect
