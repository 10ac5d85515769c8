"""Tiering writer -> store -> segment reader: exact original bytes for every combination."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import pytest
from Crypto.PublicKey import RSA
from hypothesis import given
from hypothesis import strategies as st

from gateway.deadline import Deadline
from gateway.errors import (
    CorruptDataError,
    GatewayError,
    IntegrityError,
    ObjectNotFoundError,
    StorageUnavailableError,
)
from gateway.kafka.batch import iter_batches
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.codecs import Codec
from gateway.kafka.demo import write_demo_segment
from gateway.kafka.writer import SegmentWriter
from gateway.remote.chunk_index import Chunk
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix
from gateway.remote.manifest import IndexType, SegmentIndex, parse_manifest
from gateway.remote.reader import RemoteSegment, SegmentReader, plan_gets
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.remote.tiering import (
    LocalSegment,
    SegmentObjects,
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    requires_compression,
    segment_metadata,
    upload_segment,
)
from gateway.storage.base import ObjectStore
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.hedge import HedgePolicy
from gateway.storage.ratelimit import PrefixRateLimiter
from gateway.storage.retry import Retrier, RetryPolicy
from gateway.storage.sync import SyncFilesystemStore

TOPIC_ID = uuid.UUID("6b1c4bd6-6d1f-4a4e-9f0e-6a2f1f0f6b1c")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyRing:
    d = tmp_path_factory.mktemp("keys")
    specs = []
    for key_id in ("old", "new"):
        pem = RSA.generate(2048).export_key(format="PEM", pkcs=8)
        (d / f"{key_id}.pem").write_bytes(pem)
        specs.append(f"{key_id}={d / f'{key_id}.pem'}")
    return KeyRing.from_specs(specs)


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> LocalSegment:
    write_demo_segment(tmp_path_factory.mktemp("seg"))
    d = next(tmp_path_factory.getbasetemp().glob("seg*"))
    (only,) = read_segment_dir(d, include_active=True)
    return only


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as pool:
        yield pool


def _objects(segment: LocalSegment, keys: KeyRing, **options: object) -> SegmentObjects:
    meta = segment_metadata(segment, topic="orders", topic_id=TOPIC_ID, partition=3)
    return build_segment_objects(
        segment,
        meta,
        key_prefix="tiered/",
        options=TieringOptions(**options),  # type: ignore[arg-type]
        keys=keys,
    )


async def _open(store: ObjectStore, objects: SegmentObjects, keys: KeyRing) -> RemoteSegment:
    manifest_key = objects.key.with_suffix(Suffix.MANIFEST)
    manifest = parse_manifest(await store.get(manifest_key.key), manifest_key.key)
    return RemoteSegment.open(manifest_key, manifest, keys)


async def _tiered(
    store: ObjectStore, segment: LocalSegment, keys: KeyRing, **options: object
) -> tuple[SegmentObjects, RemoteSegment]:
    """Tier ``segment`` into ``store`` and open it as the reader would."""
    objects = _objects(segment, keys, **options)
    await upload_segment(store, objects)
    return objects, await _open(store, objects, keys)


COMBINATIONS = [
    {"compression": False},
    {"compression": True},
    {"compression": False, "encrypt_with": "new"},
    {"compression": True, "encrypt_with": "old"},
]


@pytest.mark.parametrize(
    "options", COMBINATIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items())
)
@pytest.mark.parametrize("chunk_size", [1, 100, 4096, 1 << 20])
async def test_round_trip_exact_bytes(
    tmp_path: Path,
    segment: LocalSegment,
    keys: KeyRing,
    executor: ThreadPoolExecutor,
    options: dict[str, object],
    chunk_size: int,
) -> None:
    store = FilesystemStore(tmp_path)
    _, remote = await _tiered(store, segment, keys, chunk_size=chunk_size, **options)
    assert remote.size == len(segment.log)
    assert remote.manifest.chunk_index.type_name == (
        "variable" if options["compression"] else "fixed"
    )
    reader = SegmentReader(store, Retrier(), executor, max_get_bytes=3000)
    deadline = Deadline.after(30)
    log = segment.log
    assert await reader.read_range(remote, 0, len(log), deadline) == log
    rng = random.Random(chunk_size)
    for _ in range(25):
        start = rng.randrange(0, len(log))
        end = rng.randrange(start, len(log) + 50)
        assert await reader.read_range(remote, start, end, deadline) == log[start:end]
    assert await reader.read_range(remote, len(log), len(log) + 10, deadline) == b""
    pieces = await reader.read_indexes(remote, deadline)
    assert pieces[IndexType.OFFSET] == segment.offset_index
    assert pieces[IndexType.TIMESTAMP] == segment.time_index
    assert pieces[IndexType.PRODUCER_SNAPSHOT] == segment.producer_snapshot
    assert pieces[IndexType.LEADER_EPOCH] == segment.leader_epoch_checkpoint
    assert pieces[IndexType.TRANSACTION] == segment.txn_index


async def test_identity_segment_is_read_at_exactly_the_asked_range(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    store = FilesystemStore(tmp_path)
    objects = _objects(segment, keys, chunk_size=4096)
    assert objects.log == segment.log  # uploaded byte-identical
    await upload_segment(store, objects)
    reader = SegmentReader(store, Retrier(), executor)
    remote = await _open(store, objects, keys)
    await reader.read_range(remote, 1000, 1100, Deadline.after(5))
    assert (reader.counters.gets, reader.counters.bytes_fetched) == (1, 100)


async def test_whole_segment_reads_coalesce_chunks(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    store = FilesystemStore(tmp_path)
    objects, remote = await _tiered(store, segment, keys, chunk_size=512, compression=True)
    reader = SegmentReader(store, Retrier(), executor, max_get_bytes=8 << 20)
    await reader.read_range(remote, 0, remote.size, Deadline.after(5))
    chunks = remote.manifest.chunk_index.chunk_count
    assert chunks == -(-len(segment.log) // 512) and reader.counters.gets == 1
    assert reader.counters.bytes_fetched == len(objects.log)
    assert reader.counters.chunks_decoded == chunks


@pytest.mark.parametrize("options", COMBINATIONS[2:], ids=["encrypted", "compressed-encrypted"])
async def test_any_flipped_stored_byte_is_an_integrity_error(
    tmp_path: Path,
    segment: LocalSegment,
    keys: KeyRing,
    executor: ThreadPoolExecutor,
    options: dict[str, object],
) -> None:
    store = FilesystemStore(tmp_path)
    objects, remote = await _tiered(store, segment, keys, chunk_size=2048, **options)
    reader = SegmentReader(store, Retrier(), executor)
    rng = random.Random(5)
    for _ in range(20):
        where = rng.randrange(len(objects.log))
        bad = bytearray(objects.log)
        bad[where] ^= 1 << rng.randrange(8)
        await store.put(objects.key.key, bytes(bad))
        with pytest.raises(IntegrityError):
            await reader.read_range(remote, 0, remote.size, Deadline.after(5))
    for _ in range(10):
        where = rng.randrange(len(objects.indexes))
        bad = bytearray(objects.indexes)
        bad[where] ^= 0x40
        await store.put(objects.key.with_suffix(Suffix.INDEXES).key, bytes(bad))
        with pytest.raises(IntegrityError):
            await reader.read_indexes(remote, Deadline.after(5))


@pytest.mark.parametrize("options", COMBINATIONS[:2], ids=["plain", "compressed"])
async def test_unencrypted_flips_never_give_different_records(
    tmp_path: Path,
    segment: LocalSegment,
    keys: KeyRing,
    executor: ThreadPoolExecutor,
    options: dict[str, object],
) -> None:
    """Without encryption the Aiven format has no checksum of its own: the batch CRC (and the
    zstd frame checks) are what stand between a flipped byte and a client."""
    store = FilesystemStore(tmp_path)
    objects, remote = await _tiered(store, segment, keys, chunk_size=2048, **options)
    reader = SegmentReader(store, Retrier(), executor)
    expected = [
        (r.offset, r.key, r.value, r.headers)
        for b in iter_batches(segment.log)
        for r in b.records()
    ]
    rng = random.Random(9)
    for _ in range(30):
        bad = bytearray(objects.log)
        bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        await store.put(objects.key.key, bytes(bad))
        try:
            data = await reader.read_range(remote, 0, remote.size, Deadline.after(5))
            got = [
                (r.offset, r.key, r.value, r.headers)
                for b in iter_batches(data, offset_range=(0, 172))
                for r in b.records()
            ]
        except GatewayError as exc:
            assert isinstance(exc, CorruptDataError)
            continue
        assert got == expected[: len(got)]


class _Flaky:
    """A store whose ranged reads fail as a body cut short in transit ``failures`` times."""

    def __init__(self, inner: FilesystemStore, failures: int) -> None:
        self.inner, self.failures, self.calls = inner, failures, 0

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        self.calls += 1
        if self.calls <= self.failures:
            raise StorageUnavailableError("body of 10 bytes, expected 4096")
        return await self.inner.get_range(key, start, end)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_short_bodies_are_retried(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    inner = FilesystemStore(tmp_path)
    _, remote = await _tiered(inner, segment, keys, chunk_size=4096, compression=True)
    flaky = _Flaky(inner, failures=2)
    retrier = Retrier(RetryPolicy(base_delay=0.001))
    reader = SegmentReader(flaky, retrier, executor)  # type: ignore[arg-type]
    assert await reader.read_range(remote, 0, remote.size, Deadline.after(5)) == segment.log
    assert flaky.calls == 3 and retrier.counters.retries == 2


class _Recording(FilesystemStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []

    async def put(self, key: str, data: bytes) -> None:
        self.puts.append(key.rsplit(".", 1)[1])
        await super().put(key, data)


async def test_upload_order_and_keys(tmp_path: Path, segment: LocalSegment, keys: KeyRing) -> None:
    store = _Recording(tmp_path)
    objects = _objects(segment, keys)
    await upload_segment(store, objects)
    assert store.puts == ["log", "indexes", "rsm-manifest"]
    assert objects.key.key.startswith(
        "tiered/orders-axxL1m0fSk6fDmovHw9rHA/3/00000000000000000000-"
    )
    meta = objects.manifest.remote_log_segment_metadata
    assert meta is not None and (meta.start_offset, meta.end_offset) == (0, 172)
    assert meta.segment_leader_epochs == ((0, 0), (3, 150))


def test_compression_heuristic_looks_at_the_first_batch_only() -> None:
    on = TieringOptions(compression=True, compression_heuristic=True)
    plain = build_batch(0, [RecordInput(b"v" * 100, timestamp=1)])
    zstd = build_batch(1, [RecordInput(b"v" * 100, timestamp=1)], codec=Codec.ZSTD)
    assert requires_compression(plain + zstd, on) is True
    assert requires_compression(zstd + plain, on) is False
    assert requires_compression(b"", on) is False  # no first batch: uploaded uncompressed
    corrupt = bytearray(plain)
    corrupt[-1] ^= 1
    assert requires_compression(bytes(corrupt), on) is False
    assert requires_compression(zstd, TieringOptions(compression=True)) is True
    assert requires_compression(plain, TieringOptions()) is False


def test_active_segment_is_not_tiered(tmp_path: Path) -> None:
    for base in (0, 10):
        seg = SegmentWriter(base_offset=base)
        seg.append(build_batch(base, [RecordInput(b"x", timestamp=1)] * 10))
        seg.write(tmp_path)
    # a cleanly stopped broker leaves a snapshot at the log end: still the active segment
    assert (tmp_path / "00000000000000000020.snapshot").exists()
    assert [s.base_offset for s in read_segment_dir(tmp_path)] == [0]
    both = list(read_segment_dir(tmp_path, include_active=True))
    assert [s.base_offset for s in both] == [0, 10]
    assert both[0].producer_snapshot == (tmp_path / "00000000000000000010.snapshot").read_bytes()


def _chunks(sizes: list[int]) -> list[Chunk]:
    out, pos = [], 0
    for i, size in enumerate(sizes):
        out.append(Chunk(i, i * 10, 10, pos, size))
        pos += size
    return out


@given(st.lists(st.integers(1, 50), min_size=1, max_size=60), st.integers(1, 200))
def test_plan_gets_covers_every_chunk_once_within_the_cap(sizes: list[int], cap: int) -> None:
    chunks = _chunks(sizes)
    gets = plan_gets(chunks, cap)
    assert [c for g in gets for c in g.chunks] == chunks

    def carried(g_chunks: tuple[Chunk, ...] | list[Chunk]) -> int:
        return g_chunks[-1].original_end - g_chunks[0].original_position

    for g in gets:
        assert g.start == g.chunks[0].transformed_position and g.end == g.chunks[-1].transformed_end
        assert g.size <= cap or carried(g.chunks) <= cap or len(g.chunks) == 1
    for a, b in itertools.pairwise(gets):  # greedy: the next chunk fitted neither way
        grown = [*a.chunks, b.chunks[0]]
        assert b.chunks[0].transformed_end - a.start > cap and carried(grown) > cap


async def test_an_object_shorter_than_its_manifest_is_corrupt_not_retried(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    store = FilesystemStore(tmp_path)
    objects, remote = await _tiered(store, segment, keys, chunk_size=4096, compression=True)
    await store.put(objects.key.key, objects.log[:-10])
    retrier = Retrier(RetryPolicy(base_delay=0.001))
    reader = SegmentReader(store, retrier, executor)
    with pytest.raises(CorruptDataError, match="shorter than its manifest"):
        await reader.read_range(remote, 0, remote.size, Deadline.after(5))
    assert retrier.counters.retries == 0


class CountingSlots(asyncio.Semaphore):
    """The reader's GET slots, counting the callers that asked for one."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.asked = 0

    async def acquire(self) -> Literal[True]:
        self.asked += 1
        return await super().acquire()


