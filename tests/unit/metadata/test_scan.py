"""Bucket scan: manifests in a real filesystem store -> RLMM state, and incremental rescans."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gateway.deadline import Deadline
from gateway.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    DeadlineExceededError,
    GatewayError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from gateway.kafka.demo import write_demo_segment
from gateway.metadata import keyspace as ks
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.lineage import CheckpointReader, checkpoint_reader
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.manifests import UnreadableSegment, metadata_from_manifest
from gateway.metadata.model import SegmentState, TopicIdPartition
from gateway.metadata.scan import BucketScanner
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix
from gateway.remote.manifest import ManifestSegmentMetadata as ManifestMetadata
from gateway.remote.manifest import SegmentManifest
from gateway.remote.reader import SegmentReader
from gateway.remote.tiering import (
    LocalSegment,
    SegmentObjects,
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    upload_segment,
)
from gateway.service.offsets import check_epochs, timestamp_segment
from gateway.storage.base import ObjectInfo
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
    # The .indexes checkpoint (the demo's) says 0 -> 0, 3 -> 150, as the manifests do.
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0),)))
    await upload_segment(store, objects(local, 2, 100, 199, ((0, 100), (3, 150))))
    retrier = Retrier(RetryPolicy())
    with ThreadPoolExecutor(2) as pool:
        reader = SegmentReader(store, retrier, pool)
        scanner = BucketScanner(
            store, rlmm, key_prefix=PREFIX, checkpoint_reader=checkpoint_reader(reader, KeyRing())
        )
        report = await scanner.scan()
    assert report.lineages == 1
    lineage = [tuple(e) for e in rlmm.epoch_lineage(TP)]
    assert lineage == [(0, 0), (3, 150)]
    assert rlmm.epoch_for_offset(TP, 160) == 3


async def test_a_checkpoint_the_epoch_maps_contradict_is_not_trusted(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    """Manifests claim epochs {0, 5}; the checkpoint says 0 -> 0, 3 -> 150, which no segment's
    map says: one of them is damaged, and which one nothing tells. It is reported, the lineage
    comes from the maps (issue 13: a flipped checkpoint byte changed the epochs ListOffsets
    answered with), and the partition's lineage is recorded as in doubt, so the answers that
    carry epochs are refused (issue 19's listener campaign: a flipped epoch in a manifest's
    map, the checkpoint right, made a timestamp search answer no offset). A newer checkpoint
    that agrees settles it."""
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0),)))
    await upload_segment(store, objects(local, 2, 100, 199, ((0, 100), (5, 180))))
    retrier = Retrier(RetryPolicy())
    with ThreadPoolExecutor(2) as pool:
        reader = SegmentReader(store, retrier, pool)
        scanner = BucketScanner(
            store, rlmm, key_prefix=PREFIX, checkpoint_reader=checkpoint_reader(reader, KeyRing())
        )
        report = await scanner.scan()
    assert report.lineages == 0
    assert any(k.endswith(".indexes") and "epoch 3" in v for k, v in report.skipped.items())
    assert [tuple(e) for e in rlmm.epoch_lineage(TP)] == [(0, 0), (5, 180)]
    doubt = rlmm.lineage_dispute(TP)
    assert doubt is not None
    assert doubt[0] == [(0, 0), (3, 150)] and doubt[1].endswith(".indexes")
    with pytest.raises(CorruptCheckpointError, match=r"in doubt.*epoch 3"):
        check_epochs(rlmm, TP)
    rlmm.set_epoch_lineage(TP, uuid.uuid4(), [(0, 0), (5, 180)])  # a newer one agrees
    assert rlmm.lineage_dispute(TP) is None
    check_epochs(rlmm, TP)


async def test_a_dispute_is_checked_again_and_lapses_with_its_segment(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    """The doubt is checked against the catalog as it is at each answer: a checkpoint that
    agrees with the maps now (a damaged manifest repaired and read again) settles it; once
    the checkpoint's segment is gone (retention), nothing disputes the maps any more."""
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0), (2, 40))))
    await BucketScanner(store, rlmm, key_prefix=PREFIX).scan()
    (meta,) = rlmm.list_remote_log_segments(TP)
    rlmm.dispute_epoch_lineage(TP, meta.segment_id.id, [(0, 0), (3, 40)], "k.indexes")
    with pytest.raises(CorruptCheckpointError, match=r"k\.indexes"):
        check_epochs(rlmm, TP)
    rlmm.dispute_epoch_lineage(TP, meta.segment_id.id, [(0, 0), (2, 40)], "k.indexes")
    check_epochs(rlmm, TP)  # agrees with the catalog as it is now
    rlmm.dispute_epoch_lineage(TP, uuid.uuid4(), [(0, 0), (3, 40)], "gone.indexes")
    assert rlmm.lineage_dispute(TP) is None
    check_epochs(rlmm, TP)


