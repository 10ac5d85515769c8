"""The demo bucket: its layout, and every segment read back through the remote reader."""

from __future__ import annotations

import itertools
import random
import stat
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.deadline import Deadline
from gateway.demo import DemoBucket, write_demo_bucket, write_demo_bucket_async
from gateway.demo.log import PartitionLog
from gateway.demo.topics import TOPICS
from gateway.errors import ConfigurationError
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType, control_type
from gateway.kafka.demo import DEMO_BASE_TIMESTAMP
from gateway.kafka.records import LOG_APPEND_TIME, RecordLike
from gateway.kafka.txn_index import TransactionIndex
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.lineage import checkpoint_reader
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.metadata.scan import BucketScanner
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.remote.manifest import IndexType, ManifestSegmentMetadata, parse_manifest
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.storage.factory import open_store
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.retry import Retrier, RetryPolicy

ELAPSED: dict[str, float] = {}


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> DemoBucket:
    root = tmp_path_factory.mktemp("demo")
    t0 = time.perf_counter()
    written = write_demo_bucket(root)
    ELAPSED["write"] = time.perf_counter() - t0
    return written


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


@dataclass(frozen=True)
class Segment:
    """One uploaded segment read back: its metadata, decoded batches and original bytes."""

    key: ObjectKey
    remote: RemoteSegment
    meta: ManifestSegmentMetadata
    log: bytes
    indexes: dict[IndexType, bytes | None]

    def batches(self) -> list[RecordBatch]:
        return list(
            iter_batches(self.log, offset_range=(self.meta.start_offset, self.meta.end_offset))
        )


Partitions = dict[tuple[str, int], list[Segment]]


async def _read_all(bucket: DemoBucket, executor: ThreadPoolExecutor) -> Partitions:
    store = await open_store(bucket.store_url)
    keys = KeyRing.from_specs([bucket.key_pair_spec])
    reader = SegmentReader(store, Retrier(RetryPolicy()), executor, max_get_bytes=20_000)
    deadline = Deadline.after(30)
    out: Partitions = defaultdict(list)
    try:
        async for info in store.list(bucket.key_prefix):
            key = parse_object_key(info.key, bucket.key_prefix)
            if key.suffix is not Suffix.MANIFEST:
                continue
            manifest = parse_manifest(await store.get(key.key), key.key)
            remote = RemoteSegment.open(key, manifest, keys)
            meta = manifest.remote_log_segment_metadata
            assert meta is not None
            log = await reader.read_range(remote, 0, remote.size, deadline)
            indexes = await reader.read_indexes(remote, deadline)
            out[key.topic, key.partition].append(Segment(key, remote, meta, log, indexes))
    finally:
        await store.close()
    for segments in out.values():
        segments.sort(key=lambda s: (s.meta.start_offset, s.meta.event_timestamp_ms))
    return dict(out)


@pytest.fixture
async def partitions(bucket: DemoBucket, executor: ThreadPoolExecutor) -> Partitions:
    return await _read_all(bucket, executor)


def _records(batches: list[RecordBatch]) -> Iterator[tuple[RecordBatch, RecordLike]]:
    for batch in batches:
        for record in batch.records():
            yield batch, record


def _latest(segments: list[Segment]) -> list[Segment]:
    """One segment per start offset: the latest upload, as Kafka's displacement keeps."""
    by_start: dict[int, Segment] = {}
    for s in segments:  # sorted by (start offset, event time)
        by_start[s.meta.start_offset] = s
    return [by_start[k] for k in sorted(by_start)]


def test_layout(bucket: DemoBucket) -> None:
    root = bucket.root
    assert bucket.store_url == (root / "bucket").as_uri()
    assert bucket.key_prefix == "demo/"
    assert bucket.key_pair_spec == f"demo={root / 'keys' / 'demo.pem'}"
    pem = bucket.key_pair_path.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert stat.S_IMODE(bucket.key_pair_path.stat().st_mode) == 0o600
    assert (root / "bucket" / "demo").is_dir()
    assert bucket.serve_args == [
        "--store",
        bucket.store_url,
        "--key-prefix",
        "demo/",
        "--key-pair",
        bucket.key_pair_spec,
    ]
    names = [t.name for t in bucket.topics]
    assert names == ["orders", "clicks.v2-raw", "audit", "payments", "inventory"]
    for topic in bucket.topics:
        assert 1 <= len(topic.partitions) <= 3
        assert not topic.topic_id_text.startswith("-")
        for p in topic.partitions:
            assert (root / "segments" / f"{topic.name}-{p.partition}").is_dir()
            assert p.segments >= 3
            assert p.first_offset == 0
            assert p.first_timestamp == DEMO_BASE_TIMESTAMP
            assert p.last_timestamp > p.first_timestamp
    assert ELAPSED["write"] < 10  # about 1.5 s, RSA-2048 key generation included


