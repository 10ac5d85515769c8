"""The raw response is the fetched buffers sent one by one (never joined), with their total as
``Content-Length``; and no request dependency is run in a worker thread (issue 15)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from gateway.api.buffers import BuffersResponse
from tests.fakes.orders import batch_data

URL = "/v1/topics/orders/partitions/0/records"
RAW = {"Accept": "application/octet-stream"}


async def _send_through(response: BuffersResponse, method: str = "GET") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await response({"type": "http", "method": method}, receive, send)
    return sent


async def test_buffers_are_sent_as_they_are_one_message_each() -> None:
    backing = b"0123456789abcdef"
    parts: list[bytes | memoryview] = [memoryview(backing)[2:6], b"", memoryview(backing)[9:16]]
    sent = await _send_through(BuffersResponse(parts, media_type="application/octet-stream"))
    start, *bodies = sent
    assert (b"content-length", b"11") in start["headers"]
    assert [m["body"] for m in bodies] == [b"2345", b"9abcdef"]
    assert bodies[0]["body"] is parts[0]  # the view itself: no copy, no join
    assert bodies[1]["body"] is parts[2]
    assert [m.get("more_body", False) for m in bodies] == [True, False]


async def test_no_buffers_is_an_empty_body() -> None:
    sent = await _send_through(BuffersResponse([], media_type="application/octet-stream"))
    assert (b"content-length", b"0") in sent[0]["headers"]
    assert sent[1:] == [{"type": "http.response.body", "body": b""}]


async def test_head_sends_the_length_and_no_body() -> None:
    sent = await _send_through(
        BuffersResponse([b"abc"], media_type="application/octet-stream"), method="HEAD"
    )
    assert (b"content-length", b"3") in sent[0]["headers"]
    assert sent[1]["body"] == b""


def test_raw_fetch_has_the_length_of_its_batches(client: TestClient) -> None:
    r = client.get(URL, params={"offset": 7, "max_bytes": 300}, headers=RAW)
    body = batch_data(1) + batch_data(2) + batch_data(3)
    assert r.content == body
    assert r.headers["content-length"] == str(len(body))


def test_a_request_runs_no_dependency_in_a_worker_thread(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: every plain ``def`` dependency (ready, topic, service, settings, deadline) was
    one hand-off to a worker thread per request."""
    handed: list[str] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(getattr(fn, "__qualname__", repr(fn)))
        return await run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    r = client.get(URL, params={"offset": 0, "max_bytes": 1}, headers=RAW)
    assert r.status_code == 200
    assert handed == []
