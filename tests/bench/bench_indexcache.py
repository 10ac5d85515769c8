"""Index cache benchmark: lookup cost on the indexes of a 1 GiB and a 1 MiB segment, warm and
cold, against decoding the whole index on each lookup, in the same run.

Indexes as Kafka writes them with ``index.interval.bytes`` = 4096: one offset-index and one
time-index entry every 4096 bytes of log (1 GiB: 262 144 entries, 2 MiB offset index + 3 MiB
time index). Measured per lookup (mean over a batch of random targets, best of N batches):

- warm: ``await cache.lookup_offset`` / ``lookup_timestamp`` on a cached segment, and the same
  lookups on an entry a reader already holds (no cache call);
- cold: a new cache, an in-memory loader, one lookup: load + build + sanity checks + lookup;
  and cold from the disk tier (files in the page cache): read four files + checks + lookup;
- peer: decode every entry to a list of tuples and bisect, on each lookup.

One core (this process, no threads besides the executor of the disk-tier read).

    python -m tests.bench.bench_indexcache [--lookups N] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import struct
import sys
import tempfile
import time
from bisect import bisect_right
from collections.abc import Awaitable, Callable

from gateway.kafka.epoch import format_leader_epoch_checkpoint
from gateway.kafka.offset_index import encode_offset_index
from gateway.kafka.time_index import encode_time_index
from gateway.kafka.txn_index import AbortedTxn, encode_txn_index
from indexcache import RemoteIndexCache, SegmentIndexBytes, SegmentKey

INTERVAL = 4096  # index.interval.bytes
RECORDS_PER_ENTRY = 4  # ~1 KiB records
T0 = 1_700_000_000_000
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def segment_indexes(segment_bytes: int, base: int) -> SegmentIndexBytes:
    n = segment_bytes // INTERVAL
    offsets = [base + (i + 1) * RECORDS_PER_ENTRY - 1 for i in range(n)]
    return SegmentIndexBytes(
        base_offset=base,
        offset=encode_offset_index(((o, i * INTERVAL) for i, o in enumerate(offsets)), base),
        time=encode_time_index(((T0 + 10 * i, o) for i, o in enumerate(offsets)), base),
        leader_epoch=format_leader_epoch_checkpoint([(0, 0), (3, base + 10), (7, base + 5000)]),
        txn=encode_txn_index([AbortedTxn(9, base + 20, base + 30, base + 20)]),
    )


# --- the peer: decode the whole index on each lookup -----------------------------------------


def decode_lookup_offset(raw: SegmentIndexBytes, target: int) -> tuple[int, int]:
    base = raw.base_offset
    entries = [(base + rel, pos) for rel, pos in _OFFSET_ENTRY.iter_unpack(raw.offset)]
    slot = bisect_right([e[0] for e in entries], target) - 1
    return entries[slot] if slot >= 0 else (base, 0)


def decode_lookup_timestamp(raw: SegmentIndexBytes, target: int) -> tuple[int, int]:
    base = raw.base_offset
    entries = [(ts, base + rel) for ts, rel in _TIME_ENTRY.iter_unpack(raw.time)]
    slot = bisect_right([e[0] for e in entries], target) - 1
    return entries[slot] if slot >= 0 else (-1, base)


# --- timing --------------------------------------------------------------------------------------


def best_sync(fn: Callable[[int], object], targets: list[int], repeat: int) -> float:
    """Best mean seconds per call over ``repeat`` passes of ``targets``."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for t in targets:
            fn(t)
        best = min(best, (time.perf_counter() - t0) / len(targets))
    return best


async def best_async(
    fn: Callable[[int], Awaitable[object]], targets: list[int], repeat: int
) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for t in targets:
            await fn(t)
        best = min(best, (time.perf_counter() - t0) / len(targets))
    return best


async def cold_memory(raw: SegmentIndexBytes, key: SegmentKey, target: int, n: int) -> float:
    async def load(_: SegmentKey) -> SegmentIndexBytes:
        return raw

    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        cache = RemoteIndexCache(load)
        await cache.lookup_offset(key, target)
        best = min(best, time.perf_counter() - t0)
    return best


