"""Issue 14's HTTP surprises, at the router: the end of the remote log is an answer (not a
416), data routes are not ready while /readyz is not, ListOffsets takes Kafka's sentinels,
parameters are case-blind where Kafka's are, and records come in the formats asked for."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gateway.service.types import IsolationLevel
from tests.fakes.orders import LOG_END
from tests.fakes.service import FakeService

URL = "/v1/topics/orders/partitions/0/records"
OFFSETS = "/v1/topics/orders/partitions/0/offsets"
NDJSON = {"Accept": "application/x-ndjson"}
RAW = {"Accept": "application/octet-stream"}


def _lines(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


# --- the end of the remote log ----------------------------------------------------------------


def test_json_at_the_log_end_is_an_empty_page_saying_so(client: TestClient) -> None:
    r = client.get(URL, params={"offset": LOG_END})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["records"] == []
    assert (body["next_offset"], body["log_end_offset"]) == (LOG_END, LOG_END)
    assert body["end_of_remote_log"] is True


def test_a_page_that_reaches_the_end_says_so(client: TestClient) -> None:
    assert client.get(URL, params={"offset": LOG_END - 1}).json()["end_of_remote_log"] is True
    assert client.get(URL, params={"offset": 0}).json()["end_of_remote_log"] is False


def test_ndjson_at_the_log_end_is_one_end_line(client: TestClient) -> None:
    r = client.get(URL, params={"offset": LOG_END}, headers=NDJSON)
    assert r.status_code == 200, r.text
    assert _lines(r.text) == [
        {
            "next_offset": LOG_END,
            "log_start_offset": 0,
            "log_end_offset": LOG_END,
            "last_stable_offset": None,
            "end_of_remote_log": True,
        }
    ]


def test_raw_at_the_log_end_is_an_empty_body_with_the_header(client: TestClient) -> None:
    r = client.get(URL, params={"offset": LOG_END}, headers=RAW)
    assert r.status_code == 200, r.text
    assert r.content == b""
    assert r.headers["x-next-offset"] == str(LOG_END)
    assert r.headers["x-end-of-remote-log"] == "true"
    assert "x-first-offset" not in r.headers
    more = client.get(URL, params={"offset": 0, "max_bytes": 100}, headers=RAW)
    assert more.headers["x-end-of-remote-log"] == "false"


@pytest.mark.parametrize("headers", [{}, NDJSON, RAW])
def test_past_the_log_end_is_still_416(client: TestClient, headers: dict[str, str]) -> None:
    r = client.get(URL, params={"offset": LOG_END + 1}, headers=headers)
    assert r.status_code == 416
    assert r.json()["error_code"] == "offset_out_of_range"


def test_following_next_offset_ends_without_an_error(client: TestClient) -> None:
    offset, seen = 0, []
    while True:
        r = client.get(URL, params={"offset": offset, "max_bytes": 300})
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [rec["offset"] for rec in page["records"]]
        offset = page["next_offset"]
        if page["end_of_remote_log"]:
            break
    assert seen == list(range(LOG_END))


# --- readiness --------------------------------------------------------------------------------

DATA_ROUTES = [
    "/v1/topics",
    "/v1/topics/orders/partitions",
    "/v1/topics/orders/partitions/0",
    "/v1/topics/orders/partitions/0/segments",
    f"{OFFSETS}?timestamp=earliest",
    f"{URL}?offset=0",
]


@pytest.mark.parametrize("route", DATA_ROUTES)
def test_data_routes_are_not_ready_while_readyz_is_not(
    client: TestClient, fake: FakeService, route: str
) -> None:
    """Whatever the service would answer (the fake lists topics even when not ready)."""
    fake.is_ready = False
    fake.not_ready_reason = "the first bucket scan failed: AccessDenied"
    assert client.get("/readyz").status_code == 503
    r = client.get(route)
    assert r.status_code == 503, r.text
    body = r.json()
    assert (body["error_code"], body["retriable"]) == ("not_ready", True)
    assert "AccessDenied" in body["message"]
    assert r.headers["retry-after"] == "1"
    assert fake.calls == []  # refused before the service is asked
    fake.is_ready = True
    assert client.get(route).status_code == 200


# --- ListOffsets and isolation_level like Kafka -----------------------------------------------


@pytest.mark.parametrize(
    ("timestamp", "spec"),
    [
        ("-1", "latest"),
        ("-2", "earliest"),
        ("-3", "max_timestamp"),
        ("LATEST", "latest"),
        ("Earliest", "earliest"),
        ("MAX_TIMESTAMP", "max_timestamp"),
    ],
)
def test_offsets_take_kafkas_sentinels_and_any_case(
    client: TestClient, fake: FakeService, timestamp: str, spec: str
) -> None:
    r = client.get(OFFSETS, params={"timestamp": timestamp})
    assert r.status_code == 200, r.text
    assert fake.called("list_offsets")[0]["spec"] == spec


@pytest.mark.parametrize("timestamp", ["-4", "-5", "-6"])
def test_offsets_refuse_sentinels_a_remote_tier_cannot_answer(
    client: TestClient, timestamp: str
) -> None:
    r = client.get(OFFSETS, params={"timestamp": timestamp})
    assert r.status_code == 400
    assert r.json()["parameter"] == "timestamp"


@pytest.mark.parametrize("level", ["READ_COMMITTED", "Read_Committed", "read_committed"])
def test_isolation_level_in_any_case(client: TestClient, fake: FakeService, level: str) -> None:
    r = client.get(URL, params={"offset": 0, "isolation_level": level})
    assert r.status_code == 200, r.text
    assert fake.called("fetch")[0]["isolation"] is IsolationLevel.READ_COMMITTED


# --- key_format, value_format, header_format --------------------------------------------------


def test_formats_default_to_base64(client: TestClient) -> None:
    rec = client.get(URL, params={"offset": 8}).json()["records"][0]
    assert rec["key"] == base64.b64encode(b"k8").decode()
    assert rec["value"] == base64.b64encode(b"v8").decode()


@pytest.mark.parametrize("accept", [{}, NDJSON])
def test_string_and_hex(client: TestClient, accept: dict[str, str]) -> None:
    params = {"offset": 8, "max_bytes": 100, "key_format": "string", "value_format": "hex",
              "header_format": "hex"}  # fmt: skip
    r = client.get(URL, params=params, headers=accept)
    assert r.status_code == 200, r.text
    rec = r.json()["records"][0] if not accept else _lines(r.text)[0]
    assert (rec["key"], rec["value"]) == ("k8", b"v8".hex())
    assert rec["headers"] == [{"key": "h", "value": "00ff"}, {"key": "n", "value": None}]


@pytest.mark.parametrize("accept", [{}, NDJSON])
def test_json_values_are_embedded_verbatim(
    client: TestClient, fake: FakeService, accept: dict[str, str]
) -> None:
    big = b'{"n": 123456789012345678901234567890,\r\n "f": 1e400, "s": "\\u00e9\\n"}'
    fake.values = dict.fromkeys(range(8, 20), big)
    params = {"offset": 8, "max_bytes": 100, "value_format": "json", "header_format": "json"}
    r = client.get(URL, params=params, headers=accept)
    assert r.status_code == 200, r.text
    assert b'"value":{"n": 123456789012345678901234567890,   "f": 1e400' in r.content
    assert b"\r" not in r.content
    if accept:  # one record a line
        assert [rec["offset"] for rec in _lines(r.text)[:-1]] == [8, 9]
    else:
        assert b"\n" not in r.content
    rec = r.json()["records"][0] if not accept else _lines(r.text)[0]
    assert rec["value"]["s"] == "\u00e9\n"


@pytest.mark.parametrize(
    ("params", "value", "parameter"),
    [
        ({"value_format": "string"}, b"ok\xff", "value_format"),
        ({"value_format": "json"}, b"{", "value_format"),
        ({"value_format": "json"}, b"NaN", "value_format"),
        ({"value_format": "json"}, b"1 2", "value_format"),
        ({"value_format": "json"}, b"", "value_format"),
        ({"header_format": "string"}, b"\xc3(", "header_format"),
        ({"key_format": "json"}, None, "key_format"),  # the keys are k<n>: not JSON
    ],
)
def test_a_record_not_valid_in_its_format_is_422_naming_it(
    client: TestClient,
    fake: FakeService,
    params: dict[str, str],
    value: bytes | None,
    parameter: str,
) -> None:
    bad = 12 if value is not None else 8
    if value is not None:  # valid as UTF-8 and as JSON before it
        fake.values = {**dict.fromkeys(range(8, 12), b'"ok"'), 12: value}
    r = client.get(URL, params={"offset": 8, **params})
    assert r.status_code == 422, r.text
    body = r.json()
    assert (body["error_code"], body["parameter"], body["offset"]) == (
        "invalid_format", parameter, bad
    )  # fmt: skip
    assert body["retriable"] is False
    assert f"offset {bad}" in body["message"]


def test_ndjson_ends_at_a_record_not_valid_in_its_format(
    client: TestClient, fake: FakeService
) -> None:
    """The records before it, then the error line whose next_offset is the record's offset:
    never a skipped or mangled record."""
    fake.values = {22: b"\xff"}  # on the second page
    r = client.get(URL, params={"offset": 0, "value_format": "string"}, headers=NDJSON)
    assert r.status_code == 200
    *records, last = _lines(r.text)
    assert [rec["offset"] for rec in records] == list(range(22))
    assert (last["error_code"], last["offset"], last["next_offset"]) == ("invalid_format", 22, 22)


def test_ndjson_whose_first_record_is_not_valid_is_a_422(
    client: TestClient, fake: FakeService
) -> None:
    fake.values = {8: b"\xff"}
    r = client.get(URL, params={"offset": 8, "value_format": "string"}, headers=NDJSON)
    assert r.status_code == 422
    assert r.json()["offset"] == 8


def test_ndjson_first_page_cut_at_a_record_not_valid(client: TestClient, fake: FakeService) -> None:
    fake.values = {3: b"\xff"}
    r = client.get(URL, params={"offset": 0, "value_format": "string"}, headers=NDJSON)
    assert r.status_code == 200
    *records, last = _lines(r.text)
    assert [rec["offset"] for rec in records] == [0, 1, 2]
    assert (last["error_code"], last["next_offset"]) == ("invalid_format", 3)


def test_an_unknown_format_is_a_400(client: TestClient) -> None:
    r = client.get(URL, params={"offset": 0, "value_format": "xml"})
    assert r.status_code == 400
    assert r.json()["parameter"] == "value_format"


def test_formats_do_not_touch_raw_batches(client: TestClient) -> None:
    plain = client.get(URL, params={"offset": 0}, headers=RAW)
    asked = client.get(URL, params={"offset": 0, "value_format": "json"}, headers=RAW)
    assert asked.status_code == 200 and asked.content == plain.content