def _fixed_checkpoint(text: bytes) -> CheckpointReader:
    async def read(key: ObjectKey, manifest: SegmentManifest) -> bytes | None:
        return text

    return read


@pytest.mark.parametrize(
    "checkpoint",
    [
        b"0\n2\n0 50\n5 180\n",  # DeleteRecords to 50: the broker's truncateFromStart(50)
        b"0\n2\n0 100\n5 180\n",  # retention: the log start at 100 before segment 1 goes
    ],
)
async def test_a_checkpoint_cut_at_a_moved_log_start_is_trusted(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager, checkpoint: bytes
) -> None:
    """A broker cuts its checkpoint at its log start: a segment uploaded after DeleteRecords,
    or after retention moved the log start but before it deleted the older segments, carries
    a checkpoint that begins after segments still in the bucket (a reviewer's case: it was
    disputed, and EARLIEST refused). It is recorded; the maps give the epochs below it."""
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0),)))
    await upload_segment(store, objects(local, 2, 100, 199, ((0, 100), (5, 180))))
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX,
                            checkpoint_reader=_fixed_checkpoint(checkpoint))  # fmt: skip
    report = await scanner.scan()
    assert (report.lineages, rlmm.lineage_dispute(TP)) == (1, None), report.skipped
    assert [tuple(e) for e in rlmm.epoch_lineage(TP)] == [(0, 0), (5, 180)]
    assert rlmm.epoch_for_offset(TP, 0) == 0


async def test_a_checkpoint_out_of_order_is_passed_over_not_disputed(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    """Entries that go back (5 at 180, then 0 at 0) are plainly the damaged object: skipped,
    the maps stand, no doubt recorded."""
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0),)))
    await upload_segment(store, objects(local, 2, 100, 199, ((0, 100), (5, 180))))
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX,
                            checkpoint_reader=_fixed_checkpoint(b"0\n2\n5 180\n0 0\n"))  # fmt: skip
    report = await scanner.scan()
    assert report.lineages == 0 and any(k.endswith(".indexes") for k in report.skipped)
    assert rlmm.lineage_dispute(TP) is None


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


# --- store faults are not deletions; unreadable manifests keep their claim -------------------