async def cold_disk(raw: SegmentIndexBytes, key: SegmentKey, target: int, n: int) -> float:
    async def load(_: SegmentKey) -> SegmentIndexBytes:
        return raw

    with tempfile.TemporaryDirectory(prefix="bench-indexcache-") as directory:
        async with RemoteIndexCache(load, cache_dir=directory) as cache:
            await cache.get(key)
            await cache.flush()
        best = float("inf")
        for _ in range(n):
            cache = RemoteIndexCache(load, cache_dir=directory)
            await cache.start()  # the start-up scan is not timed
            t0 = time.perf_counter()
            await cache.lookup_offset(key, target)
            best = min(best, time.perf_counter() - t0)
            if cache.stats().disk_hits != 1:
                raise RuntimeError("the disk tier did not answer")
    return best


async def run(name: str, segment_bytes: int, lookups: int, repeat: int) -> None:
    rng = random.Random(7)
    key = SegmentKey("k2r5T3-xQ1mD0Yl2xjS4vA", 1_000_000)
    raw = segment_indexes(segment_bytes, key.start_offset)
    last_offset = key.start_offset + (segment_bytes // INTERVAL) * RECORDS_PER_ENTRY
    offsets = [rng.randrange(key.start_offset, last_offset) for _ in range(lookups)]
    stamps = [T0 + rng.randrange(0, 10 * segment_bytes // INTERVAL) for _ in range(lookups)]

    async def load(_: SegmentKey) -> SegmentIndexBytes:
        return raw

    cache = RemoteIndexCache(load)
    entry = await cache.get(key)
    peer_n = max(3, min(lookups, 2_000_000 // max(1, segment_bytes // INTERVAL)))
    checks = min(peer_n, 200)
    for o, t in zip(offsets[:checks], stamps[:checks], strict=True):  # same answers as the peer
        if tuple(entry.lookup_offset(o)) != decode_lookup_offset(raw, o):
            raise RuntimeError(f"offset lookup of {o} differs from the peer")
        if tuple(entry.lookup_timestamp(t)) != decode_lookup_timestamp(raw, t):
            raise RuntimeError(f"timestamp lookup of {t} differs from the peer")

    warm_offset = await best_async(lambda o: cache.lookup_offset(key, o), offsets, repeat)
    warm_time = await best_async(lambda t: cache.lookup_timestamp(key, t), stamps, repeat)
    held_offset = best_sync(entry.lookup_offset, offsets, repeat)
    held_time = best_sync(entry.lookup_timestamp, stamps, repeat)
    cold = await cold_memory(raw, key, offsets[0], max(5, repeat * 10))
    disk = await cold_disk(raw, key, offsets[0], max(3, repeat))
    peer_offset = best_sync(lambda o: decode_lookup_offset(raw, o), offsets[:peer_n], 3)
    peer_time = best_sync(lambda t: decode_lookup_timestamp(raw, t), stamps[:peer_n], 3)

    entries = segment_bytes // INTERVAL
    print(
        f"\n{name} segment: {entries} entries per index, {raw.size / 1024:.1f} KiB of index "
        f"(offset {len(raw.offset) / 1024:.1f} KiB, time {len(raw.time) / 1024:.1f} KiB)"
    )
    print(f"  {'µs per lookup':48s} {'offset->pos':>12s} {'ts->offset':>12s}")
    rows = [
        ("warm, through the cache (await cache.lookup_*)", warm_offset, warm_time),
        ("warm, on a held entry (entry.lookup_*)", held_offset, held_time),
        ("peer: decode the whole index + bisect, each time", peer_offset, peer_time),
    ]
    for label, a, b in rows:
        print(f"  {label:48s} {a * 1e6:12.2f} {b * 1e6:12.2f}")
    ratio_a, ratio_b = peer_offset / warm_offset, peer_time / warm_time
    print(f"  {'ratio peer / warm cache':48s} {ratio_a:11.0f}x {ratio_b:11.0f}x")
    print(f"  {'cold, in-memory loader: load+build+checks+lookup':48s} {cold * 1e6:12.2f}")
    print(f"  {'cold, disk tier: read 4 files+checks+lookup':48s} {disk * 1e6:12.2f}")
    print(f"  {'ratio peer / cold in-memory':48s} {peer_offset / cold:11.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lookups", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    version = sys.version.split()[0]
    print(f"cores: {os.cpu_count()}  python: {version}  index.interval.bytes: {INTERVAL}")
    t0 = time.perf_counter()
    for name, size in (("1 MiB", 1 << 20), ("1 GiB", 1 << 30)):
        asyncio.run(run(name, size, args.lookups, args.repeat))
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
