"""The records route's direct handler (``gateway.api.direct``) against FastAPI's own
dependency solving for the same signature: the same status and body for every request of a
set that covers each check and each order of failures (not ready, bad names, credentials,
ACLs, bad path and query values), with authentication off and on."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from gateway.api import create_app, direct, params, records
from gateway.api.auth import authenticate, authorise_read
from gateway.config import Settings
from gateway.security.apikeys import new_key
from tests.fakes.orders import TOPIC, orders

ACL = """\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:
 \t(principal=User:reader, host=*, operation=READ, permissionType=ALLOW)
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=other, patternType=LITERAL)`:
 \t(principal=User:reader, host=*, operation=DESCRIBE, permissionType=ALLOW)
"""
PATHS = [
    f"/v1/topics/{TOPIC}/partitions/0/records",
    f"/v1/topics/{TOPIC}/partitions/-1/records",
    f"/v1/topics/{TOPIC}/partitions/abc/records",
    f"/v1/topics/{TOPIC}/partitions/2147483648/records",
    f"/v1/topics/{TOPIC}/partitions/7/records",
    "/v1/topics/other/partitions/0/records",
    "/v1/topics/nosuch/partitions/0/records",
    "/v1/topics/../partitions/0/records",
    "/v1/topics/a%20b/partitions/0/records",
    f"/v1/topics/{'x' * 250}/partitions/0/records",
]
QUERIES = [
    "offset=0",
    "offset=3&max_bytes=100&isolation_level=READ_COMMITTED&key_format=string",
    "",
    "offset=-1",
    "offset=abc&max_bytes=0",
    "offset=0&offset=x",
    "offset=x&offset=1",
    "offset=0&isolation_level=maybe&value_format=yaml&timeout_ms=0",
    "offset=0&max_bytes=99999999999999",
    "offset=0&timeout_ms=999999999",
    "offset=0&unknown=1",
    "offset=",
]


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    made = {p: new_key() for p in ("User:reader", "User:other")}
    (tmp_path / "keys").write_text("".join(f"{p} {line}\n" for p, (_, line) in made.items()))
    return {p: key for p, (key, _) in made.items()}


def _reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records routes built from now on are FastAPI's own (APIRoute)."""
    monkeypatch.setattr(records, "direct_route", lambda *_: APIRoute)


def _answers(app: FastAPI, headers: list[dict[str, str]]) -> list[tuple[int, str]]:
    out = []
    with TestClient(app, base_url="http://localhost") as client:
        for head in headers:
            for path in PATHS:
                for query in QUERIES:
                    r = client.get(f"{path}?{query}", headers=head)
                    out.append((r.status_code, r.text))
    return out


@pytest.mark.parametrize("ready", [True, False])
def test_open_gateway_answers_as_fastapi_does(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, ready: bool
) -> None:
    def app() -> FastAPI:
        fake = orders()
        fake.is_ready = ready
        return create_app(settings, fake.factory())

    direct_answers = _answers(app(), [{}])
    _reference(monkeypatch)
    reference = _answers(app(), [{}])
    assert direct_answers == reference
    statuses = {s for s, _ in reference}
    assert statuses >= ({200, 400, 404} if ready else {503})


def test_secured_gateway_answers_as_fastapi_does(
    tmp_path: Path, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acl").write_text(ACL.format(topic=TOPIC))
    settings = Settings(
        store="file:///x", api_keys_file=tmp_path / "keys", acl_file=tmp_path / "acl"
    )
    heads = [
        {},
        {"X-API-Key": keys["User:reader"]},
        {"X-API-Key": keys["User:other"]},
        {"X-API-Key": "not-a-key"},
    ]
    direct_answers = _answers(create_app(settings, orders().factory()), heads)
    _reference(monkeypatch)
    reference = _answers(create_app(settings, orders().factory()), heads)
    assert direct_answers == reference
    assert {s for s, _ in reference} >= {200, 400, 401, 403}


def test_the_signature_is_what_the_direct_handler_checks() -> None:
    """The endpoint's dependencies and parameters, which the OpenAPI document is made from,
    are the ones ``direct`` checks, in its order."""
    (route,) = [r for r in records.router().routes if getattr(r, "name", "") == "get_records"]
    assert isinstance(route, APIRoute) and type(route).__name__ == "DirectRoute"
    dependant = route.dependant
    assert [d.call for d in dependant.dependencies] == [params.ready_context, authorise_read]
    read = dependant.dependencies[1]
    assert [d.call for d in read.dependencies] == [params._topic, authenticate]
    assert [p.name for p in dependant.path_params] == ["partition"]
    assert [p.name for p in dependant.query_params] == ["query"]
    assert dependant.query_params[0].field_info.annotation is records.RecordsQuery
    assert "check_topic" in inspect.getsource(params._topic)
    assert direct.PARTITION.json_schema() == {"maximum": 2**31 - 1, "minimum": 0, "type": "integer"}
