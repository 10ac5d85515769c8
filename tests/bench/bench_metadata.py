"""Metadata benchmark: offset -> segment lookups and KIP-852 ``remote_log_size`` with 1 000 000
segments in the store, against listing and summing (the pre-KIP-852 way) in the same run.

Goals: a lookup under 50 µs; ``remote_log_size`` O(1) (the same time at 1 000 segments as at
1 000 000). The store is :class:`RemoteLogMetadataManager` over :class:`SQLiteBackend` on a file
in a temporary directory: ``--partitions`` x ``--segments`` segments of 100 offsets each, random
(seeded) uuid4 segment ids, a new leader epoch every ``--epoch-every`` segments. Each segment is
added COPY_SEGMENT_STARTED then updated COPY_SEGMENT_FINISHED, ``--batch`` events to a
``manager.batch()`` commit. Lookups ask ``remote_log_segment_metadata(tp, epoch, offset)`` for a
random offset of a random partition, with the epoch computed beforehand; only the call is timed
(after a warm-up) and every answer is checked. The in-memory backend is measured on a smaller
store for comparison. One thread.

    python -m tests.bench.bench_metadata [--partitions N] [--segments N] [--lookups N]
                                         [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import pstats
import random
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.metadata.backend import KeyValueBackend, MemoryBackend
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
    TopicIdPartition,
)
from gateway.metadata.sqlite import SQLiteBackend

OFFSETS_PER_SEGMENT = 100
SEGMENT_SIZE = 1 << 20  # plus up to 1023 bytes, so that sums are not trivially a product
T0 = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Layout:
    partitions: int
    segments: int  # per partition
    epoch_every: int

    @property
    def total(self) -> int:
        return self.partitions * self.segments

    def tps(self) -> list[TopicIdPartition]:
        topic_id = uuid.UUID(int=0xBE7C4)
        return [TopicIdPartition(topic_id, p, "bench") for p in range(self.partitions)]

    def epoch_of(self, offset: int) -> int:
        return offset // OFFSETS_PER_SEGMENT // self.epoch_every


@dataclass(slots=True)
class Store:
    layout: Layout
    manager: RemoteLogMetadataManager
    load_seconds: float
    path: Path | None
    commit_rates: list[float]  # segments/s of each batch, in load order


def _segment_size(i: int) -> int:
    return SEGMENT_SIZE + i % 1024


def load(backend: KeyValueBackend, layout: Layout, batch: int, path: Path | None) -> Store:
    """Fill the store; returns it with the wall time of the load."""
    manager = RemoteLogMetadataManager(backend)
    rng = random.Random(852)
    tps = layout.tps()
    per_batch = max(1, batch // 2)  # two events per segment
    rates: list[float] = []
    t0 = time.perf_counter()
    for first in range(0, layout.total, per_batch):
        t_batch = time.perf_counter()
        with manager.batch():
            for k in range(first, min(first + per_batch, layout.total)):
                i, p = divmod(k, layout.partitions)  # partitions round-robin, as produced
                start = i * OFFSETS_PER_SEGMENT
                sid = RemoteLogSegmentId(tps[p], uuid.UUID(int=rng.getrandbits(128), version=4))
                event_time = T0 + i
                manager.add_remote_log_segment_metadata(
                    RemoteLogSegmentMetadata(
                        sid,
                        start,
                        start + OFFSETS_PER_SEGMENT - 1,
                        max_timestamp_ms=event_time,
                        broker_id=1,
                        event_timestamp_ms=event_time,
                        segment_leader_epochs=((layout.epoch_of(start), start),),
                        segment_size_in_bytes=_segment_size(i),
                    )
                )
                manager.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(
                        sid, event_time + 1, None, SegmentState.COPY_SEGMENT_FINISHED, 1
                    )
                )
        done = min(per_batch, layout.total - first)
        rates.append(done / (time.perf_counter() - t_batch))
    return Store(layout, manager, time.perf_counter() - t0, path, rates)


def sqlite_store(
    directory: Path, name: str, layout: Layout, batch: int, cache_mib: int = 0
) -> Store:
    path = directory / f"{name}.db"
    backend = SQLiteBackend(path)
    if cache_mib:  # an experiment: the backend has no such setting (yet)
        backend._conn.execute(f"PRAGMA cache_size=-{cache_mib * 1024}")
    return load(backend, layout, batch, path)


def _file_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


# --- measurements ------------------------------------------------------------------------------


Lookup = tuple[TopicIdPartition, int, int]  # tp, epoch, offset


def make_lookups(layout: Layout, n: int, seed: int) -> list[Lookup]:
    rng = random.Random(seed)
    tps = layout.tps()
    last = layout.segments * OFFSETS_PER_SEGMENT
    out = []
    for _ in range(n):
        offset = rng.randrange(last)
        out.append((rng.choice(tps), layout.epoch_of(offset), offset))
    return out


def time_lookups(store: Store, n: int, warmup: int = 2_000) -> list[float]:
    """Per-call times (µs) of ``n`` random lookups, each answer checked."""
    find = store.manager.remote_log_segment_metadata
    for tp, epoch, offset in make_lookups(store.layout, warmup, 1):
        find(tp, epoch, offset)
    clock = time.perf_counter_ns
    times: list[float] = []
    for tp, epoch, offset in make_lookups(store.layout, n, 2):
        t0 = clock()
        found = find(tp, epoch, offset)
        t1 = clock()
        times.append((t1 - t0) / 1000)
        if found is None or not found.start_offset <= offset <= found.end_offset:
            raise RuntimeError(f"lookup of {tp} epoch {epoch} offset {offset} gave {found}")
    return times


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def describe(times: list[float]) -> str:
    s = sorted(times)
    mean = sum(s) / len(s)
    return (
        f"p50 {percentile(s, 0.50):6.1f} µs  p99 {percentile(s, 0.99):6.1f} µs  "
        f"mean {mean:6.1f} µs  max {s[-1]:8.1f} µs  (n={len(s)})"
    )


def mean_us(fn: Callable[[], object], n: int, rounds: int = 5) -> float:
    """The mean time of one call (µs) over ``n`` calls, in the best of ``rounds`` rounds (the
    machine is shared: the best round is the least disturbed one)."""
    clock = time.perf_counter_ns
    best = float("inf")
    for _ in range(rounds):
        t0 = clock()
        for _ in range(n):
            fn()
        best = min(best, (clock() - t0) / n / 1000)
    return best


def best_seconds(fn: Callable[[], int], repeat: int, expected: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = fn()
        best = min(best, time.perf_counter() - t0)
        if got != expected:
            raise RuntimeError(f"list-and-sum gave {got}, the running size {expected}")
    return best


def _mid_epoch(layout: Layout) -> int:
    return layout.epoch_of(layout.segments * OFFSETS_PER_SEGMENT // 2)


@dataclass(frozen=True, slots=True)
class Sizes:
    segments: int  # in the partition
    running: float  # remote_log_size(tp), µs
    running_epoch: float  # remote_log_size(tp, epoch), µs
    listed: float  # list-and-sum over the partition, µs
    epoch_segments: int
    listed_epoch: float  # list-and-sum over one epoch, µs


def sizes(store: Store, calls: int, repeat: int) -> Sizes:
    """KIP-852 running sizes against list-and-sum on partition 0, each checked against the
    other and against the loaded sizes; list-and-sum is the best of ``repeat``."""
    m, tp, layout = store.manager, store.layout.tps()[0], store.layout
    epoch = _mid_epoch(layout)
    expected = m.remote_log_size(tp)
    if expected != sum(_segment_size(i) for i in range(layout.segments)):
        raise RuntimeError(f"remote_log_size {expected} is not the sum of the loaded sizes")

    def list_and_sum(epoch: int | None) -> Callable[[], int]:
        def run() -> int:
            return sum(s.segment_size_in_bytes for s in m.list_remote_log_segments(tp, epoch))

        return run

    gc.collect()
    return Sizes(
        segments=layout.segments,
        running=mean_us(lambda: m.remote_log_size(tp), calls),
        running_epoch=mean_us(lambda: m.remote_log_size(tp, epoch), calls),
        listed=best_seconds(list_and_sum(None), repeat, expected) * 1e6,
        epoch_segments=len(m.list_remote_log_segments(tp, epoch)),
        listed_epoch=best_seconds(list_and_sum(epoch), repeat, m.remote_log_size(tp, epoch)) * 1e6,
    )


def report_sizes(name: str, r: Sizes, calls: int, repeat: int) -> None:
    print(
        f"  {name}, partition of {r.segments:,} segments:\n"
        f"    remote_log_size(tp)               {r.running:12,.2f} µs"
        f"  (mean of {calls:,} calls, best of 5 rounds)\n"
        f"    list-and-sum(tp)                  {r.listed:12,.0f} µs  (best of {repeat})\n"
        f"    ratio list-and-sum / running size {r.listed / r.running:12,.0f}x\n"
        f"    remote_log_size(tp, epoch)        {r.running_epoch:12,.2f} µs\n"
        f"    list-and-sum(tp, epoch)           {r.listed_epoch:12,.0f} µs"
        f"  ({r.epoch_segments:,} segments; {r.listed_epoch / r.running_epoch:,.0f}x)"
    )


def profile_lookups(store: Store, n: int, top: int) -> None:
    find = store.manager.remote_log_segment_metadata
    lookups = make_lookups(store.layout, n, 3)
    prof = cProfile.Profile()
    prof.enable()
    for tp, epoch, offset in lookups:
        find(tp, epoch, offset)
    prof.disable()
    print(f"\ncProfile of {n} SQLite lookups (tottime, top {top}):")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def profile_load(backend: KeyValueBackend, layout: Layout, batch: int, top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    load(backend, layout, batch, None)
    prof.disable()
    print(f"\ncProfile of loading {layout.total} segments (tottime, top {top}):")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


# --- report ------------------------------------------------------------------------------------


def report_load(name: str, store: Store) -> None:
    n, dt = store.layout.total, store.load_seconds
    line = (
        f"{name}: loaded {n:,} segments ({2 * n:,} events) in {dt:.1f} s: "
        f"{n / dt:,.0f} segments/s, {2 * n / dt:,.0f} events/s"
    )
    if store.path is not None:
        line += f"; DB file {_file_size(store.path) / 2**20:,.1f} MiB"
    rates = store.commit_rates
    if len(rates) > 1:
        line += f"\n  first commit {rates[0]:,.0f} segments/s, last commit {rates[-1]:,.0f}/s"
    print(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--segments", type=int, default=100_000, help="per partition")
    ap.add_argument("--epoch-every", type=int, default=10_000, help="segments per leader epoch")
    ap.add_argument("--batch", type=int, default=50_000, help="events per commit")
    ap.add_argument("--lookups", type=int, default=20_000)
    ap.add_argument("--memory-segments", type=int, default=10_000, help="per partition")
    ap.add_argument("--repeat", type=int, default=3, help="list-and-sum repetitions")
    ap.add_argument("--size-calls", type=int, default=20_000)
    ap.add_argument(
        "--sqlite-cache-mib",
        type=int,
        default=0,
        help="experiment: PRAGMA cache_size for the SQLite stores (0: the backend's default)",
    )
    ap.add_argument("--profile", action="store_true", help="cProfile lookups and a load")
    args = ap.parse_args()

    big = Layout(args.partitions, args.segments, args.epoch_every)
    small = Layout(1, 1_000, args.epoch_every)
    mem = Layout(args.partitions, args.memory_segments, args.epoch_every)
    cache = f"{args.sqlite_cache_mib} MiB" if args.sqlite_cache_mib else "default"
    print(
        f"cores: {os.cpu_count()}  Python {platform.python_version()}  "
        f"SQLite {sqlite3.sqlite_version} (page cache: {cache})  {platform.machine()}"
    )
    print(
        f"store: {big.partitions} partitions x {big.segments:,} segments = {big.total:,}, "
        f"{OFFSETS_PER_SEGMENT} offsets each, new leader epoch every {big.epoch_every:,} "
        f"segments, {args.batch:,} events per commit\n"
    )
    with tempfile.TemporaryDirectory(prefix="bench-metadata-") as tmp:
        directory = Path(tmp)
        cache_mib = args.sqlite_cache_mib
        stores = {
            f"SQLite, {big.total:,} segments": sqlite_store(
                directory, "big", big, args.batch, cache_mib
            ),
            f"SQLite, {small.total:,} segments": sqlite_store(
                directory, "small", small, args.batch, cache_mib
            ),
            f"MemoryBackend, {mem.total:,} segments": load(MemoryBackend(), mem, args.batch, None),
        }
        for name, store in stores.items():
            report_load(name, store)

        print("\noffset -> segment lookup, remote_log_segment_metadata(tp, epoch, offset):")
        for name, store in stores.items():
            gc.collect()
            print(f"  {name:34s} {describe(time_lookups(store, args.lookups))}")

        print("\nsize of one partition, KIP-852 running total against list-and-sum:")
        (big_name, big_store), (small_name, small_store) = list(stores.items())[:2]
        large = sizes(big_store, args.size_calls, args.repeat)
        report_sizes(big_name, large, args.size_calls, args.repeat)
        tiny = sizes(small_store, args.size_calls, args.repeat)
        report_sizes(small_name, tiny, args.size_calls, args.repeat)
        print(
            f"\nO(1): remote_log_size(tp) {tiny.running:.2f} µs with {small.total:,} segments in "
            f"the store, {large.running:.2f} µs with {big.total:,} "
            f"({large.running / tiny.running:.2f}x); list-and-sum {tiny.listed:,.0f} µs -> "
            f"{large.listed:,.0f} µs ({large.listed / tiny.listed:,.0f}x)"
        )
        if args.profile:
            profile_lookups(big_store, args.lookups, 25)
            small_load = Layout(2, 5_000, 1_000)
            profile_load(SQLiteBackend(directory / "profile.db"), small_load, 10_000, 30)
        for store in stores.values():
            store.manager.close()


if __name__ == "__main__":
    main()
