"""The records route in its three representations: JSON, NDJSON stream, raw batches."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gateway.api import records_pages, render
from gateway.api.render import choose_media_type
from gateway.errors import CorruptRecordError, StorageUnavailableError
from gateway.kafka.uuids import encode_uuid
from gateway.service.types import IsolationLevel
from tests.fakes.orders import BATCH_BYTES, LOG_END, RECORDS_PER_BATCH, TOPIC_ID, batch_data
from tests.fakes.service import FakeService
from tests.unit.api.conftest import DEFAULT_MAX_BYTES, MAX_RESPONSE_BYTES, PAGE_BYTES

URL = "/v1/topics/orders/partitions/0/records"
NDJSON = {"Accept": "application/x-ndjson"}
RAW = {"Accept": "application/octet-stream"}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _lines(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_json_is_the_default(client: TestClient, fake: FakeService) -> None:
    r = client.get(URL, params={"offset": 7, "max_bytes": 200})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert {k: v for k, v in body.items() if k != "records"} == {
        "topic": "orders",
        "topic_id": encode_uuid(TOPIC_ID),
        "partition": 0,
        "next_offset": 15,
        "log_start_offset": 0,
        "log_end_offset": LOG_END,
        "last_stable_offset": None,
        "end_of_remote_log": False,
    }
    assert [rec["offset"] for rec in body["records"]] == list(range(7, 15))
    assert body["records"][0] == {
        "offset": 7,
        "timestamp": 1_700_000_000_007,
        "timestamp_type": "CreateTime",
        "key": None,
        "value": _b64(b"v7"),
        "headers": [{"key": "h", "value": _b64(b"\x00\xff")}, {"key": "n", "value": None}],
        "leader_epoch": 0,
    }
    assert body["records"][1]["key"] == _b64(b"k8")
    (call,) = fake.called("fetch")
    assert call["max_bytes"] == 200
    assert call["isolation"] is IsolationLevel.READ_UNCOMMITTED


@pytest.mark.parametrize(
    "accept", ["application/json", "*/*", "application/*", "text/html, application/json;q=0.5"]
)
def test_json_by_accept(client: TestClient, accept: str) -> None:
    r = client.get(URL, params={"offset": 0}, headers={"Accept": accept})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"


def test_json_defaults_and_log_append_time(client: TestClient, fake: FakeService) -> None:
    r = client.get(URL, params={"offset": LOG_END - 1})
    body = r.json()
    assert body["records"][0]["timestamp_type"] == "LogAppendTime"
    assert body["next_offset"] == LOG_END
    assert fake.called("fetch")[0]["max_bytes"] == DEFAULT_MAX_BYTES


def test_read_committed_drops_aborted_records(client: TestClient, fake: FakeService) -> None:
    r = client.get(URL, params={"offset": 8, "isolation_level": "read_committed"})
    offsets = [rec["offset"] for rec in r.json()["records"]]
    assert offsets[:3] == [8, 9, 13]
    assert fake.called("fetch")[0]["isolation"] is IsolationLevel.READ_COMMITTED
    assert fake.called("decode")[0]["isolation"] is IsolationLevel.READ_COMMITTED


@pytest.mark.parametrize("accept", ["application/json", "application/x-ndjson"])
def test_large_pages_are_rendered_in_a_worker_thread(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, accept: str
) -> None:
    threads: list[str] = []

    def spy(render: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any) -> Any:
            threads.append(threading.current_thread().name)
            return render(*args)

        return wrapped

    monkeypatch.setattr(records_pages, "records_document", spy(render.records_document))
    monkeypatch.setattr(records_pages, "ndjson_prefix", spy(render.ndjson_prefix))
    monkeypatch.setattr(render, "OFFLOAD_RECORDS", 5)
    small = client.get(URL, params={"offset": 0, "max_bytes": 100}, headers={"Accept": accept})
    large = client.get(URL, params={"offset": 0, "max_bytes": 500}, headers={"Accept": accept})
    assert small.status_code == large.status_code == 200
    assert "AnyIO worker thread" not in threads[0]
    assert all("AnyIO worker thread" in name for name in threads[1:])


def test_timeout_ms_makes_the_deadline(client: TestClient, fake: FakeService) -> None:
    """The deadline is the request's arrival plus timeout_ms (default 30 s), read off the
    monotonic clock around each request: no bound on how long the machine takes."""
    spans = []
    for params in ({"offset": 0}, {"offset": 0, "timeout_ms": 1500}):
        before = time.monotonic()
        client.get(URL, params=params)
        spans.append((before, time.monotonic()))
    first, second = fake.called("fetch")
    for (before, after), call, seconds in zip(spans, (first, second), (30.0, 1.5), strict=True):
        assert before + seconds <= call["deadline"].at <= after + seconds


# --- NDJSON -----------------------------------------------------------------------------------


def test_ndjson_streams_pages_until_the_budget(client: TestClient, fake: FakeService) -> None:
    r = client.get(URL, params={"offset": 0, "max_bytes": 700}, headers=NDJSON)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/x-ndjson"
    lines = _lines(r.text)
    *records, last = lines
    assert [rec["offset"] for rec in records] == list(range(35))
    assert records[0]["value"] == _b64(b"v0")
    assert last == {
        "next_offset": 35,
        "log_start_offset": 0,
        "log_end_offset": LOG_END,
        "last_stable_offset": None,
        "end_of_remote_log": False,
    }
    # pages of stream_page_bytes, the last one cut to what the budget leaves
    assert [c["max_bytes"] for c in fake.called("fetch")] == [PAGE_BYTES, PAGE_BYTES, 100]
    assert [c["offset"] for c in fake.called("fetch")] == [0, 15, 30]


def test_ndjson_stops_at_the_end_of_the_remote_log(client: TestClient, fake: FakeService) -> None:
    start = LOG_END - 4 * RECORDS_PER_BATCH - 2
    r = client.get(URL, params={"offset": start}, headers=NDJSON)
    *records, last = _lines(r.text)
    assert [rec["offset"] for rec in records] == list(range(start, LOG_END))
    assert last["next_offset"] == LOG_END and last["end_of_remote_log"] is True
    assert fake.called("fetch")[0]["max_bytes"] == PAGE_BYTES
    assert len(fake.called("fetch")) == 2  # no fetch at the log end


def test_ndjson_default_budget_is_max_response_bytes(client: TestClient, fake: FakeService) -> None:
    r = client.get(URL, params={"offset": 0}, headers=NDJSON)
    *records, last = _lines(r.text)
    assert len(records) == (MAX_RESPONSE_BYTES // BATCH_BYTES) * RECORDS_PER_BATCH
    assert last["next_offset"] == len(records)
    assert sum(c["max_bytes"] for c in fake.called("fetch")) == MAX_RESPONSE_BYTES


def test_ndjson_read_committed(client: TestClient) -> None:
    r = client.get(URL, params={"offset": 0, "isolation_level": "read_committed"}, headers=NDJSON)
    *records, last = _lines(r.text)
    assert last["next_offset"] == 50
    offsets = [rec["offset"] for rec in records]
    assert 10 not in offsets and 11 not in offsets and 12 not in offsets
    assert offsets[:11] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13]


def test_ndjson_error_after_the_stream_started_is_the_last_line(
    client: TestClient, fake: FakeService
) -> None:
    fake.fail_fetch_after = 1
    fake.fail_fetch_with = StorageUnavailableError("GET demo/x.log: 503 SlowDown")
    r = client.get(URL, params={"offset": 0}, headers=NDJSON)
    assert r.status_code == 200
    *records, last = _lines(r.text)
    assert [rec["offset"] for rec in records] == list(range(15))
    assert last == {
        "error_code": "storage_unavailable",
        "message": "GET demo/x.log: 503 SlowDown",
        "retriable": True,
        "next_offset": 15,
    }


def test_ndjson_unexpected_error_is_a_generic_last_line(
    client: TestClient, fake: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_fetch_after = 1
    fake.fail_fetch_with = KeyError("secret detail")
    r = client.get(URL, params={"offset": 0}, headers=NDJSON)
    last = _lines(r.text)[-1]
    assert last["error_code"] == "internal_error"
    assert "secret" not in last["message"]
    assert last["next_offset"] == 15
    assert "secret detail" in caplog.text  # the traceback is logged


def test_ndjson_error_on_the_first_page_is_an_http_error(
    client: TestClient, fake: FakeService
) -> None:
    r = client.get(URL, params={"offset": LOG_END + 5}, headers=NDJSON)
    assert r.status_code == 416
    assert r.headers["content-type"] == "application/json"
    assert r.json()["log_end_offset"] == LOG_END


def test_ndjson_ends_normally_once_the_deadline_passed(
    client: TestClient, fake: FakeService
) -> None:
    fake.fetch_delay_s = 0.01
    r = client.get(URL, params={"offset": 0, "timeout_ms": 5}, headers=NDJSON)
    *records, last = _lines(r.text)
    assert last["next_offset"] == len(records) == 15  # one page, then the deadline
    assert len(fake.called("fetch")) == 1


# --- raw batches ------------------------------------------------------------------------------


def test_octet_stream_is_the_batches_as_stored(client: TestClient, fake: FakeService) -> None:
    r = client.get(URL, params={"offset": 7, "max_bytes": 300}, headers=RAW)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.content == batch_data(1) + batch_data(2) + batch_data(3)
    assert r.headers["x-first-offset"] == "5"
    assert r.headers["x-next-offset"] == "20"
    assert r.headers["x-log-start-offset"] == "0"
    assert r.headers["x-log-end-offset"] == str(LOG_END)
    assert r.headers["x-topic-id"] == encode_uuid(TOPIC_ID)
    assert "x-aborted-transactions" not in r.headers
    assert not fake.called("decode")


def test_octet_stream_read_committed_lists_aborted_transactions(client: TestClient) -> None:
    r = client.get(URL, params={"offset": 0, "isolation_level": "read_committed"}, headers=RAW)
    aborted = json.loads(r.headers["x-aborted-transactions"])
    assert aborted == [{"producer_id": 42, "first_offset": 10}]


def test_octet_stream_single_batch(client: TestClient) -> None:
    r = client.get(URL, params={"offset": 0, "max_bytes": 1}, headers=RAW)
    assert r.content == batch_data(0)  # at least one batch, even past max_bytes


# --- negotiation and parameters -----------------------------------------------------------------


@pytest.mark.parametrize("accept", ["text/html", "text/*", "*/*;q=0", "application/xml"])
def test_not_acceptable(client: TestClient, fake: FakeService, accept: str) -> None:
    r = client.get(URL, params={"offset": 0}, headers={"Accept": accept})
    assert r.status_code == 406
    body = r.json()
    assert body["error_code"] == "not_acceptable"
    assert "application/x-ndjson" in body["message"]
    assert not fake.called("fetch")


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "application/json"),
        ("", "application/json"),
        ("*/*", "application/json"),
        ("application/x-ndjson", "application/x-ndjson"),
        ("application/jsonl", "application/x-ndjson"),
        ("application/octet-stream, */*;q=0.1", "application/octet-stream"),
        ("application/json;q=0.2, application/x-ndjson;q=0.9", "application/x-ndjson"),
        ("application/json;q=0, */*", "application/x-ndjson"),
        ("APPLICATION/OCTET-STREAM", "application/octet-stream"),
        ("text/plain, application/x-ndjson;q=0.3", "application/x-ndjson"),
        ("application/json;q=oops, application/octet-stream", "application/octet-stream"),
        ("application/*;q=0.5, application/octet-stream;q=0.6", "application/octet-stream"),
        ("application/x-ndjson, application/json", "application/json"),
    ],
)
def test_choose_media_type(accept: str | None, expected: str) -> None:
    assert choose_media_type(accept) == expected


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({}, "offset"),
        ({"offset": -1}, "offset"),
        ({"offset": "x"}, "offset"),
        ({"offset": 0, "max_bytes": 0}, "max_bytes"),
        ({"offset": 0, "max_bytes": MAX_RESPONSE_BYTES + 1}, "max_bytes"),
        ({"offset": 0, "timeout_ms": 0}, "timeout_ms"),
        ({"offset": 0, "timeout_ms": 60_001}, "timeout_ms"),
        ({"offset": 0, "isolation_level": "serializable"}, "isolation_level"),
    ],
)
def test_invalid_parameters_are_named(
    client: TestClient, fake: FakeService, params: dict[str, Any], parameter: str
) -> None:
    for headers in ({}, NDJSON, RAW):
        r = client.get(URL, params=params, headers=headers)
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["error_code"] == "invalid_request"
        assert body["parameter"] == parameter
        assert body["retriable"] is False
        assert parameter in body["message"]
    assert not fake.called("fetch")


def test_max_bytes_at_the_cap_is_fine(client: TestClient) -> None:
    r = client.get(URL, params={"offset": 0, "max_bytes": MAX_RESPONSE_BYTES})
    assert r.status_code == 200


def test_corrupt_data_names_the_object(client: TestClient, fake: FakeService) -> None:
    fake.fail["decode"] = CorruptRecordError("demo/orders-x/00000000000000000000-abc.log: bad")
    r = client.get(URL, params={"offset": 0})
    assert r.status_code == 502
    assert "00000000000000000000-abc.log" in r.json()["message"]