class FaultyStore(FilesystemStore):
    """A real filesystem store whose listing or manifest GETs fail as a store can: access
    denied, 5xx, network. ``list_fails_after``: objects listed before the listing fails."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.list_fault: GatewayError | None = None
        self.list_fails_after = 0
        self.get_faults: dict[str, GatewayError] = {}

    async def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        listed = 0
        async for info in super().list(prefix):
            if self.list_fault is not None and listed >= self.list_fails_after:
                raise self.list_fault
            listed += 1
            yield info
        if self.list_fault is not None:
            raise self.list_fault

    async def get(self, key: str) -> bytes:
        fault = self.get_faults.get(key)
        if fault is not None:
            raise fault
        return await super().get(key)


FAST = Retrier(RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002))
FAULTS = [
    ConfigurationError("LIST s3://b/tiered/: AccessDenied: check the bucket and credentials"),
    StorageUnavailableError("LIST s3://b/tiered/: SlowDown"),
    StorageError("LIST s3://b/tiered/: InternalError"),
    DeadlineExceededError("LIST s3://b/tiered/: deadline passed"),
]


def manifest_key(o: SegmentObjects) -> str:
    return o.key.with_suffix(Suffix.MANIFEST).key


async def delete_segment(store: FilesystemStore, o: SegmentObjects) -> None:
    for suffix in (Suffix.LOG, Suffix.INDEXES, Suffix.MANIFEST):
        await store.delete(o.key.with_suffix(suffix).key)


def without_metadata(o: SegmentObjects) -> bytes:
    doc = json.loads(o.manifest_bytes())
    del doc["remoteLogSegmentMetadata"]
    return json.dumps(doc).encode()


def catalog(rlmm: RemoteLogMetadataManager) -> list[tuple[int, int, str]]:
    return [
        (m.start_offset, m.end_offset, m.state.name)
        for tp in rlmm.partitions()
        for m in rlmm.list_remote_log_segments(tp)
    ]


async def test_a_store_root_that_is_gone_is_not_a_deletion(
    local: LocalSegment, tmp_path: Path, rlmm: RemoteLogMetadataManager
) -> None:
    """An unmounted volume or a moved directory: the listing fails (it used to list nothing,
    and the rescan removed every segment)."""
    root = tmp_path / "bucket"
    store = FilesystemStore(root)
    for n, (start, end) in enumerate([(0, 99), (100, 199)], 1):
        await upload_segment(store, objects(local, n, start, end))
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX)
    await scanner.scan()
    before = catalog(rlmm)
    root.rename(tmp_path / "elsewhere")
    with pytest.raises(StorageError, match="not a directory"):
        await scanner.scan()
    assert (
        catalog(rlmm)
        == before
        == [(0, 99, "COPY_SEGMENT_FINISHED"), (100, 199, "COPY_SEGMENT_FINISHED")]
    )
    assert (scanner.counters.scans, scanner.counters.aborted) == (1, 1)
    (tmp_path / "elsewhere").rename(root)
    report = await scanner.scan()
    assert (report.registered, report.removed, report.unchanged) == (0, 0, 2)


@pytest.mark.parametrize("fails_after", [0, 3], ids=["at-once", "mid-listing"])
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: type(f).__name__)
async def test_a_listing_that_fails_leaves_the_catalog_as_it_was(
    local: LocalSegment,
    tmp_path: Path,
    rlmm: RemoteLogMetadataManager,
    fault: GatewayError,
    fails_after: int,
) -> None:
    store = FaultyStore(tmp_path / "bucket")
    segs = [objects(local, n, s, s + 99) for n, s in enumerate([0, 100, 200], 1)]
    for o in segs:
        await upload_segment(store, o)
    broken = objects(local, 9, 300, 399)
    await store.put(manifest_key(broken), b"{")
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX, retrier=FAST)
    await scanner.scan()
    before, claims = catalog(rlmm), scanner.unreadable_all()
    assert len(before) == 3 and len(claims) == 1
    # retention deletes a segment, a new one is uploaded, the broken manifest is repaired...
    await delete_segment(store, segs[0])
    await upload_segment(store, objects(local, 4, 400, 499))
    await store.put(manifest_key(broken), broken.manifest_bytes())
    store.list_fault, store.list_fails_after = fault, fails_after
    with pytest.raises(type(fault)):
        await scanner.scan()  # ...but the store cannot be listed: nothing of it is applied
    assert catalog(rlmm) == before and scanner.unreadable_all() == claims
    assert scanner.counters.aborted == 1
    store.list_fault = None
    report = await scanner.scan()
    assert (report.registered, report.removed) == (2, 1)
    assert [m.start_offset for m in rlmm.list_remote_log_segments(TP)] == [100, 200, 300, 400]
    assert not scanner.unreadable_all()


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: type(f).__name__)
async def test_a_manifest_read_fault_aborts_the_pass(
    local: LocalSegment, tmp_path: Path, rlmm: RemoteLogMetadataManager, fault: GatewayError
) -> None:
    """A manifest GET that fails for a transient or permission reason is neither a deletion nor
    a corrupt manifest: the pass stops, the deletion it also found waits for the next pass."""
    store = FaultyStore(tmp_path / "bucket")
    first, second = objects(local, 1, 0, 99), objects(local, 2, 100, 199)
    for o in (first, second):
        await upload_segment(store, o)
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX, retrier=FAST)
    await scanner.scan()
    before = catalog(rlmm)
    await delete_segment(store, first)
    new = objects(local, 3, 200, 299)
    await upload_segment(store, new)
    store.get_faults[manifest_key(new)] = fault
    with pytest.raises(type(fault)):
        await scanner.scan()
    assert catalog(rlmm) == before and not scanner.unreadable_all()
    assert scanner.counters.aborted == 1
    del store.get_faults[manifest_key(new)]
    report = await scanner.scan()
    assert (report.registered, report.removed) == (1, 1)
    assert [m.start_offset for m in rlmm.list_remote_log_segments(TP)] == [100, 200]


async def test_a_manifest_deleted_between_listing_and_read_is_passed_over(
    local: LocalSegment, tmp_path: Path, rlmm: RemoteLogMetadataManager
) -> None:
    store = FaultyStore(tmp_path / "bucket")
    kept, gone = objects(local, 1, 0, 99), objects(local, 2, 100, 199)
    for o in (kept, gone):
        await upload_segment(store, o)
    store.get_faults[manifest_key(gone)] = ObjectNotFoundError("gone")  # retention, just now
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX)
    report = await scanner.scan()
    assert (report.registered, report.skipped) == (1, {})
    assert not scanner.unreadable_all() and scanner.counters.aborted == 0


async def test_unreadable_manifests_keep_their_claim_until_read_or_gone(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    good = objects(local, 1, 0, 99)
    truncated = objects(local, 2, 100, 199)
    bare = objects(local, 3, 200, 299)
    other_tp = TopicIdPartition(TOPIC_ID, 5, "orders")
    elsewhere = objects(local, 4, 50, 149, tp=other_tp)
    await upload_segment(store, good)
    for o, data in [
        (truncated, truncated.manifest_bytes()[:40]),
        (bare, without_metadata(bare)),
        (elsewhere, b"\x00not json"),
    ]:
        await upload_segment(store, o)
        await store.put(manifest_key(o), data)
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX)
    report = await scanner.scan()
    assert report.registered == 1
    assert set(report.skipped) == {manifest_key(o) for o in (truncated, bare, elsewhere)}
    claims = scanner.unreadable(TP)
    assert [(u.start_offset, u.key) for u in claims] == [
        (100, manifest_key(truncated)),
        (200, manifest_key(bare)),
    ]
    assert "not JSON" in claims[0].reason
    assert "no remoteLogSegmentMetadata" in claims[1].reason
    assert all(isinstance(u, UnreadableSegment) for u in claims)
    with pytest.raises(dataclasses.FrozenInstanceError):
        claims[0].reason = "x"  # type: ignore[misc]
    assert [(tp, u.start_offset) for tp, u in scanner.unreadable_all()] == [
        (TP, 100),
        (TP, 200),
        (other_tp, 50),
    ]
    # a rescan reads them again: still unreadable, still claimed
    again = await scanner.scan()
    assert again.registered == 0 and len(scanner.unreadable_all()) == 3
    # repaired: registered and released; deleted: released
    await store.put(manifest_key(truncated), truncated.manifest_bytes())
    await delete_segment(store, elsewhere)
    fixed = await scanner.scan()
    assert fixed.registered == 1
    assert [u.start_offset for u in scanner.unreadable(TP)] == [200]
    assert not scanner.unreadable(other_tp)
    assert [m.start_offset for m in rlmm.list_remote_log_segments(TP)] == [0, 100]


async def test_a_checkpoint_read_fault_aborts_the_pass(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    await upload_segment(store, objects(local, 1, 0, 99))
    calls = 0

    async def failing(key: ObjectKey, manifest: SegmentManifest) -> bytes | None:
        nonlocal calls
        calls += 1
        raise StorageUnavailableError(f"GET {key.key}: SlowDown")

    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX, checkpoint_reader=failing)
    with pytest.raises(StorageUnavailableError):
        await scanner.scan()
    assert calls == 1 and catalog(rlmm) == [] and scanner.counters.aborted == 1


async def test_forgetting_a_vanished_segment_needs_a_listing(
    local: LocalSegment, tmp_path: Path, rlmm: RemoteLogMetadataManager
) -> None:
    """A HEAD that answers 404 because the store root is gone is not a deletion: the listing
    that confirms it fails. With the root back and the manifest really gone, it is."""
    root = tmp_path / "bucket"
    store = FilesystemStore(root)
    seg = objects(local, 1, 0, 99)
    await upload_segment(store, seg)
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX)
    await scanner.scan()
    (meta,) = rlmm.list_remote_log_segments(TP)
    root.rename(tmp_path / "elsewhere")
    with pytest.raises(StorageError, match="not a directory"):
        await scanner.forget_if_vanished(meta, FAST, Deadline.after(30))
    assert catalog(rlmm) == [(0, 99, "COPY_SEGMENT_FINISHED")]
    (tmp_path / "elsewhere").rename(root)
    assert not await scanner.forget_if_vanished(meta, FAST, Deadline.after(30))
    await delete_segment(store, seg)
    assert await scanner.forget_if_vanished(meta, FAST, Deadline.after(30))
    assert catalog(rlmm) == []


async def test_below_a_cut_checkpoint_the_maps_follow_kafkas_assign_rules(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    """An unclean election left the old leader's epoch-1 segment [100, 199] beside the new
    leader's epoch-2 [100, 249]; the new leader's checkpoint was later cut at 150. Below the
    cut, the maps give the epochs by LeaderEpochFileCache.assign, as for the maps alone: (0 at
    0, 2 at 100). A reviewer's case: a strict merge failed there, fell back to the cut
    checkpoint alone, and a timestamp lookup skipped epoch 0 (answered from [100, 249] where
    the record at 0 was the answer). Since issue 29 the cut is also the broker's log start
    (``truncateFromStart``): the lineage below it stays as the maps give it, and the timestamp
    search starts at 150 in [100, 249], as Kafka's starts from its log start offset."""
    await upload_segment(store, objects(local, 1, 0, 99, ((0, 0),)))
    await upload_segment(store, objects(local, 2, 100, 199, ((1, 100),)))  # the old leader's
    await upload_segment(store, objects(local, 3, 100, 249, ((2, 100),)))
    await upload_segment(store, objects(local, 4, 250, 349, ((2, 250),)))
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX,
                            checkpoint_reader=_fixed_checkpoint(b"0\n1\n2 150\n"))  # fmt: skip
    report = await scanner.scan()
    assert (report.lineages, rlmm.lineage_dispute(TP)) == (1, None), report.skipped
    assert [tuple(e) for e in rlmm.epoch_lineage(TP)] == [(0, 0), (2, 100)]
    found = timestamp_segment(rlmm, TP, 0)
    assert found is not None and (found[0].segment_id.id, found[1]) == (uuid.UUID(int=3), 150)


