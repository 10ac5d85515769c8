"""End to end over real HTTP: ``tiered-gateway serve`` (a real process: uvicorn and the real
service) on the demo bucket, read with an HTTP client only.

Expected records come from kafka-python's reading of the broker segment files the demo wrote
before tiering them (:func:`tests.unit.service.test_service_demo.expected_records`), so nothing
here trusts the gateway's own decoder.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka.record import MemoryRecords
from prometheus_client.parser import text_string_to_metric_families

from gateway.demo import DemoBucket
from tests.integration.serve import serve_process, walk
from tests.unit.service.test_service_demo import Expected, expected_records

RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"
PAGING_DOC = Path(__file__).resolve().parents[2] / "docs" / "paging.md"


@pytest.fixture(scope="module")
def base_url(demo: DemoBucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("http-e2e-log") / "serve.log"
    with serve_process([*demo.serve_args, "--rescan-interval-s", "0"], log_path) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as c:
        yield c


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _as_json(e: Expected) -> tuple[Any, ...]:
    headers = [{"key": k, "value": _b64(v)} for k, v in e.headers]
    return (e.offset, e.timestamp, _b64(e.key), _b64(e.value), headers, e.epoch)


def _got(record: dict[str, Any]) -> tuple[Any, ...]:
    return (
        record["offset"],
        record["timestamp"],
        record["key"],
        record["value"],
        record["headers"],
        record["leader_epoch"],
    )


def test_ready_and_topics(client: httpx.Client, demo: DemoBucket) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    topics = client.get("/v1/topics").json()["topics"]
    assert sorted(t["name"] for t in topics) == sorted(t.name for t in demo.topics)
    orders = next(t for t in topics if t["name"] == "orders")
    assert orders["topic_ids"] == [demo.topic("orders").topic_id_text]


@pytest.mark.parametrize("max_bytes", [1, 3000, 1 << 20])
def test_walk_orders_by_next_offset_returns_every_record_once(
    client: httpx.Client, demo: DemoBucket, max_bytes: int
) -> None:
    expected = expected_records(demo.root / "segments" / "orders-0")
    records, pages = walk(client, "orders", 0, max_bytes, "read_uncommitted")
    offsets = [r["offset"] for r in records]
    assert offsets == list(range(len(offsets)))  # contiguous, each exactly once
    assert offsets[-1] == demo.topic("orders").partition(0).last_offset
    assert [_got(r) for r in records] == [_as_json(e) for e in expected]
    assert {r["timestamp_type"] for r in records} == {"CreateTime", "LogAppendTime"}
    if max_bytes == 1:
        assert pages > 10


def test_ndjson_streams_the_whole_partition(client: httpx.Client, demo: DemoBucket) -> None:
    expected = expected_records(demo.root / "segments" / "orders-1")
    lines = []
    with client.stream(
        "GET",
        RECORDS.format(topic="orders", partition=1),
        params={"offset": 0},
        headers={"Accept": "application/x-ndjson"},
    ) as r:
        assert r.status_code == 200
        lines = [json.loads(line) for line in r.read().split(b"\n") if line]
    *records, last = lines
    assert [_got(r) for r in records] == [_as_json(e) for e in expected]
    assert last == {
        "next_offset": demo.topic("orders").partition(1).next_offset,
        "log_start_offset": 0,
        "log_end_offset": demo.topic("orders").partition(1).next_offset,
        "last_stable_offset": None,  # read_uncommitted: not computed
        "end_of_remote_log": True,
    }


def test_read_committed_on_payments(client: httpx.Client, demo: DemoBucket) -> None:
    expected = expected_records(demo.root / "segments" / "payments-0")
    assert any(e.aborted for e in expected)
    committed, _ = walk(client, "payments", 0, 4000, "read_committed")
    assert [_got(r) for r in committed] == [_as_json(e) for e in expected if not e.aborted]
    everything, _ = walk(client, "payments", 0, 4000, "read_uncommitted")
    assert [_got(r) for r in everything] == [_as_json(e) for e in expected]


def test_raw_batches_with_aborted_transactions(client: httpx.Client) -> None:
    r = client.get(
        RECORDS.format(topic="payments", partition=0),
        params={"offset": 0, "isolation_level": "read_committed"},
        headers={"Accept": "application/octet-stream"},
    )
    assert r.status_code == 200
    records = MemoryRecords(r.content)
    first = records.next_batch()
    assert first is not None
    assert first.base_offset == int(r.headers["x-first-offset"])
    aborted = json.loads(r.headers["x-aborted-transactions"])
    assert aborted and {"producer_id", "first_offset"} == set(aborted[0])
    assert int(r.headers["x-next-offset"]) > 0


def test_offsets_by_timestamp(client: httpx.Client, demo: DemoBucket) -> None:
    url = "/v1/topics/orders/partitions/0/offsets"
    expected = expected_records(demo.root / "segments" / "orders-0")
    by_time = [e for e in expected if e.timestamp >= 0]
    for probe in (by_time[0], by_time[len(by_time) // 2], by_time[-1]):
        body = client.get(url, params={"timestamp": probe.timestamp}).json()
        want = next(e for e in expected if e.timestamp >= probe.timestamp)
        assert (body["offset"], body["timestamp"]) == (want.offset, want.timestamp)
    late = client.get(url, params={"timestamp": by_time[-1].timestamp + 10**9}).json()
    assert late == {"offset": -1, "timestamp": -1, "leader_epoch": None}
    latest = client.get(url, params={"timestamp": "latest"}).json()
    assert latest["offset"] == demo.topic("orders").partition(0).next_offset
    assert client.get(url, params={"timestamp": "earliest"}).json()["offset"] == 0


ALL_FORMATS: tuple[dict[str, str], ...] = (
    {},
    {"Accept": "application/x-ndjson"},
    {"Accept": "application/octet-stream"},
)


def test_at_the_end_an_empty_answer_saying_so(client: httpx.Client, demo: DemoBucket) -> None:
    """Kafka's fetch at the high watermark: 200, nothing, next_offset unchanged."""
    end = demo.topic("orders").partition(0).next_offset
    url = RECORDS.format(topic="orders", partition=0)
    for isolation in ("read_uncommitted", "read_committed"):
        params = {"offset": end, "isolation_level": isolation}
        body = client.get(url, params=params).json()
        assert (body["records"], body["next_offset"]) == ([], end), body
        assert (body["log_end_offset"], body["end_of_remote_log"]) == (end, True)
        lines = client.get(url, params=params, headers=ALL_FORMATS[1]).text.splitlines()
        stable = end if isolation == "read_committed" else None  # no transaction left open
        assert body["last_stable_offset"] == stable
        assert [json.loads(line) for line in lines] == [
            {"next_offset": end, "log_start_offset": 0, "log_end_offset": end,
             "last_stable_offset": stable, "end_of_remote_log": True}
        ]  # fmt: skip
        raw = client.get(url, params=params, headers=ALL_FORMATS[2])
        assert (raw.status_code, raw.content) == (200, b"")
        assert raw.headers["x-next-offset"] == str(end)
        assert raw.headers["x-end-of-remote-log"] == "true"


