"""RemoteIndexCache disk tier: layout, restarts, leftovers, corrupt files, the disk byte bound."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.errors import CorruptIndexError
from gateway.kafka.offset_index import OffsetPosition
from gateway.kafka.time_index import TimestampOffset
from indexcache import DiskTier, RemoteIndexCache, SegmentIndexBytes, SegmentIndexes, SegmentKey
from tests.unit.indexcache.cache_support import T0, Loader, key, loader_for, segment_bytes

SUFFIXES = (".index", ".timeindex", ".txnindex", ".leader-epoch-checkpoint")


def files_of(directory: Path, k: SegmentKey) -> dict[str, Path]:
    return {s: directory / f"{k.start_offset}_{k.segment_id}{s}" for s in SUFFIXES}


async def fill(directory: Path, loader: Loader, *keys: SegmentKey, **options: int) -> None:
    """Load ``keys`` through a cache on ``directory`` and close it (writes finished)."""
    async with RemoteIndexCache(loader, cache_dir=directory, **options) as cache:
        for k in keys:
            await cache.get(k)
        await cache.flush()


# --- layout and restart -------------------------------------------------------------------------


async def test_files_use_kafkas_names_and_hold_the_loaders_bytes(tmp_path: Path) -> None:
    k = key(12)
    loader = loader_for(k)
    await fill(tmp_path, loader, k)
    raw = loader.segments[k]
    paths = files_of(tmp_path, k)
    assert paths[".index"].name == "12000_seg0012-AAAAAAAAAAAAAAA.index"
    assert paths[".index"].read_bytes() == raw.offset
    assert paths[".timeindex"].read_bytes() == raw.time
    assert paths[".txnindex"].read_bytes() == raw.txn
    assert paths[".leader-epoch-checkpoint"].read_bytes() == raw.leader_epoch
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths.values())


async def test_disk_tier_survives_a_restart(tmp_path: Path) -> None:
    keys = [key(1), key(2), key(3)]
    loader = loader_for(*keys)
    await fill(tmp_path, loader, *keys)
    assert loader.total == 3

    restarted = Loader({})  # knows no segment: every answer must come from disk
    async with RemoteIndexCache(restarted, cache_dir=tmp_path) as cache:
        scan = await cache.start()
        assert scan is not None
        assert scan.kept == 3
        assert await cache.lookup_offset(keys[1], 2015) == OffsetPosition(2010, 4096)
        assert await cache.lookup_timestamp(keys[2], T0 + 100) == TimestampOffset(T0 + 100, 3020)
        assert await cache.epoch_for_offset(keys[0], 1050) == 1
        assert len((await cache.aborted_txns(keys[0], 0, 2000)).aborted_transactions) == 1
        stats = cache.stats()
        assert restarted.total == 0
        assert (stats.loads, stats.disk_hits, stats.misses, stats.hits) == (0, 3, 3, 1)
        assert stats.disk is not None
        assert stats.disk.entries == 3
        assert stats.disk.bytes == sum(raw.size for raw in loader.segments.values())


async def test_absent_txn_index_is_an_empty_file_and_an_empty_index(tmp_path: Path) -> None:
    k = key(1)
    loader = Loader({k: segment_bytes(1000, 5, txns=0)})
    await fill(tmp_path, loader, k)
    assert files_of(tmp_path, k)[".txnindex"].read_bytes() == b""
    async with RemoteIndexCache(Loader({}), cache_dir=tmp_path) as cache:
        entry = await cache.get(k)
        assert len(entry.txn_index) == 0
        assert entry.raw.txn is None


async def test_a_cache_with_a_disk_tier_must_be_started(tmp_path: Path) -> None:
    cache = RemoteIndexCache(loader_for(key(1)), cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="start"):
        await cache.get(key(1))
    assert await RemoteIndexCache(loader_for(key(1))).start() is None
    with pytest.raises(ValueError, match="empty"):
        RemoteIndexCache(loader_for(key(1)), cache_dir="")


async def test_invalidate_removes_the_files(tmp_path: Path) -> None:
    k = key(1)
    loader = loader_for(k)
    async with RemoteIndexCache(loader, cache_dir=tmp_path) as cache:
        await cache.get(k)
        await cache.flush()
        assert await cache.invalidate(k) is True
        assert await cache.invalidate(k) is False
        assert not any(p.exists() for p in files_of(tmp_path, k).values())
        await cache.get(k)
        assert loader.calls[k] == 2


async def test_100_concurrent_misses_with_a_disk_tier_make_one_load(tmp_path: Path) -> None:
    k = key(9)
    loader = loader_for(k)
    loader.gate.clear()
    async with RemoteIndexCache(loader, cache_dir=tmp_path) as cache:
        tasks = [asyncio.create_task(cache.lookup_offset(k, 9010)) for _ in range(100)]
        for _ in range(20):
            await asyncio.sleep(0.001)
        loader.gate.set()
        assert set(await asyncio.gather(*tasks)) == {OffsetPosition(9010, 4096)}
        await cache.flush()
        stats = cache.stats()
        assert (loader.calls[k], stats.loads, stats.misses, stats.disk_hits) == (1, 1, 100, 0)
        assert stats.disk is not None
        assert stats.disk.entries == 1


async def test_a_corrupt_download_is_not_written_to_disk(tmp_path: Path) -> None:
    k = key(1)
    good = segment_bytes(1000, 3)
    bad = SegmentIndexBytes(1000, good.offset[:-1], good.time, good.leader_epoch)
    async with RemoteIndexCache(Loader({k: bad}), cache_dir=tmp_path) as cache:
        with pytest.raises(CorruptIndexError):
            await cache.get(k)
        await cache.flush()
    assert list(tmp_path.iterdir()) == []


# --- start: leftovers, incomplete and corrupt sets ------------------------------------------------


async def test_leftovers_are_removed_at_start(tmp_path: Path) -> None:
    k = key(1)
    await fill(tmp_path, loader_for(k), k)
    leftovers = [
        "1000_seg0001-AAAAAAAAAAAAAAA.index.tmp",
        "1000_seg0001-AAAAAAAAAAAAAAA.index.3f2a.tmp",
        "2000_seg0002-AAAAAAAAAAAAAAA.timeindex.deleted",
        "whatever.tmp",
    ]
    for name in leftovers:
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / "notes.txt").write_text("not ours")
    async with RemoteIndexCache(Loader({}), cache_dir=tmp_path) as cache:
        scan = await cache.start()
        assert scan is not None
        assert (scan.leftovers_removed, scan.kept) == (4, 1)
        await cache.get(k)
    assert not any((tmp_path / name).exists() for name in leftovers)
    assert (tmp_path / "notes.txt").exists()


async def test_an_incomplete_set_is_removed_at_start(tmp_path: Path) -> None:
    a, b = key(1), key(2)
    loader = loader_for(a, b)
    await fill(tmp_path, loader, a, b)
    files_of(tmp_path, b)[".timeindex"].unlink()
    async with RemoteIndexCache(loader, cache_dir=tmp_path) as cache:
        scan = await cache.start()
        assert scan is not None
        assert (scan.kept, scan.incomplete_removed) == (1, 1)
        assert not any(p.exists() for p in files_of(tmp_path, b).values())
        await cache.get(b)
        await cache.get(a)
    assert loader.calls == {a: 1, b: 2}


def truncate_index(paths: dict[str, Path]) -> None:
    path = paths[".index"]
    path.write_bytes(path.read_bytes()[:-3])  # no longer a multiple of 8


def offsets_below_base(paths: dict[str, Path]) -> None:
    path = paths[".index"]
    data = bytearray(path.read_bytes())
    data[-8:-4] = struct.pack(">i", -5)  # the last offset is below the base offset
    path.write_bytes(bytes(data))


def timestamps_decrease(paths: dict[str, Path]) -> None:
    path = paths[".timeindex"]
    path.write_bytes(path.read_bytes() + bytes(12))  # a trailing zero entry


def garbage_checkpoint(paths: dict[str, Path]) -> None:
    paths[".leader-epoch-checkpoint"].write_bytes(b"0\n5\n")


def txn_below_start(paths: dict[str, Path]) -> None:
    paths[".txnindex"].write_bytes(struct.pack(">hqqqq", 0, 1, 0, 1, 0))


Corruption = Callable[[dict[str, Path]], None]

CORRUPTIONS: list[Corruption] = [
    truncate_index,
    offsets_below_base,
    timestamps_decrease,
    garbage_checkpoint,
    txn_below_start,
]


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
async def test_a_corrupt_file_found_at_start_is_fetched_again(
    tmp_path: Path, corrupt: Corruption
) -> None:
    a, b = key(1), key(2)
    loader = loader_for(a, b)
    await fill(tmp_path, loader, a, b)
    corrupt(files_of(tmp_path, b))
    async with RemoteIndexCache(loader, cache_dir=tmp_path) as cache:
        scan = await cache.start()
        assert scan is not None
        assert (scan.kept, scan.corrupt_removed) == (1, 1)
        entry = await cache.get(b)
        assert entry.lookup_offset(2025) == OffsetPosition(2020, 8192)
        await cache.get(a)
        await cache.flush()
    assert loader.calls == {a: 1, b: 2}  # b fetched again once, a from disk
    assert files_of(tmp_path, b)[".index"].read_bytes() == loader.segments[b].offset


@pytest.mark.parametrize("corrupt", CORRUPTIONS)
async def test_a_file_corrupted_while_running_is_fetched_again(
    tmp_path: Path, corrupt: Corruption
) -> None:
    a, b = key(1), key(2)
    loader = loader_for(a, b)
    budget = loader.segments[a].size  # memory holds one entry
    async with RemoteIndexCache(loader, cache_dir=tmp_path, max_bytes=budget) as cache:
        await cache.get(a)
        await cache.get(b)  # evicts a from memory; a stays on disk
        await cache.flush()
        assert a not in cache
        corrupt(files_of(tmp_path, a))
        entry = await cache.get(a)
        assert entry.lookup_offset(1010) == OffsetPosition(1010, 4096)
        stats = cache.stats()
        assert stats.disk is not None
        assert stats.disk.corrupt_removed == 1
        assert (stats.disk_hits, stats.loads) == (0, 3)
    assert loader.calls[a] == 2


# --- the disk byte bound ------------------------------------------------------------------------


async def test_disk_usage_is_bounded_and_evicts_least_recently_used(tmp_path: Path) -> None:
    keys = [key(n) for n in range(1, 5)]
    loader = loader_for(*keys)
    size = loader.segments[keys[0]].size
    options = {"max_bytes": size, "disk_max_bytes": 3 * size}
    async with RemoteIndexCache(loader, cache_dir=tmp_path, **options) as cache:
        for k in keys[:3]:
            await cache.get(k)
            await cache.flush()
        await cache.get(keys[0])  # from disk: now the most recently used on disk
        await cache.get(keys[3])
        await cache.flush()
        stats = cache.stats()
        assert stats.disk is not None
        assert (stats.disk.entries, stats.disk.bytes, stats.disk.evictions) == (3, 3 * size, 1)
    assert not files_of(tmp_path, keys[1])[".index"].exists()
    remaining = {p.name for p in tmp_path.iterdir()}
    assert len(remaining) == 12


async def test_a_set_larger_than_the_disk_bound_is_not_written(tmp_path: Path) -> None:
    k = key(1)
    loader = loader_for(k)
    async with RemoteIndexCache(
        loader, cache_dir=tmp_path, disk_max_bytes=loader.segments[k].size - 1
    ) as cache:
        await cache.get(k)
        await cache.flush()
    assert list(tmp_path.iterdir()) == []


def test_restart_keeps_the_most_recently_used_sets_within_a_smaller_bound(tmp_path: Path) -> None:
    keys = [key(n) for n in range(1, 5)]
    raws = {k: segment_bytes(k.start_offset, 10) for k in keys}
    size = raws[keys[0]].size
    tier = DiskTier(tmp_path, 10 * size)
    tier.open()
    for n, k in enumerate(keys):
        assert tier.write(k, raws[k])
        os.utime(files_of(tmp_path, k)[".index"], (1000 + n, 1000 + n))
    os.utime(files_of(tmp_path, keys[0])[".index"], (2000, 2000))  # used last
    smaller = DiskTier(tmp_path, 2 * size)
    scan = smaller.open()
    assert (scan.kept, scan.over_limit_removed) == (2, 2)
    assert smaller.keys() == [keys[3], keys[0]]
    assert smaller.stats().bytes == 2 * size


def test_disk_tier_read_of_an_unknown_key_and_a_vanished_file(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, 1 << 20)
    tier.open()
    k = key(1)
    assert tier.read(k) is None
    assert tier.write(k, segment_bytes(1000, 3))
    assert isinstance(tier.read(k), SegmentIndexes)
    files_of(tmp_path, k)[".timeindex"].unlink()
    assert tier.read(k) is None
    assert k not in tier
    assert not tier.remove(k)
    with pytest.raises(ValueError):
        DiskTier(tmp_path, -1)


async def test_a_failing_disk_write_does_not_fail_the_read(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    k = key(1)
    loader = loader_for(k)
    async with RemoteIndexCache(loader, cache_dir=directory) as cache:
        directory.rmdir()
        directory.write_bytes(b"")  # now a file: every write fails
        entry = await cache.get(k)
        await cache.flush()
        assert entry.lookup_offset(1010) == OffsetPosition(1010, 4096)
        stats = cache.stats()
        assert stats.disk is not None
        assert (stats.disk.write_failures, stats.disk.entries) == (1, 0)
        assert k in cache  # served and cached in memory all the same


def test_raw_round_trip_through_the_tier(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, 1 << 20, fsync=True)
    tier.open()
    k = SegmentKey("Zm9vYmFyYmF6cXV4cXV1eA", 0)
    raw = segment_bytes(0, 7, txns=3)
    assert tier.write(k, raw)
    assert tier.write(k, raw)  # rewriting replaces, and counts once
    assert tier.stats().bytes == raw.size
    entry = tier.read(k)
    assert entry is not None
    assert entry.raw == SegmentIndexBytes(0, raw.offset, raw.time, raw.leader_epoch, raw.txn)