async def test_waiting_for_a_get_slot_does_not_eat_the_attempt_timeout(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    """The test holds both GET slots until every GET of a read is queued and longer than one
    attempt timeout has passed; only then does it let them through. Were the queueing counted
    against the attempt, every queued GET would have timed out. No verdict rides on a race: a
    loaded machine only makes the queueing longer, and once through, each GET is a local read
    well inside the timeout."""
    store = FilesystemStore(tmp_path)
    _, remote = await _tiered(store, segment, keys, chunk_size=512, compression=True)
    attempt_timeout = 1.0
    retrier = Retrier(RetryPolicy(attempt_timeout=attempt_timeout))
    reader = SegmentReader(store, retrier, executor, max_get_bytes=600, max_concurrent_gets=2)
    slots = CountingSlots(2)
    reader._gets = slots  # the reader's own slots, instrumented
    chunks = remote.manifest.chunk_index.chunks_for_range(0, remote.size)
    planned = len(plan_gets(chunks, 600))
    assert planned >= 5
    await slots.acquire()
    await slots.acquire()  # both slots held: every GET queues
    read = asyncio.ensure_future(reader.read_range(remote, 0, remote.size, Deadline.after(300)))
    for _ in range(6000):
        if slots.asked == 2 + planned:
            break
        await asyncio.sleep(0.01)
    assert slots.asked == 2 + planned and retrier.counters.attempts == 0  # all queued, none run
    await asyncio.sleep(attempt_timeout * 1.5)  # queued for longer than an attempt may take
    slots.release()
    slots.release()
    assert await read == segment.log
    assert reader.counters.gets == planned == retrier.counters.attempts
    assert retrier.counters.timeouts == 0


async def test_one_failed_get_cancels_its_siblings(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    class FailFirst(FilesystemStore):
        started = 0

        async def get_range(self, key: str, start: int, end: int) -> bytes:
            FailFirst.started += 1
            if start == 0:
                raise ObjectNotFoundError("gone")
            await asyncio.sleep(0.2)
            return await super().get_range(key, start, end)

    store = FailFirst(tmp_path)
    _, remote = await _tiered(store, segment, keys, chunk_size=512, compression=True)
    reader = SegmentReader(store, Retrier(), executor, max_get_bytes=600)
    with pytest.raises(ObjectNotFoundError):
        await reader.read_range(remote, 0, remote.size, Deadline.after(30))
    await asyncio.sleep(0.4)  # longer than a sibling's GET: uncancelled, it would finish now
    assert reader.counters.gets == 0  # the slow siblings never completed a GET


async def test_index_pieces_are_read_at_their_own_positions(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    store = FilesystemStore(tmp_path)
    objects, remote = await _tiered(store, segment, keys)
    layout = remote.manifest.segment_indexes
    # Put the leader-epoch piece first: positions are no longer cumulative.
    epoch = objects.indexes[layout.leader_epoch.position : layout.leader_epoch.end]
    rest = objects.indexes[: layout.leader_epoch.position]
    shift = len(epoch)
    moved = dataclasses.replace(
        layout,
        offset=SegmentIndex(layout.offset.position + shift, layout.offset.size),
        timestamp=SegmentIndex(layout.timestamp.position + shift, layout.timestamp.size),
        producer_snapshot=SegmentIndex(
            layout.producer_snapshot.position + shift, layout.producer_snapshot.size
        ),
        leader_epoch=SegmentIndex(0, len(epoch)),
        transaction=None,
    )
    await store.put(objects.key.with_suffix(Suffix.INDEXES).key, epoch + rest)
    shuffled = RemoteSegment(
        remote.key, dataclasses.replace(remote.manifest, segment_indexes=moved), remote.transform
    )
    pieces = await SegmentReader(store, Retrier(), executor).read_indexes(
        shuffled, Deadline.after(5)
    )
    assert pieces[IndexType.OFFSET] == segment.offset_index
    assert pieces[IndexType.LEADER_EPOCH] == segment.leader_epoch_checkpoint


@pytest.mark.parametrize(
    "options", COMBINATIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items())
)
@pytest.mark.parametrize("chunk_size", [1, 100, 4096])
async def test_sync_reader_reads_the_same_bytes(
    tmp_path: Path,
    segment: LocalSegment,
    keys: KeyRing,
    options: dict[str, object],
    chunk_size: int,
) -> None:
    store = FilesystemStore(tmp_path)
    _, remote = await _tiered(store, segment, keys, chunk_size=chunk_size, **options)
    reader = SyncSegmentReader(SyncFilesystemStore(tmp_path), max_get_bytes=3000)
    log = segment.log
    assert reader.read_range(remote, 0, len(log)) == log
    rng = random.Random(chunk_size)
    for _ in range(25):
        start = rng.randrange(0, len(log))
        end = rng.randrange(start, len(log) + 50)
        assert reader.read_range(remote, start, end) == log[start:end]
    assert all(len(p) <= 3000 or chunk_size > 3000 for p in reader.iter_range(remote, 0, len(log)))
    assert reader.read_range(remote, len(log), len(log) + 10) == b""
    pieces = reader.read_indexes(remote)
    assert pieces[IndexType.OFFSET] == segment.offset_index
    assert pieces[IndexType.TRANSACTION] == segment.txn_index
    chunks = remote.manifest.chunk_index.chunks_for_range(0, len(log))
    got = list(reader.iter_chunks(remote, chunks))
    assert [c for c, _ in got] == list(chunks)
    assert b"".join(p for _, p in got) == log


async def test_sync_reader_flipped_byte_and_short_object(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing
) -> None:
    store = FilesystemStore(tmp_path)
    objects, remote = await _tiered(store, segment, keys, chunk_size=4096, encrypt_with="new")
    path = tmp_path / objects.key.key
    data = bytearray(path.read_bytes())
    data[5000] ^= 1
    path.write_bytes(bytes(data))
    reader = SyncSegmentReader(SyncFilesystemStore(tmp_path))
    with pytest.raises(IntegrityError):
        reader.read_range(remote, 0, remote.size)
    path.write_bytes(bytes(data[:4000]))
    with pytest.raises(CorruptDataError, match="shorter than its manifest"):
        reader.read_range(remote, 0, remote.size)
    path.unlink()
    with pytest.raises(ObjectNotFoundError):
        reader.read_range(remote, 0, 10)


@pytest.mark.parametrize(
    ("script", "attempts"),
    [
        ([StorageUnavailableError, StorageUnavailableError, None], 3),  # recovers
        ([StorageUnavailableError] * 9, 5),  # gives up after max_attempts
        ([ObjectNotFoundError], 1),  # permanent: never retried
    ],
)
def test_blocking_retries(script: list[type[GatewayError] | None], attempts: int) -> None:
    calls: list[int] = []

    def op() -> bytes:
        error = script[len(calls)]
        calls.append(1)
        if error is not None:
            raise error("fault")
        return b"ok"

    policy = RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.002)
    final = script[attempts - 1]
    if final is None:
        assert Retrier(policy).run_blocking("GET k", op, Deadline.after(5)) == b"ok"
    else:
        with pytest.raises(final):
            Retrier(policy).run_blocking("GET k", op, Deadline.after(5))
    assert len(calls) == attempts


async def test_a_straggling_get_is_hedged_and_the_first_answer_kept(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    class FirstCallHangs(FilesystemStore):
        calls = 0
        cancelled = 0

        async def get_range(self, key: str, start: int, end: int) -> bytes:
            FirstCallHangs.calls += 1
            if FirstCallHangs.calls == 1:
                try:
                    await asyncio.Event().wait()  # a straggler: answers never
                except asyncio.CancelledError:
                    FirstCallHangs.cancelled += 1
                    raise
            return await super().get_range(key, start, end)

    store = FirstCallHangs(tmp_path)
    _, remote = await _tiered(store, segment, keys, chunk_size=512, compression=False)
    reader = SegmentReader(store, Retrier(), executor, hedge=HedgePolicy(after_s=0.001))
    assert await reader.read_range(remote, 100, 3000, Deadline.after(30)) == segment.log[100:3000]
    c = reader.counters
    assert (c.gets, c.hedges, c.hedge_wins) == (1, 1, 1) and FirstCallHangs.cancelled == 1
    # No hedging: the GET is simply waited for.
    plain = SegmentReader(store, Retrier(), executor, hedge=HedgePolicy(max_fraction=0))
    assert await plain.read_range(remote, 0, 10, Deadline.after(30)) == segment.log[:10]
    assert plain.counters.hedges == 0


async def test_gets_take_tokens_of_their_key_prefix(
    tmp_path: Path, segment: LocalSegment, keys: KeyRing, executor: ThreadPoolExecutor
) -> None:
    store = FilesystemStore(tmp_path)
    _, remote = await _tiered(store, segment, keys, chunk_size=512, compression=False)
    reader = SegmentReader(store, Retrier(), executor, get_rate_per_prefix=2.0)
    now = [0.0]
    reader.rate = PrefixRateLimiter(2.0, clock=lambda: now[0])  # a clock the test moves
    for _ in range(2):
        await reader.read_range(remote, 0, 10, Deadline.after(30))
    assert reader.rate.waits == 0
    assert reader.rate.reserve(remote.key.key) == pytest.approx(0.5)  # the burst is spent