def test_the_paging_example_in_the_docs_runs(base_url: str, demo: DemoBucket) -> None:
    """docs/paging.md's Python example, as written, reads every record once and stops."""
    block = re.search(r"<!-- paging-example -->\n```python\n(.*?)```", PAGING_DOC.read_text(),
                      re.DOTALL)  # fmt: skip
    assert block is not None, "docs/paging.md lost its marked python example"
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), str(PAGING_DOC), "exec"), namespace)
    read_partition: Callable[..., Iterator[dict[str, Any]]] = namespace["read_partition"]
    expected = expected_records(demo.root / "segments" / "orders-0")
    got = list(read_partition(base_url, "orders", 0, max_bytes=3000))
    assert [_got(r) for r in got] == [_as_json(e) for e in expected]
    payments = list(read_partition(base_url, "payments", 0, isolation_level="read_committed"))
    committed = [
        e for e in expected_records(demo.root / "segments" / "payments-0") if not e.aborted
    ]
    assert [r["offset"] for r in payments] == [e.offset for e in committed]


def test_formats_over_http(client: httpx.Client, demo: DemoBucket) -> None:
    """The demo's orders values are JSON documents: json embeds them, string gives the text,
    and the same bytes come back whichever format is asked."""
    url = RECORDS.format(topic="orders", partition=0)
    params = {"offset": 0, "max_bytes": 4096}
    plain = client.get(url, params=params).json()["records"]
    as_json = client.get(url, params={**params, "value_format": "json", "key_format": "hex"})
    as_text = client.get(url, params={**params, "value_format": "string"}, headers=ALL_FORMATS[1])
    assert as_json.status_code == as_text.status_code == 200, (as_json.text, as_text.text)
    texts = [json.loads(line) for line in as_text.text.splitlines()][: len(plain)]
    for b64, embedded, text in zip(plain, as_json.json()["records"], texts, strict=True):
        raw = None if b64["value"] is None else base64.b64decode(b64["value"])
        assert text["value"] == (None if raw is None else raw.decode())
        assert embedded["value"] == (None if raw is None else json.loads(raw))
        key = None if b64["key"] is None else base64.b64decode(b64["key"]).hex()
        assert embedded["key"] == key


