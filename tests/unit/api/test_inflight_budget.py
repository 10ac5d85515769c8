"""The budget of response bytes in flight, over the app: a request waits for its page's share
within its deadline, else 503 overloaded; every response, streamed or failed, gives it back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gateway.deadline import Deadline
from gateway.service.admission import (
    LAG_WINDOW,
    RAW_SHARE,
    ByteBudget,
    LoopLag,
    RequestGate,
    raw_reservation,
)
from tests.unit.api.conftest import DEFAULT_MAX_BYTES

URL = "/v1/topics/orders/partitions/0/records"


@pytest.fixture
def budget() -> ByteBudget:
    return ByteBudget(DEFAULT_MAX_BYTES)


@pytest.fixture
def held(app: FastAPI, budget: ByteBudget) -> Iterator[TestClient]:
    with TestClient(app, base_url="http://localhost") as c:
        c.app_state["budget"] = budget  # what each request's state is copied from
        yield c


def test_a_full_budget_answers_overloaded_within_the_deadline(
    held: TestClient, budget: ByteBudget
) -> None:
    assert held.portal is not None
    taken = held.portal.call(budget.acquire, DEFAULT_MAX_BYTES, Deadline.after(60))
    r = held.get(URL, params={"offset": 0, "timeout_ms": 50})
    assert r.status_code == 503, r.text
    body = r.json()
    assert (body["error_code"], body["retriable"]) == ("overloaded", True)
    assert "Retry-After" in r.headers
    budget.release(taken)
    assert held.get(URL, params={"offset": 0}).status_code == 200
    assert budget.in_use == 0 and budget.stats.refused == 1


def test_a_raw_answer_reserves_a_quarter_of_its_page(held: TestClient, budget: ByteBudget) -> None:
    """With three quarters of the budget held, a raw page of the whole budget still starts (it
    reserves a quarter: slices of verified memory), a JSON page of the same size waits, then
    503."""
    assert held.portal is not None
    taken = held.portal.call(budget.acquire, DEFAULT_MAX_BYTES * 3 // 4, Deadline.after(60))
    page = {"offset": 0, "max_bytes": DEFAULT_MAX_BYTES, "timeout_ms": 50}
    raw = held.get(URL, params=page, headers={"Accept": "application/octet-stream"})
    assert raw.status_code == 200, raw.text
    json = held.get(URL, params=page)
    assert json.status_code == 503 and json.json()["error_code"] == "overloaded", json.text
    budget.release(taken)
    assert budget.in_use == 0 and budget.stats.refused == 1
    assert raw_reservation(1) == 1 and raw_reservation(RAW_SHARE + 1) == 2


@pytest.mark.parametrize(
    "accept", ["application/json", "application/x-ndjson", "application/octet-stream"]
)
def test_every_response_gives_its_share_back(
    held: TestClient, budget: ByteBudget, accept: str
) -> None:
    for _ in range(3):
        r = held.get(URL, params={"offset": 0}, headers={"Accept": accept})
        assert r.status_code == 200, r.text
        assert r.content
        assert budget.in_use == 0
    assert budget.stats.admitted == 3


def test_a_failed_request_gives_its_share_back(held: TestClient, budget: ByteBudget) -> None:
    r = held.get(URL, params={"offset": 10**12})
    assert r.status_code == 416, r.text
    assert budget.in_use == 0 and budget.stats.admitted == 1


@pytest.fixture
def gated(app: FastAPI) -> Iterator[tuple[TestClient, RequestGate]]:
    gate = RequestGate(1, max_wait_s=0)
    with TestClient(app, base_url="http://localhost") as c:
        c.app_state["gate"] = gate
        yield c, gate


@pytest.mark.parametrize(
    "accept", ["application/json", "application/x-ndjson", "application/octet-stream"]
)
def test_every_turn_is_given_back_and_a_full_gate_answers_overloaded(
    gated: tuple[TestClient, RequestGate], accept: str
) -> None:
    """Issue 30: a JSON or NDJSON page takes a turn to be decoded and written; every
    response, streamed or failed, gives it back; with every turn taken and no wait allowed:
    503 overloaded. Raw answers take none (slices of verified memory)."""
    client, gate = gated
    for offset in (0, 10**12):  # an answer, a failure (416)
        r = client.get(URL, params={"offset": offset}, headers={"Accept": accept})
        assert r.status_code in {200, 416}, r.text
        assert gate.running == 0
    assert client.portal is not None
    client.portal.call(gate.acquire, Deadline.after(60))
    r = client.get(URL, params={"offset": 0}, headers={"Accept": accept})
    if accept == "application/octet-stream":
        assert r.status_code == 200, r.text
        assert gate.stats.refused == 0
        return
    assert r.status_code == 503, r.text
    assert (r.json()["error_code"], r.json()["retriable"]) == ("overloaded", True)
    assert "Retry-After" in r.headers
    gate.release()
    assert client.get(URL, params={"offset": 0}).status_code == 200


def test_list_offsets_is_refused_while_the_loop_stays_late(app: FastAPI) -> None:
    lag = LoopLag(0.1)
    gate = RequestGate(4, max_wait_s=0, lag=lag)
    offsets = "/v1/topics/orders/partitions/0/offsets"
    with TestClient(app, base_url="http://localhost") as client:
        client.app_state["gate"] = gate
        assert client.get(offsets, params={"timestamp": "earliest"}).status_code == 200
        for _ in range(LAG_WINDOW):
            lag.record(0.5)
        r = client.get(offsets, params={"timestamp": "earliest"})
        assert r.status_code == 503, r.text
        assert (r.json()["error_code"], r.json()["retriable"]) == ("overloaded", True)
        assert "Retry-After" in r.headers
        assert gate.stats.refused_late == 1