async def test_manifests_per_partition(bucket: DemoBucket) -> None:
    store = FilesystemStore(bucket.root / "bucket")
    objects: dict[tuple[str, int], dict[Suffix, int]] = defaultdict(lambda: defaultdict(int))
    async for info in store.list(bucket.key_prefix):
        key = parse_object_key(info.key, bucket.key_prefix)
        assert key.topic_id == bucket.topic(key.topic).topic_id
        objects[key.topic, key.partition][key.suffix] += 1
    expected = {
        (t.name, p.partition): dict.fromkeys(Suffix, p.uploads)
        for t in bucket.topics
        for p in t.partitions
    }
    assert objects == expected


async def test_every_segment_decodes_contiguously(
    bucket: DemoBucket, partitions: Partitions
) -> None:
    for topic in bucket.topics:
        for summary in topic.partitions:
            segments = partitions[topic.name, summary.partition]
            assert len(segments) == summary.uploads
            folder = bucket.root / "segments" / f"{topic.name}-{summary.partition}"
            expected_next, data, control, max_ts = 0, 0, 0, -1
            latest = _latest(segments)
            assert len(latest) == summary.segments
            for seg in latest:
                # byte for byte the broker's segment file
                assert seg.log == (folder / f"{seg.meta.start_offset:020d}.log").read_bytes()
                assert seg.meta.start_offset == expected_next
                for batch, record in _records(seg.batches()):
                    if batch.base_offset == expected_next:
                        assert batch.max_timestamp >= max_ts
                        max_ts = batch.max_timestamp
                    assert record.offset == expected_next
                    expected_next += 1
                    control += batch.is_control
                    data += not batch.is_control
                assert expected_next - 1 == seg.meta.end_offset
            assert data == summary.records
            assert control == summary.control_records
            assert expected_next - 1 == summary.last_offset
            assert max_ts == summary.last_timestamp


def test_topic_kinds(partitions: Partitions) -> None:
    orders = [r for s in partitions["orders", 0] for r in _records(s.batches())]
    assert any(r.key is None for _, r in orders)
    assert any(r.value is None for _, r in orders)
    assert any(r.headers and r.headers[-1] == ("retry", None) for _, r in orders)
    assert any(b.timestamp_type == LOG_APPEND_TIME for b, _ in orders)
    assert all(b.codec is Codec.NONE for b, _ in orders)
    assert all(not s.remote.manifest.compression for s in partitions["orders", 0])

    clicks = [s for p in range(3) for s in partitions["clicks.v2-raw", p]]
    codecs = {b.codec for s in clicks for b in s.batches()}
    assert codecs == {Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD}
    assert all(not s.remote.manifest.compression for s in clicks)  # the heuristic's call

    for audit in partitions["audit", 0]:
        assert audit.remote.manifest.compression
        assert audit.remote.manifest.chunk_index.chunk_count >= 8


def test_encryption(partitions: Partitions) -> None:
    for (topic, _), segments in partitions.items():
        for seg in segments:
            enc = seg.remote.manifest.encryption
            if topic == "payments":
                assert enc is not None
                assert enc.key_id == "demo"
                assert seg.remote.manifest.compression
            else:
                assert enc is None
    payments = partitions["payments", 0]
    assert max(s.remote.manifest.chunk_index.chunk_count for s in payments) >= 2


def test_transactions(bucket: DemoBucket, partitions: Partitions) -> None:
    for summary in bucket.topic("payments").partitions:
        segments = partitions["payments", summary.partition]
        markers: dict[ControlRecordType, int] = defaultdict(int)
        aborted_data = 0
        open_txn: dict[int, int] = defaultdict(int)
        spanning = 0
        for seg in segments:
            txn = seg.indexes[IndexType.TRANSACTION]
            assert txn is not None
            aborted = TransactionIndex(txn, seg.meta.start_offset).all_aborted_txns()
            assert aborted
            spanning += sum(a.first_offset < seg.meta.start_offset for a in aborted)
            for batch, record in _records(seg.batches()):
                assert batch.is_transactional
                if batch.is_control:
                    kind = control_type(record.key)
                    markers[kind] += 1
                    if kind is ControlRecordType.ABORT:
                        aborted_data += open_txn[batch.producer_id]
                    open_txn[batch.producer_id] = 0
                else:
                    open_txn[batch.producer_id] += 1
        assert markers[ControlRecordType.ABORT] > 0
        assert markers[ControlRecordType.COMMIT] > 0
        assert aborted_data == summary.aborted_records > 0
        assert spanning > 0  # an aborted transaction begun before its marker's segment


