"""read_committed over HTTP stops at the remote last stable offset (LSO), and says so.

The fake's partition 0 has its LSO at ``fake.last_stable`` (an open transaction there, its
marker not tiered), its log end at ``LOG_END``. Every format carries the LSO for
read_committed (JSON and the NDJSON closing line: ``last_stable_offset``; raw:
``X-Last-Stable-Offset``) and ``end_of_remote_log`` once ``next_offset`` reaches it, so a
paging client stops there instead of asking at the LSO for a 503 until the marker is tiered;
a request at or past it is the retriable 503 ``transaction_pending`` with the bounds in its
body. read_uncommitted answers carry ``last_stable_offset`` null (raw: no header) and read to
the log end. ``/offsets`` takes the same ``isolation_level``.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from fastapi.testclient import TestClient

from gateway.errors import TransactionPendingError
from gateway.service.types import IsolationLevel
from tests.fakes.orders import LOG_END
from tests.fakes.service import FakeService

URL: Final = "/v1/topics/orders/partitions/0/records"
OFFSETS: Final = "/v1/topics/orders/partitions/0/offsets"
NDJSON: Final = {"Accept": "application/x-ndjson"}
RAW: Final = {"Accept": "application/octet-stream"}
COMMITTED: Final = {"isolation_level": "read_committed"}
LSO: Final = 30  # three NDJSON pages of 300 bytes (15 offsets each) would pass it
ABORTED: Final = {10, 11, 12}  # the fake's aborted records


@pytest.fixture
def open_txn(fake: FakeService) -> FakeService:
    fake.catalog["orders"].partitions[0].stable = LSO
    return fake


def _lines(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _pending_body(body: dict[str, Any]) -> None:
    assert (body["error_code"], body["retriable"]) == ("transaction_pending", True)
    assert (body["log_start_offset"], body["log_end_offset"], body["last_stable_offset"]) == (
        0,
        LOG_END,
        LSO,
    )


# --- JSON -------------------------------------------------------------------------------------


def test_json_page_reaching_the_lso_is_the_end(client: TestClient, open_txn: FakeService) -> None:
    body = client.get(URL, params={"offset": 20, **COMMITTED}).json()
    assert [r["offset"] for r in body["records"]] == list(range(20, LSO))
    assert (body["next_offset"], body["log_end_offset"]) == (LSO, LOG_END)
    assert body["last_stable_offset"] == LSO
    assert body["end_of_remote_log"] is True


def test_json_page_before_the_lso_is_not_the_end(client: TestClient, open_txn: FakeService) -> None:
    body = client.get(URL, params={"offset": 0, "max_bytes": 100, **COMMITTED}).json()
    assert (body["next_offset"], body["last_stable_offset"]) == (5, LSO)
    assert body["end_of_remote_log"] is False


def test_paging_read_committed_ends_at_the_lso_without_a_503(
    client: TestClient, open_txn: FakeService
) -> None:
    offset, seen, pages = 0, [], 0
    while True:
        r = client.get(URL, params={"offset": offset, "max_bytes": 200, **COMMITTED})
        assert r.status_code == 200, r.text
        page = r.json()
        pages += 1
        seen += [rec["offset"] for rec in page["records"]]
        offset = page["next_offset"]
        if page["end_of_remote_log"]:
            break
    assert offset == LSO
    assert seen == [o for o in range(LSO) if o not in ABORTED]
    assert pages == len(open_txn.called("fetch")) == 3  # none at the LSO


def test_read_committed_without_an_open_transaction_ends_at_the_log_end(
    client: TestClient, fake: FakeService
) -> None:
    body = client.get(URL, params={"offset": LOG_END - 5, **COMMITTED}).json()
    assert (body["next_offset"], body["last_stable_offset"]) == (LOG_END, LOG_END)
    assert body["end_of_remote_log"] is True
    before = client.get(URL, params={"offset": 0, **COMMITTED}).json()
    assert before["last_stable_offset"] == LOG_END and before["end_of_remote_log"] is False


def test_read_uncommitted_has_no_lso_and_reads_past_it(
    client: TestClient, open_txn: FakeService
) -> None:
    body = client.get(URL, params={"offset": 20, "max_bytes": 200}).json()
    assert body["last_stable_offset"] is None
    assert (body["next_offset"], body["end_of_remote_log"]) == (LSO, False)
    past = client.get(URL, params={"offset": LSO}).json()
    assert past["records"][0]["offset"] == LSO and past["last_stable_offset"] is None
    end = client.get(URL, params={"offset": LOG_END - 5}).json()
    assert (end["next_offset"], end["end_of_remote_log"]) == (LOG_END, True)


# --- at or past the LSO: the 503 with the bounds ----------------------------------------------


@pytest.mark.parametrize("headers", [{}, NDJSON, RAW], ids=["json", "ndjson", "raw"])
@pytest.mark.parametrize("offset", [LSO, LSO + 5, LOG_END - 1])
def test_at_or_past_the_lso_is_503_with_the_bounds(
    client: TestClient, open_txn: FakeService, headers: dict[str, str], offset: int
) -> None:
    r = client.get(URL, params={"offset": offset, **COMMITTED}, headers=headers)
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.headers["retry-after"] == "1"
    _pending_body(r.json())


def test_at_the_log_end_read_committed_is_the_end_not_a_503(
    client: TestClient, open_txn: FakeService
) -> None:
    body = client.get(URL, params={"offset": LOG_END, **COMMITTED}).json()
    assert (body["records"], body["next_offset"], body["end_of_remote_log"]) == ([], LOG_END, True)
    assert body["last_stable_offset"] == LSO


# --- NDJSON -----------------------------------------------------------------------------------


def test_ndjson_read_committed_stream_ends_at_the_lso(
    client: TestClient, open_txn: FakeService
) -> None:
    r = client.get(URL, params={"offset": 0, **COMMITTED}, headers=NDJSON)
    assert r.status_code == 200
    *records, last = _lines(r.text)
    assert [rec["offset"] for rec in records] == [o for o in range(LSO) if o not in ABORTED]
    assert last == {
        "next_offset": LSO,
        "log_start_offset": 0,
        "log_end_offset": LOG_END,
        "last_stable_offset": LSO,
        "end_of_remote_log": True,
    }
    assert [c["offset"] for c in open_txn.called("fetch")] == [0, 15]  # never at the LSO


def test_ndjson_read_committed_budget_before_the_lso(
    client: TestClient, open_txn: FakeService
) -> None:
    r = client.get(URL, params={"offset": 0, "max_bytes": 100, **COMMITTED}, headers=NDJSON)
    last = _lines(r.text)[-1]
    assert (last["next_offset"], last["last_stable_offset"], last["end_of_remote_log"]) == (
        5,
        LSO,
        False,
    )


def test_ndjson_read_uncommitted_closing_line_has_a_null_lso(
    client: TestClient, open_txn: FakeService
) -> None:
    r = client.get(URL, params={"offset": 20, "max_bytes": 300}, headers=NDJSON)
    *records, last = _lines(r.text)
    assert [rec["offset"] for rec in records] == list(range(20, 35))  # past the LSO
    assert "last_stable_offset" in last and last["last_stable_offset"] is None
    assert (last["next_offset"], last["end_of_remote_log"]) == (35, False)


def test_ndjson_later_page_pending_error_line_carries_the_bounds(
    client: TestClient, fake: FakeService
) -> None:
    """A later page failing with ``transaction_pending`` (a marker not tiered below the LSO the
    first page knew): the error line says where to resume and the bounds."""
    fake.fail_fetch_after = 1
    fake.fail_fetch_with = TransactionPendingError(
        "the transaction starting at offset 15 has no marker",
        log_start_offset=0,
        log_end_offset=LOG_END,
        last_stable_offset=LSO,
    )
    r = client.get(URL, params={"offset": 0, **COMMITTED}, headers=NDJSON)
    last = _lines(r.text)[-1]
    _pending_body(last)
    assert last["next_offset"] == 15


# --- raw --------------------------------------------------------------------------------------


def test_raw_read_committed_headers_at_the_lso(client: TestClient, open_txn: FakeService) -> None:
    r = client.get(URL, params={"offset": 20, **COMMITTED}, headers=RAW)
    assert r.status_code == 200
    assert r.headers["x-next-offset"] == str(LSO)
    assert r.headers["x-last-stable-offset"] == str(LSO)
    assert r.headers["x-log-end-offset"] == str(LOG_END)
    assert r.headers["x-end-of-remote-log"] == "true"
    before = client.get(URL, params={"offset": 0, "max_bytes": 100, **COMMITTED}, headers=RAW)
    assert before.headers["x-last-stable-offset"] == str(LSO)
    assert before.headers["x-end-of-remote-log"] == "false"


def test_raw_read_uncommitted_has_no_lso_header(client: TestClient, open_txn: FakeService) -> None:
    r = client.get(URL, params={"offset": 20, "max_bytes": 200}, headers=RAW)
    assert "x-last-stable-offset" not in r.headers
    assert (r.headers["x-next-offset"], r.headers["x-end-of-remote-log"]) == (str(LSO), "false")


# --- /offsets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "isolation", "offset"),
    [
        ({}, IsolationLevel.READ_UNCOMMITTED, LOG_END),
        ({"isolation_level": "read_uncommitted"}, IsolationLevel.READ_UNCOMMITTED, LOG_END),
        ({"isolation_level": "read_committed"}, IsolationLevel.READ_COMMITTED, LSO),
        ({"isolation_level": "READ_COMMITTED"}, IsolationLevel.READ_COMMITTED, LSO),
    ],
)
def test_offsets_latest_by_isolation_level(
    client: TestClient,
    open_txn: FakeService,
    params: dict[str, str],
    isolation: IsolationLevel,
    offset: int,
) -> None:
    r = client.get(OFFSETS, params={"timestamp": "latest", **params})
    assert r.status_code == 200, r.text
    assert r.json()["offset"] == offset
    (call,) = open_txn.called("list_offsets")
    assert call["isolation"] is isolation


@pytest.mark.parametrize(("found", "expected"), [(LSO - 1, LSO - 1), (LSO, -1), (LSO + 5, -1)])
def test_offsets_timestamp_at_or_past_the_lso_is_none_for_read_committed(
    client: TestClient, open_txn: FakeService, found: int, expected: int
) -> None:
    timestamp = str(1_700_000_000_000 + found)
    committed = client.get(OFFSETS, params={"timestamp": timestamp, **COMMITTED}).json()
    assert committed["offset"] == expected
    uncommitted = client.get(OFFSETS, params={"timestamp": timestamp}).json()
    assert uncommitted["offset"] == found


def test_offsets_rejects_an_unknown_isolation_level(client: TestClient, fake: FakeService) -> None:
    r = client.get(OFFSETS, params={"timestamp": "latest", "isolation_level": "serializable"})
    assert r.status_code == 400
    assert (r.json()["error_code"], r.json()["parameter"]) == ("invalid_request", "isolation_level")
    assert not fake.called("list_offsets")
