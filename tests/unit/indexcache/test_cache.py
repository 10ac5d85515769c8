"""RemoteIndexCache in memory: byte accounting, LRU order, single flight, failures, readers."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway.errors import CorruptCheckpointError, CorruptIndexError
from gateway.kafka.offset_index import OffsetPosition
from gateway.kafka.time_index import NO_TIMESTAMP, TimestampOffset
from gateway.kafka.txn_index import AbortedTxn
from indexcache import RemoteIndexCache, SegmentIndexBytes, SegmentIndexes, SegmentKey
from tests.unit.indexcache.cache_support import T0, Loader, key, loader_for, segment_bytes


async def settle() -> None:
    """Let every ready task run until it blocks."""
    for _ in range(5):
        await asyncio.sleep(0)


# --- keys and entries -------------------------------------------------------------------------


def test_segment_key_validation_and_file_stem() -> None:
    k = SegmentKey("q3aF1Z_-x9", 42)
    assert k.file_stem == "42_q3aF1Z_-x9"
    assert SegmentKey.from_file_stem("42_q3aF1Z_-x9") == k
    for bad in ("", "a/b", "a.b", "x" * 65, "../etc"):
        with pytest.raises(ValueError):
            SegmentKey(bad, 0)
    with pytest.raises(ValueError):
        SegmentKey("abc", -1)
    for stem in ("abc", "_abc", "-1_abc", "1_", "1_a.b", "x_abc", "\u0661_abc"):
        assert SegmentKey.from_file_stem(stem) is None


def test_entry_weight_is_the_bytes_held() -> None:
    raw = segment_bytes(100, 10, txns=2)
    entry = SegmentIndexes(raw)
    expected = len(raw.offset) + len(raw.time) + len(raw.leader_epoch) + 2 * 34
    assert raw.size == entry.weight == expected == 10 * 8 + 10 * 12 + 68 + len(raw.leader_epoch)
    no_txn = segment_bytes(100, 10, txns=0)
    assert no_txn.txn is None
    assert SegmentIndexes(no_txn).weight == expected - 68
    assert len(SegmentIndexes(no_txn).txn_index) == 0


def test_non_bytes_buffers_are_copied() -> None:
    raw = segment_bytes(0, 4)
    big = bytearray(raw.offset + bytes(1000))
    copied = SegmentIndexBytes(0, memoryview(big)[: len(raw.offset)], raw.time, raw.leader_epoch)
    assert type(copied.offset) is bytes
    assert copied.offset == raw.offset
    big[:8] = bytes(8)  # the caller's buffer changes; the entry's does not
    assert copied.offset == raw.offset


def test_entry_lookups() -> None:
    entry = SegmentIndexes(segment_bytes(100, 5, txns=3, epochs=3))
    assert entry.base_offset == 100
    assert entry.lookup_offset(99) == OffsetPosition(100, 0)
    assert entry.lookup_offset(125) == OffsetPosition(120, 8192)
    assert entry.lookup_timestamp(T0 - 1) == TimestampOffset(NO_TIMESTAMP, 100)
    assert entry.lookup_timestamp(T0 + 250) == TimestampOffset(T0 + 200, 130)
    assert entry.upper_bound_at(4097) == OffsetPosition(120, 8192)
    assert entry.upper_bound_at(5 * 4096 + 1) is None
    result = entry.aborted_txns(104, 109)
    assert result.aborted_transactions == [AbortedTxn(1001, 105, 108, 105)]
    assert result.is_complete  # the next entry's last stable offset 110 is past 109
    result = entry.aborted_txns(104, 200)
    assert [t.producer_id for t in result.aborted_transactions] == [1001, 1002]
    assert not result.is_complete
    assert entry.epoch_for_offset(99) is None
    assert entry.epoch_for_offset(149) == 0
    assert entry.epoch_for_offset(150) == 1
    assert [e.epoch for e in entry.leader_epoch_entries] == [0, 1, 2]


# --- byte accounting and LRU order --------------------------------------------------------------


async def test_eviction_is_lru_by_use_with_exact_byte_accounting() -> None:
    keys = [key(n) for n in range(1, 6)]  # same digit count: same checkpoint length
    loader = loader_for(*keys)
    weight = SegmentIndexes(loader.segments[keys[0]]).weight
    assert all(SegmentIndexes(raw).weight == weight for raw in loader.segments.values())
    cache = RemoteIndexCache(loader, max_bytes=3 * weight + weight // 2)  # room for three
    for k in keys[:3]:
        await cache.get(k)
    stats = cache.stats()
    assert (stats.entries, stats.bytes_held, stats.evictions) == (3, 3 * weight, 0)

    await cache.get(keys[0])  # a hit refreshes recency: keys[1] is now the oldest
    await cache.get(keys[3])
    assert keys[1] not in cache
    assert set(cache.keys()) == {keys[0], keys[2], keys[3]}
    await cache.get(keys[4])  # then keys[2]
    assert set(cache.keys()) == {keys[0], keys[3], keys[4]}

    stats = cache.stats()
    assert (stats.entries, stats.bytes_held, stats.evictions) == (3, 3 * weight, 2)
    assert (stats.hits, stats.misses, stats.loads, stats.load_failures) == (1, 5, 5, 0)
    assert stats.max_bytes == cache.max_bytes == 3 * weight + weight // 2
    assert stats.disk is None

    await cache.get(keys[1])  # evicted entries load again
    assert loader.calls[keys[1]] == 2


async def test_bytes_held_with_entries_of_different_sizes() -> None:
    sizes = {key(n): segment_bytes(n * 1000, 10 * (n + 1)) for n in range(4)}
    loader = Loader(sizes)
    weights = {k: raw.size for k, raw in sizes.items()}
    cache = RemoteIndexCache(loader, max_bytes=weights[key(3)] + weights[key(2)])
    for k in sizes:
        await cache.get(k)
    # The last two fill the budget exactly; the older ones were evicted in order.
    assert set(cache.keys()) == {key(2), key(3)}
    assert cache.stats().bytes_held == weights[key(2)] + weights[key(3)]
    assert cache.stats().evictions == 2


async def test_entry_larger_than_the_budget_is_served_uncached() -> None:
    k = key(1)
    loader = loader_for(k)
    cache = RemoteIndexCache(loader, max_bytes=loader.segments[k].size - 1)
    first = await cache.get(k)
    assert first.lookup_offset(1015) == OffsetPosition(1010, 4096)
    assert k not in cache
    await cache.get(k)
    stats = cache.stats()
    assert (stats.oversized, stats.loads, stats.entries, stats.bytes_held) == (2, 2, 0, 0)


async def test_reader_holding_an_evicted_entry_keeps_correct_answers() -> None:
    a, b = key(1), key(2)
    loader = loader_for(a, b)
    cache = RemoteIndexCache(loader, max_bytes=loader.segments[a].size)
    held = await cache.get(a)
    before = [held.lookup_offset(o) for o in range(990, 1300, 7)]
    await cache.get(b)
    assert a not in cache
    assert cache.stats().evictions == 1
    assert [held.lookup_offset(o) for o in range(990, 1300, 7)] == before
    assert held.lookup_timestamp(T0 + 1000) == TimestampOffset(T0 + 1000, 1110)
    assert held.epoch_for_offset(1060) == 1


async def test_invalidate_drops_the_entry() -> None:
    k = key(1)
    loader = loader_for(k)
    cache = RemoteIndexCache(loader)
    held = await cache.get(k)
    assert await cache.invalidate(k) is True
    assert await cache.invalidate(k) is False
    assert k not in cache
    assert cache.stats().bytes_held == 0
    assert held.lookup_offset(1010).position == 4096
    await cache.get(k)
    assert loader.calls[k] == 2


# --- single flight --------------------------------------------------------------------------


async def test_100_concurrent_misses_make_one_load() -> None:
    k = key(7)
    loader = loader_for(k)
    loader.gate.clear()
    cache = RemoteIndexCache(loader)
    waiters = [asyncio.create_task(cache.lookup_offset(k, 7000 + i)) for i in range(100)]
    await settle()
    assert loader.total == 1
    loader.gate.set()
    results = await asyncio.gather(*waiters)
    assert loader.calls[k] == 1
    assert results[0] == OffsetPosition(7000, 0)
    assert results[15] == OffsetPosition(7010, 4096)
    stats = cache.stats()
    assert (stats.misses, stats.loads, stats.hits, stats.entries) == (100, 1, 0, 1)
    assert await cache.lookup_offset(k, 7020) == OffsetPosition(7020, 8192)
    assert cache.stats().hits == 1


async def test_concurrent_misses_share_one_entry_object() -> None:
    k = key(3)
    loader = loader_for(k)
    loader.gate.clear()
    cache = RemoteIndexCache(loader)
    tasks = [asyncio.create_task(cache.get(k)) for _ in range(10)]
    await asyncio.sleep(0)
    loader.gate.set()
    entries = await asyncio.gather(*tasks)
    assert all(e is entries[0] for e in entries)
    assert loader.total == 1


async def test_misses_on_different_keys_load_concurrently() -> None:
    keys = [key(n) for n in range(5)]
    loader = loader_for(*keys)
    loader.gate.clear()
    cache = RemoteIndexCache(loader)
    tasks = [asyncio.create_task(cache.get(k)) for k in keys for _ in range(3)]
    await settle()
    assert loader.total == 5  # all five started before any finished
    loader.gate.set()
    await asyncio.gather(*tasks)
    assert all(loader.calls[k] == 1 for k in keys)


async def test_failing_loader_reaches_every_waiter_and_is_not_cached() -> None:
    k = key(2)
    loader = loader_for(k)
    loader.gate.clear()
    loader.fail = ConnectionError("bucket unreachable")
    cache = RemoteIndexCache(loader)
    tasks = [asyncio.create_task(cache.get(k)) for _ in range(20)]
    await asyncio.sleep(0)
    loader.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    assert loader.calls[k] == 1
    assert k not in cache
    stats = cache.stats()
    assert (stats.loads, stats.load_failures, stats.entries, stats.bytes_held) == (1, 1, 0, 0)

    loader.fail = None  # the next caller retries, and succeeds
    entry = await cache.get(k)
    assert entry.lookup_offset(2010) == OffsetPosition(2010, 4096)
    assert loader.calls[k] == 2
    assert cache.stats().load_failures == 1
    assert k in cache


async def test_retry_right_after_a_failure_loads_again() -> None:
    k = key(2)
    loader = loader_for(k)
    loader.fail = TimeoutError()
    cache = RemoteIndexCache(loader)
    for attempt in range(1, 4):
        with pytest.raises(TimeoutError):
            await cache.get(k)
        assert loader.calls[k] == attempt


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("offset", b"\x00" * 7, CorruptIndexError),  # not a multiple of 8
        ("offset", bytes.fromhex("0000000a 00001000 fffffff0 00002000"), CorruptIndexError),
        ("time", bytes(12) * 2 + b"\x00", CorruptIndexError),
        ("leader_epoch", b"0\n2\n0 0\n", CorruptCheckpointError),
    ],
)
async def test_corrupt_loaded_bytes_fail_the_read_and_are_not_cached(
    field: str, value: bytes, error: type[Exception]
) -> None:
    k = key(4)
    good = segment_bytes(k.start_offset, 5)
    parts = {
        "base_offset": good.base_offset,
        "offset": good.offset,
        "time": good.time,
        "leader_epoch": good.leader_epoch,
        "txn": good.txn,
        field: value,
    }
    loader = Loader({k: SegmentIndexBytes(**parts)})  # type: ignore[arg-type]
    cache = RemoteIndexCache(loader)
    for _ in range(2):
        with pytest.raises(error):
            await cache.get(k)
    assert loader.calls[k] == 2
    assert cache.stats().load_failures == 2
    assert cache.stats().entries == 0


async def test_loader_answering_another_base_offset_fails() -> None:
    k = key(1)
    loader = Loader({k: segment_bytes(0, 3)})
    cache = RemoteIndexCache(loader)
    with pytest.raises(ValueError, match="base offset 0"):
        await cache.get(k)
    assert k not in cache


async def test_a_cancelled_waiter_does_not_cancel_the_load_for_others() -> None:
    k = key(5)
    loader = loader_for(k)
    loader.gate.clear()
    cache = RemoteIndexCache(loader)
    first = asyncio.create_task(cache.get(k))
    second = asyncio.create_task(cache.get(k))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    loader.gate.set()
    entry = await second
    assert first.cancelled()
    assert entry.base_offset == 5000
    assert loader.calls[k] == 1
    assert k in cache


async def test_load_completes_even_when_every_waiter_is_cancelled() -> None:
    k = key(5)
    loader = loader_for(k)
    loader.gate.clear()
    cache = RemoteIndexCache(loader)
    waiter = asyncio.create_task(cache.get(k))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.sleep(0)
    loader.gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert k in cache
    await cache.get(k)
    assert loader.calls[k] == 1


async def test_large_entries_are_built_in_the_executor() -> None:
    k = key(6)
    raw = segment_bytes(k.start_offset, 50, txns=200)
    loader = Loader({k: raw})
    with ThreadPoolExecutor(1, thread_name_prefix="parse") as pool:
        cache = RemoteIndexCache(loader, executor=pool, parse_offload_bytes=1024)
        entry = await cache.get(k)
    assert len(entry.txn_index) == 200
    assert entry.aborted_txns(6000, 6004).aborted_transactions == [
        AbortedTxn(1000, 6000, 6003, 6000)
    ]


async def test_aclose_cancels_loads_and_refuses_new_misses() -> None:
    k, other = key(1), key(2)
    loader = loader_for(k, other)
    cache = RemoteIndexCache(loader)
    await cache.get(other)
    loader.gate.clear()
    waiter = asyncio.create_task(cache.get(k))
    await asyncio.sleep(0)
    await cache.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert cache.stats().load_failures == 0
    assert (await cache.get(other)).base_offset == 2000  # hits still answer
    with pytest.raises(RuntimeError, match="closed"):
        await cache.get(k)


async def test_cache_lookup_helpers() -> None:
    k = key(3)
    async with RemoteIndexCache(Loader({k: segment_bytes(3000, 8, txns=2, epochs=3)})) as cache:
        assert await cache.lookup_offset(k, 3035) == OffsetPosition(3030, 3 * 4096)
        assert await cache.lookup_timestamp(k, T0 + 150) == TimestampOffset(T0 + 100, 3020)
        assert await cache.upper_bound_at(k, 3 * 4096) == OffsetPosition(3030, 3 * 4096)
        result = await cache.aborted_txns(k, 3000, 3100)
        assert len(result.aborted_transactions) == 2
        assert result.is_complete is False
        assert await cache.epoch_for_offset(k, 3100) == 2
        assert cache.stats().loads == 1
        assert cache.stats().hits == 4