def test_a_dispute_record_round_trips_and_a_cut_one_is_typed() -> None:
    sid = uuid.uuid4()
    data = ks.encode_dispute(sid, [(0, 0), (5, 180)], "tiered/t-0/x.indexes é")
    assert ks.decode_dispute(data) == (sid, [(0, 0), (5, 180)], "tiered/t-0/x.indexes é")
    for cut in (data[:10], data[:30], sid.bytes + b"reason"):
        with pytest.raises(CorruptCheckpointError, match="cut"):
            ks.decode_dispute(cut)


async def test_a_scan_deferring_to_the_topic_never_finishes_a_segment_it_named(
    local: LocalSegment, store: FilesystemStore, rlmm: RemoteLogMetadataManager
) -> None:
    """``--metadata-source both``: a segment the followed topic says is only STARTED (its
    manifest already in the bucket: a broker killed after the plugin wrote it) stays unserved
    through a scan; a segment the topic never named is registered by it."""
    started = objects(local, 1, 0, 99)
    await upload_segment(store, started)
    await upload_segment(store, objects(local, 2, 100, 199))
    rlmm.apply(metadata_from_manifest(started.key, started.manifest))  # the topic's STARTED
    scanner = BucketScanner(store, rlmm, key_prefix=PREFIX, defer_to_known=True)
    await scanner.scan()
    states = {m.start_offset: m.state for m in rlmm.list_remote_log_segments(TP)}
    assert states == {0: SegmentState.COPY_SEGMENT_STARTED, 100: SegmentState.COPY_SEGMENT_FINISHED}
