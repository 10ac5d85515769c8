"""The console's framework-free parts: times in explicit zones, the histogram and the scan
plan from segment metadata, Kafka's key partitioner, the filter, paging and the scan, each
against a brute force over known records (``gateway.api.console.view``, ``.search``,
``.window``)."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from gateway.api.console.search import Filter, scan
from gateway.api.console.view import histogram, key_partition, parse_time, plan, zone
from gateway.api.console.window import before, forward
from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.service.types import SegmentInfo


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=40), st.integers(1, 64))
def test_the_key_partition_is_the_one_kafka_python_computes(key: bytes, partitions: int) -> None:
    assert key_partition(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def test_known_partitions_of_kafkas_default_partitioner() -> None:
    # Kafka's own test vectors (Utils.murmur2 of these strings, toPositive, % 1000 here)
    assert key_partition(b"21", 1000) == (-973932308 & 0x7FFFFFFF) % 1000
    assert key_partition(b"foobar", 1000) == (-790332482 & 0x7FFFFFFF) % 1000


@pytest.mark.parametrize("name", ["UTC", "Europe/Paris", "America/Los_Angeles", "Asia/Kolkata"])
def test_a_time_is_read_in_its_zone(name: str) -> None:
    tz = ZoneInfo(name)
    for when in ("2026-03-29T01:30:00", "2026-07-01T12:00:00.250", "2026-11-01T01:30:00"):
        want = dt.datetime.fromisoformat(when).replace(tzinfo=tz)
        assert parse_time(when, zone(name)) == round(want.timestamp() * 1000)
    assert parse_time("2026-07-01T12:00:00+02:00", zone(name)) == 1782900000000
    assert parse_time("1700000000123", zone(name)) == 1700000000123


@pytest.mark.parametrize("bad", ["Mars/Olympus", "../etc/passwd", "a" * 80, "Europe/../UTC"])
def test_an_unknown_zone_is_a_400_naming_tz(bad: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        zone(bad)
    assert caught.value.parameter == "tz"


def _segment(start: int, end: int, ts: int, size: int, displaced: bool = False) -> SegmentInfo:
    return SegmentInfo("id", start, end, "COPY_SEGMENT_FINISHED", size, ts, ts, (), True, displaced)


def test_the_histogram_counts_every_offset_once_from_metadata() -> None:
    rng = random.Random(7)
    segments, at = [], 0
    for i in range(40):
        length = rng.randrange(1, 500)
        segments.append(_segment(at, at + length - 1, 1_000_000 + i * rng.randrange(1, 90_000), 10))
        at += length
    segments.append(_segment(0, 99, 5, 10, displaced=True))
    bars = histogram(segments, bins=12)
    assert len(bars) == 12
    assert sum(b.offsets for b in bars) == at
    assert sum(b.segments for b in bars) == 40
    for b in bars:
        inside = [s for s in segments[:-1] if b.start_ms <= s.max_timestamp_ms < b.end_ms]
        assert b.offsets == sum(s.end_offset - s.start_offset + 1 for s in inside)
        assert b.first_offset == (min(s.start_offset for s in inside) if inside else -1)


def test_the_plan_counts_the_segments_a_range_reaches() -> None:
    segments = [_segment(0, 9, 1, 100), _segment(10, 19, 2, 200), _segment(20, 29, 3, 400)]
    segments.append(_segment(10, 19, 2, 999, displaced=True))
    assert plan(segments, 0, 30).segments == 3 and plan(segments, 0, 30).bytes == 700
    assert (plan(segments, 12, 20).segments, plan(segments, 12, 20).bytes) == (1, 200)
    assert (plan(segments, 9, 11).segments, plan(segments, 9, 11).bytes) == (2, 300)
    assert plan(segments, 30, 40).segments == 0


# --- paging and scanning over a fake records route -----------------------------------------


def _log(seed: int, n: int = 400) -> list[dict[str, Any]]:
    """Data records with gaps where control batches, aborted records or compaction were."""
    rng = random.Random(seed)
    out, offset = [], 3
    for i in range(n):
        offset += 1 + (rng.randrange(1, 4) if rng.random() < 0.2 else 0)
        value = {"n": i, "kind": rng.choice(["a", "b", "c"]), "deep": {"x": [rng.randrange(3)]}}
        out.append(
            {
                "offset": offset,
                "key": f"k{rng.randrange(20)}" if rng.random() < 0.9 else None,
                "value": value,
                "headers": [{"key": "h", "value": rng.choice(["one", "two"])}],
            }
        )
    return out


class Route:
    """The records route's JSON over ``records``: whole batches of 3 offsets from the first
    batch holding ``offset``, within ``max_bytes`` (40 bytes an offset)."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.start = 0
        self.end = records[-1]["offset"] + 3  # a control batch at the end
        self.reads = 0

    async def __call__(self, offset: int, max_bytes: int = 200) -> dict[str, Any]:
        self.reads += 1
        first = offset - offset % 3
        stop = min(self.end, first + max(3, max_bytes // 40 // 3 * 3))
        return {
            "records": [r for r in self.records if offset <= r["offset"] < stop],
            "next_offset": stop,
            "log_start_offset": self.start,
            "log_end_offset": self.end,
            "last_stable_offset": None,
            "end_of_remote_log": stop >= self.end,
        }

    async def with_bytes(self, offset: int, max_bytes: int) -> tuple[dict[str, Any], int]:
        doc = await self(offset, max_bytes)
        first = offset - offset % 3
        return doc, (doc["next_offset"] - first) * 40


@pytest.mark.parametrize("count", [1, 7, 50])
async def test_paging_forward_then_back_covers_every_record_once(count: int) -> None:
    records = _log(count)
    route = Route(records)
    offsets = [r["offset"] for r in records]
    pages, at = [], 0
    while True:
        window = await forward(route, at, count)
        pages.append([r["offset"] for r in window.records])
        if window.at_end:
            break
        at = window.next_offset
    assert [o for p in pages for o in p] == offsets
    # back from the end: each previous page is exactly the records before the current one
    first = await before(route, route.end, count, 0)
    back = [[r["offset"] for r in (await forward(route, first, count)).records]]
    while back[-1][0] > offsets[0]:
        start = await before(route, back[-1][0], count, 0)
        page = [r["offset"] for r in (await forward(route, start, count)).records]
        assert page == [o for o in offsets if start <= o < back[-1][0]] or start == 0
        back.append(page)
    assert sorted({o for p in back for o in p}) == offsets


FILTERS = [
    Filter(key="k1"),
    Filter(key_equals="k1"),
    Filter(value='"kind":"b"'),
    Filter(header="h", header_value="tw"),
    Filter(json_path="kind", json_value="c"),
    Filter(json_path="deep.x.0", json_value="2"),
    Filter(json_path="n", json_value='"5"'),  # a string is not the number 5
]


def _brute(flt: Filter, records: list[dict[str, Any]]) -> list[int]:
    out = []
    for r in records:
        key, value = r["key"], orjson.dumps(r["value"]).decode()
        ok = (not flt.key or (key is not None and flt.key in key)) and (
            flt.key_equals is None or key == flt.key_equals
        )
        ok = ok and (not flt.value or flt.value in value)
        ok = ok and (not flt.header or any(
            h["key"] == flt.header and flt.header_value in h["value"] for h in r["headers"]
        ))  # fmt: skip
        if flt.json_path:
            node: Any = r["value"]
            for part in flt.json_path.split("."):
                node = node[int(part)] if isinstance(node, list) else node.get(part)
            want = (
                orjson.loads(flt.json_value)
                if flt.json_value[:1] in '"0123456789'
                else flt.json_value
            )
            ok = ok and node == want and type(node) is type(want)
        if ok:
            out.append(r["offset"])
    return out


@pytest.mark.parametrize("flt", FILTERS, ids=repr)
@pytest.mark.parametrize("budget", [10**9, 700])
async def test_a_scan_finds_what_brute_force_finds_across_its_budget_stops(
    flt: Filter, budget: int
) -> None:
    records = _log(11)
    route = Route(records)
    found, at, stops = [], 0, 0
    while True:
        last = None
        async for p in scan(
            route.with_bytes, flt, start=at, until=route.end, budget=budget,
            page_bytes=400, max_matches=25,
        ):  # fmt: skip
            found += [r["offset"] for r in p.matches]
            last = p.stopped, p.next_offset
        assert last is not None
        if last[0] in ("end", "until"):
            break
        stops += 1
        at = last[1]
    assert found == _brute(flt, records)
    assert len(found) == len(set(found))
    if budget == 700:
        assert stops > 3


async def test_a_scan_stops_at_until() -> None:
    records = _log(3)
    route = Route(records)
    until = records[100]["offset"]
    found = []
    async for p in scan(
        route.with_bytes, Filter(key="k"), start=0, until=until, budget=10**9,
        page_bytes=400, max_matches=10**6,
    ):  # fmt: skip
        found += [r["offset"] for r in p.matches]
        last = p.stopped
    assert last == "until"
    assert found == [r["offset"] for r in records[:100] if r["key"] is not None]


def test_the_console_is_on_at_loopback_or_with_authentication() -> None:
    base = Settings.model_construct(store="file:///", host="127.0.0.1", console=None)
    assert base.console_on
    wide = base.model_copy(update={"host": "0.0.0.0"})
    assert not wide.console_on
    assert wide.model_copy(update={"api_keys_file": "keys"}).console_on
    assert wide.model_copy(update={"console": True}).console_on
    assert not base.model_copy(update={"console": False}).console_on
