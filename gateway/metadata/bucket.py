"""One full scan of a bucket into an RLMM: the setup ``catalog``, the Spark driver and ``serve``
share (open the store, a segment reader with a :class:`~gateway.storage.retry.Retrier`, a
:class:`~gateway.metadata.scan.BucketScanner` that reads the leader-epoch checkpoints with the
configured key pairs)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gateway.metadata.follow import FollowConfig, FollowStatus, catch_up
from gateway.metadata.lineage import checkpoint_reader
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.manifests import ScanReport, UnreadableSegment
from gateway.metadata.model import TopicIdPartition
from gateway.metadata.scan import BucketScanner
from gateway.remote.keyring import KeyRing
from gateway.remote.reader import SegmentReader
from gateway.storage.base import ObjectStore
from gateway.storage.factory import open_store
from gateway.storage.retry import Retrier, RetryPolicy


def bucket_scanner(
    store: ObjectStore,
    rlmm: RemoteLogMetadataManager,
    reader: SegmentReader,
    keys: KeyRing,
    *,
    key_prefix: str,
    retrier: Retrier,
) -> BucketScanner:
    """A scanner keeping ``rlmm`` in step with the manifests under ``key_prefix``, reading
    checkpoints through ``reader`` (encrypted ones with ``keys``), retrying with ``retrier``."""
    return BucketScanner(
        store,
        rlmm,
        key_prefix=key_prefix,
        checkpoint_reader=checkpoint_reader(reader, keys),
        retrier=retrier,
    )


@dataclass(frozen=True, slots=True)
class BucketScan:
    """What one full scan found besides the segments it registered: its report and the
    manifests it could not read, by topic, topic id, partition and start offset."""

    report: ScanReport
    unreadable: tuple[tuple[TopicIdPartition, UnreadableSegment], ...]

    def claims(self) -> dict[TopicIdPartition, tuple[UnreadableSegment, ...]]:
        """The unreadable manifests by partition: the offsets each still claims."""
        return claims_of(self.unreadable)


def claims_of(
    unreadable: Sequence[tuple[TopicIdPartition, UnreadableSegment]],
) -> dict[TopicIdPartition, tuple[UnreadableSegment, ...]]:
    """Unreadable manifests (a scanner's :meth:`~gateway.metadata.scan.BucketScanner.
    unreadable_all`) by partition: the offsets each still claims."""
    out: dict[TopicIdPartition, list[UnreadableSegment]] = {}
    for tp, entry in unreadable:
        out.setdefault(tp, []).append(entry)
    return {tp: tuple(entries) for tp, entries in out.items()}


async def scan_bucket(
    rlmm: RemoteLogMetadataManager,
    url: str,
    *,
    key_prefix: str = "",
    key_pairs: Sequence[str] = (),
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    policy: RetryPolicy | None = None,
) -> BucketScan:
    """Open the store at ``url``, scan it once into ``rlmm`` and close it. ``key_pairs``:
    ``ID=PEM`` specs (checked before the store is opened). Raises what the scan raises (a
    store fault aborts it, leaving ``rlmm`` as it was)."""
    keys = KeyRing.from_specs(key_pairs)
    store = await open_store(url, endpoint_url=endpoint_url, region=region, path_style=path_style)
    try:
        with ThreadPoolExecutor(2, thread_name_prefix="bucket-scan") as pool:
            retrier = Retrier(policy or RetryPolicy())
            reader = SegmentReader(store, retrier, pool)
            scanner = bucket_scanner(
                store, rlmm, reader, keys, key_prefix=key_prefix, retrier=retrier
            )
            report = await scanner.scan()
            return BucketScan(report, tuple(scanner.unreadable_all()))
    finally:
        await store.close()


async def follow_topic(
    rlmm: RemoteLogMetadataManager,
    config: FollowConfig,
    url: str | None,
    *,
    key_prefix: str = "",
    key_pairs: Sequence[str] = (),
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    timeout_s: float = 120.0,
) -> FollowStatus:
    """Read ``config``'s metadata topic into ``rlmm`` up to the end offsets seen at start
    (:func:`~gateway.metadata.follow.catch_up`); then, with a store ``url``, record each
    partition's newest leader-epoch checkpoint (the log start it reveals). No listing."""
    # kafka-python loads only when a metadata topic is followed (not for a Spark job's scan)
    from gateway.metadata.follow_kafka import connect  # noqa: PLC0415

    status = await asyncio.to_thread(catch_up, rlmm, config, connect, timeout_s)
    if url is None:
        return status
    keys = KeyRing.from_specs(key_pairs)
    store = await open_store(url, endpoint_url=endpoint_url, region=region, path_style=path_style)
    try:
        with ThreadPoolExecutor(2, thread_name_prefix="checkpoints") as pool:
            retrier = Retrier(RetryPolicy())
            reader = SegmentReader(store, retrier, pool)
            scanner = bucket_scanner(
                store, rlmm, reader, keys, key_prefix=key_prefix, retrier=retrier
            )
            await scanner.refresh_lineages(set(await asyncio.to_thread(rlmm.partitions)))
    finally:
        await store.close()
    return status