def test_leader_epochs_and_reupload(bucket: DemoBucket, partitions: Partitions) -> None:
    segments = partitions["inventory", 0]
    epochs = {b.partition_leader_epoch for s in segments for b in s.batches()}
    assert len(epochs) >= 3
    assert bucket.topic("inventory").partition(0).leader_epochs == tuple(sorted(epochs))
    meta_epochs = {e for s in segments for e, _ in s.meta.segment_leader_epochs}
    assert meta_epochs == epochs
    # an epoch change inside a segment and one at a segment boundary
    assert any(len(s.meta.segment_leader_epochs) > 1 for s in segments)
    latest = _latest(segments)
    assert any(
        a.meta.segment_leader_epochs[-1][0] != b.meta.segment_leader_epochs[0][0]
        and b.meta.segment_leader_epochs[0][1] == b.meta.start_offset
        for a, b in itertools.pairwise(latest)
    )
    starts: dict[int, list[Segment]] = defaultdict(list)
    for s in segments:
        starts[s.meta.start_offset].append(s)
    (twice,) = [v for v in starts.values() if len(v) == 2]
    first, second = twice
    assert first.meta.segment_id != second.meta.segment_id
    assert first.meta.end_offset == second.meta.end_offset
    assert second.meta.event_timestamp_ms > first.meta.event_timestamp_ms
    assert (first.meta.broker_id, second.meta.broker_id) == (0, 1)
    assert first.log == second.log


def test_example_requests(bucket: DemoBucket) -> None:
    requests = bucket.example_requests("http://localhost:9000/")
    assert len(requests) == 3
    assert requests[0] == (
        "curl 'http://localhost:9000/v1/topics/orders/partitions/0/records?offset=0&max_bytes=4096'"
    )
    assert "/v1/topics/clicks.v2-raw/partitions/1/offsets?timestamp=" in requests[1]
    ts = int(requests[1].rstrip("'").rsplit("=", 1)[1])
    clicks = bucket.topic("clicks.v2-raw").partition(1)
    assert clicks.first_timestamp < ts < clicks.last_timestamp
    assert "payments" in requests[2]
    assert "read_committed" in requests[2]
    assert bucket.example_requests()[0].startswith("curl 'http://127.0.0.1:8080/v1/")


def test_topic_content_is_deterministic(tmp_path: Path) -> None:
    def write(where: Path) -> dict[str, bytes]:
        out = {}
        for topic in TOPICS:
            for p in range(topic.partitions):
                folder = where / f"{topic.name}-{p}"
                log = PartitionLog(folder, base_timestamp=DEMO_BASE_TIMESTAMP)
                topic.fill(log, random.Random(f"{topic.name}-{p}"), p)
                log.close()
                out.update({f"{folder.name}/{f.name}": f.read_bytes() for f in folder.iterdir()})
        return out

    assert write(tmp_path / "a") == write(tmp_path / "b")


def test_refuses_a_folder_in_use(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("mine")
    with pytest.raises(ConfigurationError, match="new or empty"):
        write_demo_bucket(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["something"]


async def test_bucket_scan_registers_everything(
    bucket: DemoBucket, partitions: Partitions, executor: ThreadPoolExecutor
) -> None:
    store = FilesystemStore(bucket.root / "bucket")
    keys = KeyRing.from_specs([bucket.key_pair_spec])
    reader = checkpoint_reader(SegmentReader(store, Retrier(RetryPolicy()), executor), keys)
    rlmm = RemoteLogMetadataManager(MemoryBackend())
    try:
        report = await BucketScanner(
            store, rlmm, key_prefix=bucket.key_prefix, checkpoint_reader=reader
        ).scan()
        uploads = sum(p.uploads for t in bucket.topics for p in t.partitions)
        assert (report.manifests, report.registered, report.skipped) == (uploads, uploads, {})
        assert report.lineages == sum(len(t.partitions) for t in bucket.topics)
        for topic in bucket.topics:
            for summary in topic.partitions:
                tp = TopicIdPartition(topic.topic_id, summary.partition, topic.name)
                assert rlmm.remote_log_start_offset(tp) == 0
                assert rlmm.remote_log_end_offset(tp) == summary.last_offset
        inventory = TopicIdPartition(bucket.topic("inventory").topic_id, 0, "inventory")
        lineage = [(e.epoch, e.start_offset) for e in rlmm.epoch_lineage(inventory)]
        assert [e for e, _ in lineage] == [0, 2, 5, 8]
        found = rlmm.remote_log_segment_metadata(inventory, 0, 0)
        reuploaded = partitions["inventory", 0][1]  # the later of the two at offset 0
        assert found is not None
        assert found.segment_id.id == reuploaded.meta.segment_id
        assert found.broker_id == 1
    finally:
        rlmm.close()


async def test_async_variant_inside_a_running_loop(tmp_path: Path) -> None:
    written = await write_demo_bucket_async(tmp_path / "demo")
    assert written.topic("inventory").partition(0).uploads == 5
    assert (tmp_path / "demo" / "bucket" / "demo").is_dir()
