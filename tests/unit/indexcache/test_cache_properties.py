"""RemoteIndexCache properties: lookups through the cache equal a brute-force scan of the entries,
and the byte accounting equals the sum of the weights of the entries it holds."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.kafka.epoch import format_leader_epoch_checkpoint
from gateway.kafka.offset_index import OffsetPosition, encode_offset_index
from gateway.kafka.time_index import NO_TIMESTAMP, TimestampOffset, encode_time_index
from gateway.kafka.txn_index import AbortedTxn, TxnIndexSearchResult, encode_txn_index
from indexcache import RemoteIndexCache, SegmentIndexBytes, SegmentKey
from tests.unit.indexcache.cache_support import Loader

SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def segments(draw: st.DrawFn) -> tuple[SegmentIndexBytes, dict[str, list[tuple[int, ...]]]]:
    """Index bytes of a segment and the entries they encode."""
    base = draw(st.integers(0, 1 << 40))
    n = draw(st.integers(0, 60))
    rel = sorted(draw(st.sets(st.integers(0, 5000), min_size=n, max_size=n)))
    offsets = [base + r for r in rel]
    steps = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    positions = [sum(steps[: i + 1]) for i in range(n)]
    ts_steps = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    timestamps = [1_700_000_000_000 + sum(ts_steps[: i + 1]) for i in range(n)]
    txns = [
        AbortedTxn(pid, base + first, base + first + length, base + lso)
        for pid, first, length, lso in draw(
            st.lists(
                st.tuples(
                    st.integers(0, 99),
                    st.integers(0, 5000),
                    st.integers(0, 100),
                    st.integers(0, 5100),
                ),
                max_size=10,
            )
        )
    ]
    epoch_count = draw(st.integers(0, 5))
    epoch_starts = sorted(
        draw(st.sets(st.integers(0, 5000), min_size=epoch_count, max_size=epoch_count))
    )
    epochs = [(e * 2 + 1, base + s) for e, s in enumerate(epoch_starts)]
    raw = SegmentIndexBytes(
        base_offset=base,
        offset=encode_offset_index(zip(offsets, positions, strict=True), base),
        time=encode_time_index(zip(timestamps, offsets, strict=True), base),
        leader_epoch=format_leader_epoch_checkpoint(epochs),
        txn=encode_txn_index(txns) if txns or draw(st.booleans()) else None,
    )
    entries = {
        "offset": list(zip(offsets, positions, strict=True)),
        "time": list(zip(timestamps, offsets, strict=True)),
        "txn": [tuple(t) for t in txns],
        "epoch": epochs,
    }
    return raw, entries


def scan_offset(entries: list[tuple[int, ...]], base: int, target: int) -> OffsetPosition:
    below = [e for e in entries if e[0] <= target]
    return OffsetPosition(*below[-1]) if below else OffsetPosition(base, 0)


def scan_timestamp(entries: list[tuple[int, ...]], base: int, target: int) -> TimestampOffset:
    below = [e for e in entries if e[0] <= target]
    return TimestampOffset(*below[-1]) if below else TimestampOffset(NO_TIMESTAMP, base)


def scan_upper_bound(entries: list[tuple[int, ...]], position: int) -> OffsetPosition | None:
    return next((OffsetPosition(*e) for e in entries if e[1] >= position), None)


def scan_txns(entries: list[tuple[int, ...]], fetch: int, upper: int) -> TxnIndexSearchResult:
    found = []
    for txn in map(AbortedTxn._make, entries):
        if txn.last_offset >= fetch and txn.first_offset < upper:
            found.append(txn)
        if txn.last_stable_offset >= upper:
            return TxnIndexSearchResult(found, True)
    return TxnIndexSearchResult(found, False)


def scan_epoch(entries: list[tuple[int, ...]], offset: int) -> int | None:
    below = [epoch for epoch, start in entries if start <= offset]
    return below[-1] if below else None


@SETTINGS
@given(segment=segments(), probes=st.lists(st.integers(-10, 5200), min_size=1, max_size=20))
def test_lookups_through_the_cache_equal_a_brute_force_scan(
    segment: tuple[SegmentIndexBytes, dict[str, list[tuple[int, ...]]]], probes: list[int]
) -> None:
    raw, entries = segment
    base = raw.base_offset
    k = SegmentKey("prop", base)

    async def run() -> None:
        loader = Loader({k: raw})
        async with RemoteIndexCache(loader) as cache:
            for p in probes:
                off, ts, pos = base + p, 1_700_000_000_000 + p, p * 10
                assert await cache.lookup_offset(k, off) == scan_offset(
                    entries["offset"], base, off
                )
                assert await cache.lookup_timestamp(k, ts) == scan_timestamp(
                    entries["time"], base, ts
                )
                assert await cache.upper_bound_at(k, pos) == scan_upper_bound(
                    entries["offset"], pos
                )
                upper = off + abs(p) % 300
                assert await cache.aborted_txns(k, off, upper) == scan_txns(
                    entries["txn"], off, upper
                )
                assert await cache.epoch_for_offset(k, off) == scan_epoch(entries["epoch"], off)
            assert loader.calls[k] == 1

    asyncio.run(run())


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    accesses=st.lists(st.integers(0, 11), max_size=40),
    budget=st.integers(0, 2000),
)
def test_bytes_held_is_the_sum_of_the_weights_and_order_is_lru(
    sizes: list[int], accesses: list[int], budget: int
) -> None:
    keys = [SegmentKey(f"s{n}", n * 100) for n in range(len(sizes))]
    raws = {}
    for k, size in zip(keys, sizes, strict=True):
        offsets = [k.start_offset + i for i in range(size)]
        raws[k] = SegmentIndexBytes(
            k.start_offset,
            encode_offset_index(((o, i) for i, o in enumerate(offsets)), k.start_offset),
            b"",
            format_leader_epoch_checkpoint([]),
        )

    async def run() -> None:
        cache = RemoteIndexCache(Loader(raws), max_bytes=budget)
        model: list[SegmentKey] = []  # least recently used first
        for n in accesses:
            k = keys[n % len(keys)]
            await cache.get(k)
            if k in model:
                model.remove(k)
            if raws[k].size <= budget:
                model.append(k)
                while sum(raws[m].size for m in model) > budget:
                    model.pop(0)
            assert set(cache.keys()) == set(model)
            assert cache.stats().bytes_held == sum(raws[m].size for m in model)

    asyncio.run(run())
