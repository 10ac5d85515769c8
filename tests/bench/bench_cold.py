"""Cold reads: 100 concurrent reads of distinct ranges of one untransformed segment, through the
decoded-chunk cache and the segment reader (the service's read path below the framing), from a
store that answers its first byte after 20 ms and streams each GET at a fixed bandwidth.

The store is a test-side wrapper of the filesystem store (moto reads whole objects per ranged
GET; never time it). Theory for one read: first byte + its bytes at the per-GET bandwidth, in
ceil(reads / GET concurrency) waves; ``ideal`` is one wave. Printed: p50/p99 of the reads, the
ratio p99 ÷ theory, GETs and bytes fetched per byte served, hedged GETs.

    python -m tests.bench.bench_cold [--reads 100] [--ask 1MiB] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.cache.chunks import ChunkCache
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.remote.keyring import KeyRing
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.remote.tiering import (
    LocalSegment,
    TieringOptions,
    build_segment_objects,
    segment_metadata,
    upload_segment,
)
from gateway.storage.base import ObjectInfo, ObjectStore
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.retry import Retrier

SETTINGS = Settings(store="file:///unused")
# Settings of issue 15, absent from older trees (the same file measures a checkout of before).
NEW_READER_SETTINGS: dict[str, Any] = (
    {"get_rate_per_prefix": SETTINGS.get_rate_per_prefix, "hedge": SETTINGS.hedge_policy()}
    if hasattr(SETTINGS, "hedge_policy")
    else {}
)
NEW_CACHE_SETTINGS: dict[str, Any] = (
    {"block_bytes": SETTINGS.block_bytes} if hasattr(SETTINGS, "block_bytes") else {}
)

MiB = 1 << 20
FIRST_BYTE = 0.020  # seconds before the first byte of every GET
BANDWIDTH = 100 * MiB  # bytes per second of one GET's body
STRAGGLE = 10  # a straggler's first byte comes this many times later


class SlowStore:
    """An :class:`ObjectStore` that waits ``first_byte`` + size / ``bandwidth`` per GET. Objects
    read are kept in memory and ranges sliced from them (one copy, as a socket's receive
    makes): the filesystem store's worker-thread reads would be measured otherwise."""

    def __init__(
        self, inner: ObjectStore, first_byte: float, bandwidth: float, stragglers: float = 0.0
    ) -> None:
        self._inner = inner
        self._first_byte = first_byte
        self._bandwidth = bandwidth
        self._stragglers = stragglers  # this share of ranged GETs waits 10x for its first byte
        self._rng = random.Random(11)
        self._objects: dict[str, bytes] = {}

    async def preload(self, key: str) -> None:
        self._objects[key] = await self._inner.get(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        whole = self._objects.get(key)
        data = await self._inner.get_range(key, start, end) if whole is None else whole[start:end]
        slow = STRAGGLE if self._rng.random() < self._stragglers else 1
        await asyncio.sleep(self._first_byte * slow + len(data) / self._bandwidth)
        return data

    async def get(self, key: str) -> bytes:
        data = await self._inner.get(key)
        await asyncio.sleep(self._first_byte + len(data) / self._bandwidth)
        return data

    async def put(self, key: str, data: bytes) -> None:
        await self._inner.put(key, data)

    def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        return self._inner.list(prefix)

    async def head(self, key: str) -> ObjectInfo:
        return await self._inner.head(key)

    async def delete(self, key: str) -> None:
        await self._inner.delete(key)

    async def close(self) -> None:
        await self._inner.close()


async def trial(
    store: ObjectStore,
    remote: RemoteSegment,
    ranges: list[tuple[int, int]],
    pool: ThreadPoolExecutor,
    warm: int,
) -> tuple[list[float], SegmentReader, float]:
    reader = SegmentReader(
        store,
        Retrier(),
        pool,
        max_get_bytes=SETTINGS.max_get_bytes,
        max_concurrent_gets=SETTINGS.max_concurrent_gets,
        **NEW_READER_SETTINGS,
    )
    cache = ChunkCache(
        reader,
        max_bytes=SETTINGS.chunk_cache_bytes,
        readahead_bytes=SETTINGS.readahead_bytes,
        **NEW_CACHE_SETTINGS,
    )
    if warm:  # a process that has served GETs before: the hedge threshold is known
        for lo in range(0, 40 * warm, warm):
            await reader.read_range(remote, lo, lo + warm, Deadline.after(60))
        reader.counters = type(reader.counters)()
    sid = uuid.uuid4()
    latencies: list[float] = []

    async def one(start: int, end: int) -> None:
        t0 = time.perf_counter()
        data = await cache.read(remote, sid, start, end, Deadline.after(60))
        latencies.append(time.perf_counter() - t0)
        assert len(data) == end - start

    cpu = time.process_time()
    await asyncio.gather(*(one(s, e) for s, e in ranges))
    cpu = time.process_time() - cpu
    await cache.aclose()
    return latencies, reader, cpu


async def run(n_reads: int, ask: int, trials: int, mib: int, stragglers: float) -> None:
    log = b"".join(random.Random(7).randbytes(MiB) for _ in range(mib))
    segment = LocalSegment(0, log, b"", b"", b"", b"0\n1\n0 0\n", None)
    meta = segment_metadata(segment, topic="bench", topic_id=uuid.uuid4(), partition=0)
    tmp = Path(tempfile.mkdtemp())
    inner = FilesystemStore(tmp / "bucket")
    objects = build_segment_objects(
        segment, meta, key_prefix="", options=TieringOptions(chunk_size=4 * MiB), keys=KeyRing()
    )
    await upload_segment(inner, objects)
    remote = RemoteSegment.open(objects.key, objects.manifest, KeyRing())
    store = SlowStore(inner, FIRST_BYTE, BANDWIDTH, stragglers)
    await store.preload(objects.key.key)
    concurrency = SETTINGS.max_concurrent_gets
    one_read = FIRST_BYTE + ask / BANDWIDTH
    theory = math.ceil(n_reads / concurrency) * one_read
    print(
        f"cores: {os.cpu_count()}  segment: {mib} MiB untransformed, 4 MiB chunks  reads: "
        f"{n_reads} x {ask / MiB:g} MiB  store: {FIRST_BYTE * 1000:g} ms first byte, "
        f"{BANDWIDTH / MiB:g} MiB/s per GET, {stragglers:.0%} stragglers ({STRAGGLE}x first "
        f"byte)  GET concurrency: {concurrency}"
    )
    print(f"theory: {theory * 1000:.0f} ms  (ideal, one wave: {one_read * 1000:.0f} ms)")
    p99s = []
    with ThreadPoolExecutor(2) as pool:
        for t in range(trials):
            rng = random.Random(t)
            slots = rng.sample(range(len(log) // ask - 1), n_reads)
            ranges = [(s * ask + rng.randrange(ask // 2), 0) for s in slots]
            ranges = [(s, s + ask) for s, _ in ranges]
            latencies, reader, cpu = await trial(store, remote, ranges, pool, ask + 64 * 1024)
            c = reader.counters
            q = statistics.quantiles(latencies, n=100)
            p99s.append(q[98])
            print(
                f"trial {t}: p50 {q[49] * 1000:6.0f} ms  p99 {q[98] * 1000:6.0f} ms  "
                f"p99/theory {q[98] / theory:5.2f}  p99/ideal {q[98] / one_read:5.1f}  "
                f"GETs {c.gets}  fetched/served {c.bytes_fetched / (n_reads * ask):.2f}  "
                f"hedges {getattr(c, 'hedges', 0)}  CPU {cpu * 1000:.0f} ms"
            )
    p99 = statistics.median(p99s)
    print(f"median p99 {p99 * 1000:.0f} ms: p99/theory {p99 / theory:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--ask-kib", type=int, default=1024)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--stragglers", type=float, default=0.0, help="share of slow GETs")
    args = parser.parse_args()
    asyncio.run(run(args.reads, args.ask_kib * 1024, args.trials, args.mib, args.stragglers))


if __name__ == "__main__":
    main()
