"""Bucket scan: manifests in a real filesystem store -> RLMM state, and incremental rescans."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gateway.kafka.demo import write_demo_segment
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import SegmentState, TopicIdPartition
from gateway.metadata.scan import BucketScanner, checkpoint_reader
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix
from gateway.remote.manifest import RemoteLogSegmentMetadata as ManifestMetadata
from gateway.remote.reader import SegmentReader
from gateway.remote.tiering import (
    LocalSegment,
    SegmentObjects,
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    upload_segment,
)
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.retry import Retrier, RetryPolicy

TOPIC_ID = uuid.UUID(int=0xABC)
TP = TopicIdPartition(TOPIC_ID, 2, "orders")
PREFIX = "tiered/"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> LocalSegment:
    d = tmp_path_factory.mktemp("seg")
    write_demo_segment(d)
    (only,) = read_segment_dir(d, include_active=True)
    return only


@pytest.fixture
def store(tmp_path: Path) -> FilesystemStore:
    return FilesystemStore(tmp_path / "bucket")


@pytest.fixture
def rlmm() -> Iterator[RemoteLogMetadataManager]:
    manager = RemoteLogMetadataManager(MemoryBackend())
    yield manager
    manager.close()


def objects(
    local: LocalSegment,
    n: int,
    start: int,
    end: int,
    epochs: tuple[tuple[int, int], ...] | None = None,
    *,
    event_time: int = 1_000,
    tp: TopicIdPartition = TP,
) -> SegmentObjects:
    meta = ManifestMetadata(
        topic_id=tp.topic_id,
        topic=tp.topic,
        partition=tp.partition,
        segment_id=uuid.UUID(int=n),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=start,
        broker_id=1,
        event_timestamp_ms=event_time,
        segment_leader_epochs=epochs or ((0, start),),
    )
    return build_segment_objects(
        local, meta, key_prefix=PREFIX, options=TieringOptions(), keys=KeyRing()
    )


async def test_scan_registers_finished_segments(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    for n, (start, end) in enumerate([(0, 99), (100, 199), (200, 299)], 1):
        await upload_segment(store, objects(local, n, start, end))
    report = await BucketScanner(store, rlmm, key_prefix=PREFIX).scan()
    assert (report.manifests, report.registered, report.skipped) == (3, 3, {})
    segments = rlmm.list_remote_log_segments(TP)
    assert [(m.start_offset, m.end_offset) for m in segments] == [(0, 99), (100, 199), (200, 299)]
    assert {m.state for m in segments} == {SegmentState.COPY_SEGMENT_FINISHED}
    assert rlmm.remote_log_size(TP) == 3 * len(local.log)  # chunk index original file size
    assert not segments[0].txn_index_empty  # the demo segment has a transaction index
    found = rlmm.remote_log_segment_metadata(TP, 0, 150)
    assert found is not None and found.segment_id.id == uuid.UUID(int=2)
    assert rlmm.resolve_topic("orders") == TOPIC_ID


async def test_duplicate_upload_resolved_by_later_event_time(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    # The later upload (segment 1, event time 2000) lists before segment 9 by key order;
    # applying in event-time order still lets it displace the earlier one.
    await upload_segment(store, objects(local, 1, 100, 199, event_time=2_000))
    await upload_segment(store, objects(local, 9, 100, 199, event_time=1_000))
    await BucketScanner(store, rlmm, key_prefix=PREFIX).scan()
    found = rlmm.remote_log_segment_metadata(TP, 0, 150)
    assert found is not None and found.segment_id.id == uuid.UUID(int=1)


async def test_rescan_picks_up_new_and_vanished(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    first, second = objects(local, 1, 0, 99), objects(local, 2, 100, 199)
    await upload_segment(store, first)
    await upload_segment(store, second)
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX)
    await scanner.scan()
    again = await scanner.scan()
    assert (again.registered, again.removed, again.unchanged) == (0, 0, 2)
    for suffix in (Suffix.LOG, Suffix.INDEXES, Suffix.MANIFEST):  # retention removes segment 1
        await store.delete(first.key.with_suffix(suffix).key)
    await upload_segment(store, objects(local, 3, 200, 299))
    report = await scanner.scan()
    assert (report.registered, report.removed, report.unchanged) == (1, 1, 1)
    assert [m.start_offset for m in rlmm.list_remote_log_segments(TP)] == [100, 200]
    assert rlmm.remote_log_segment_metadata(TP, 0, 50) is None
    assert rlmm.remote_log_size(TP) == 2 * len(local.log)


async def test_bad_manifests_are_reported_and_skipped(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    good = objects(local, 1, 0, 99)
    await upload_segment(store, good)
    other = objects(local, 2, 100, 199)
    corrupt_key = other.key.with_suffix(Suffix.MANIFEST).key
    await store.put(corrupt_key, b'{"version":"1",')
    mismatched = objects(local, 3, 200, 299)
    wrong_key = mismatched.key.with_suffix(Suffix.MANIFEST).key.replace(
        "00000000000000000200", "00000000000000000300"
    )
    await store.put(wrong_key, mismatched.manifest_bytes())
    await store.put(PREFIX + "orders-garbage/0/not-a-segment.rsm-manifest", b"{}")
    report = await BucketScanner(store, rlmm, key_prefix=PREFIX).scan()
    assert report.registered == 1
    assert set(report.skipped) == {
        corrupt_key,
        wrong_key,
        PREFIX + "orders-garbage/0/not-a-segment.rsm-manifest",
    }
    assert "not JSON" in report.skipped[corrupt_key]
    assert "not the segment of its key" in report.skipped[wrong_key]


async def test_lineage_comes_from_the_newest_segment_checkpoint(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    # Manifests claim epochs {0, 5}; the .indexes checkpoint (the demo's) says 0 -> 0, 3 -> 150.
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0),)))
    await upload_segment(store, objects(local, 2, 100, 199, ((0, 100), (5, 180))))
    retrier = Retrier(RetryPolicy())
    with ThreadPoolExecutor(2) as pool:
        reader = SegmentReader(store, retrier, pool)
        scanner = BucketScanner(
            store, rlmm, key_prefix=PREFIX, checkpoint_reader=checkpoint_reader(reader, KeyRing())
        )
        report = await scanner.scan()
    assert report.lineages == 1
    lineage = [tuple(e) for e in rlmm.epoch_lineage(TP)]
    assert lineage == [(0, 0), (3, 150), (5, 180)]
    assert rlmm.epoch_for_offset(TP, 160) == 3


async def test_lineage_without_checkpoints_merges_the_epoch_maps(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0), (1, 60))))
    await upload_segment(store, objects(local, 2, 100, 199, ((1, 100), (4, 150))))
    await BucketScanner(store, rlmm, key_prefix=PREFIX).scan()
    assert [tuple(e) for e in rlmm.epoch_lineage(TP)] == [(0, 0), (1, 60), (4, 150)]


async def test_rescan_on_an_interval_picks_up_changes(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    first = objects(local, 1, 0, 99)
    await upload_segment(store, first)
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX)
    task = asyncio.create_task(scanner.run_forever(0.01))
    try:
        for _ in range(500):
            if rlmm.partitions() and rlmm.segment_count(TP) == 1:
                break
            await asyncio.sleep(0.01)
        await upload_segment(store, objects(local, 2, 100, 199))
        for suffix in (Suffix.LOG, Suffix.INDEXES, Suffix.MANIFEST):
            await store.delete(first.key.with_suffix(suffix).key)
        for _ in range(500):
            if [m.start_offset for m in rlmm.list_remote_log_segments(TP)] == [100]:
                break
            await asyncio.sleep(0.01)
        assert [m.start_offset for m in rlmm.list_remote_log_segments(TP)] == [100]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