def test_offsets_take_kafkas_sentinels(client: httpx.Client, demo: DemoBucket) -> None:
    url = "/v1/topics/orders/partitions/0/offsets"
    for sentinel, name in (("-1", "latest"), ("-2", "earliest"), ("-3", "max_timestamp")):
        got = client.get(url, params={"timestamp": sentinel})
        assert got.status_code == 200, got.text
        assert got.json() == client.get(url, params={"timestamp": name.upper()}).json()


def test_416_beyond_the_end(client: httpx.Client, demo: DemoBucket) -> None:
    end = demo.topic("orders").partition(0).next_offset
    for headers in ALL_FORMATS:
        r = client.get(
            RECORDS.format(topic="orders", partition=0),
            params={"offset": end + 1},
            headers=headers,
        )
        assert r.status_code == 416
        body = r.json()
        assert body["error_code"] == "offset_out_of_range"
        assert (body["log_start_offset"], body["log_end_offset"]) == (0, end)
        assert body["retriable"] is False


def test_404_unknown_topic_and_partition(client: httpx.Client) -> None:
    for path in (
        RECORDS.format(topic="nope", partition=0),
        RECORDS.format(topic="orders", partition=9),
        "/v1/topics/nope/partitions",
        "/v1/topics/orders/partitions/9/segments",
    ):
        r = client.get(path, params={"offset": 0})
        assert r.status_code == 404, path
        assert r.json()["error_code"] == "unknown_topic_or_partition"


def test_segments_and_metrics(client: httpx.Client, demo: DemoBucket) -> None:
    segments = client.get("/v1/topics/inventory/partitions/0/segments").json()["segments"]
    assert segments and all(s["size"] > 0 for s in segments)
    assert {s["state"] for s in segments} <= {"COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_FINISHED"}
    (old,) = [s for s in segments if s["displaced"]]  # the demo's re-upload displaced it
    new = next(s for s in segments if s["segment_id"] == old["displaced_by"])
    assert (new["start_offset"], new["end_offset"]) == (old["start_offset"], old["end_offset"])
    assert new["displaced"] is False and new["displaced_by"] is None
    text = client.get("/metrics").text
    assert 'route="/v1/topics/{topic}/partitions/{partition}/records"' in text
    families = {f.name for f in text_string_to_metric_families(text)}  # one valid exposition
    assert {
        "tiered_gateway_http_request_duration_seconds",
        "tiered_gateway_remote_gets",
        "tiered_gateway_ready",
    } <= families
