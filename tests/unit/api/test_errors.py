"""One mapping from exceptions to HTTP errors: every GatewayError class, validation errors,
routing errors, unexpected exceptions; topic names checked before the service is called."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import gateway.errors
from gateway.api.errors import HttpRoutingError
from gateway.api.statuses import http_status
from gateway.errors import (
    CorruptManifestError,
    GatewayError,
    InvalidRequestError,
    NotAcceptableError,
    NotReadyError,
    OffsetOutOfRangeError,
    RateLimitedError,
    TransactionPendingError,
)
from tests.fakes.service import FakeService


def _all_error_classes() -> list[type[GatewayError]]:
    found: list[type[GatewayError]] = []
    pending: list[type[GatewayError]] = [GatewayError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return sorted(
        (c for c in found if c.__module__ == gateway.errors.__name__), key=lambda c: c.__name__
    )


def _instance(cls: type[GatewayError]) -> GatewayError:
    if issubclass(cls, OffsetOutOfRangeError):
        return cls("offset 500 is outside [10, 100)", 10, 100)
    if issubclass(cls, InvalidRequestError):
        return cls("offset: must not be negative", "offset")
    if issubclass(cls, RateLimitedError):
        return cls("User:alice is over 10 requests per second", 0.25)
    if issubclass(cls, TransactionPendingError):
        return cls(
            "the transaction starting at offset 40 has no marker",
            log_start_offset=10,
            log_end_offset=100,
            last_stable_offset=40,
        )
    return cls(f"{cls.__name__} on demo/orders-abc/00000000000000000000-xyz.log")


ERRORS = _all_error_classes()


def test_every_error_class_is_covered() -> None:
    assert len(ERRORS) >= 20
    assert {c.__name__ for c in ERRORS} >= {
        "StorageUnavailableError",
        "DeadlineExceededError",
        "CorruptDataError",
        "UnknownTopicOrPartitionError",
    }


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_error_class_maps_to_its_status_and_body(
    client: TestClient, fake: FakeService, cls: type[GatewayError]
) -> None:
    exc = _instance(cls)
    fake.fail["partition"] = exc
    r = client.get("/v1/topics/orders/partitions/0")
    assert r.status_code == http_status(cls)
    body = r.json()
    assert body["error_code"] == cls.code
    assert body["message"] == str(exc)
    assert body["retriable"] is cls.retriable
    assert ("retry-after" in r.headers) is cls.retriable
    if cls.retriable:
        assert r.headers["retry-after"] == "1"
    if issubclass(cls, OffsetOutOfRangeError):
        assert (body["log_start_offset"], body["log_end_offset"]) == (10, 100)
    if issubclass(cls, TransactionPendingError):
        bounds = (body["log_start_offset"], body["log_end_offset"], body["last_stable_offset"])
        assert bounds == (10, 100, 40)
    else:
        assert "last_stable_offset" not in body
    if issubclass(cls, InvalidRequestError):
        assert body["parameter"] == "offset"
    else:
        assert "parameter" not in body


@pytest.mark.parametrize(
    ("cls", "status", "retriable"),
    [
        (gateway.errors.StorageUnavailableError, 503, True),
        (gateway.errors.DeadlineExceededError, 504, True),
        (gateway.errors.CorruptDataError, 502, False),
        (gateway.errors.UnknownTopicOrPartitionError, 404, False),
        (gateway.errors.OffsetOutOfRangeError, 416, False),
        (gateway.errors.InvalidRequestError, 400, False),
    ],
)
def test_the_statuses_the_issue_asks_for(
    cls: type[GatewayError], status: int, retriable: bool
) -> None:
    assert (http_status(cls), cls.retriable) == (status, retriable)


def test_corrupt_data_message_names_the_object(client: TestClient, fake: FakeService) -> None:
    fake.fail["segments"] = CorruptManifestError(
        "demo/t-x/0/00000000000000000000-a.rsm-manifest: x"
    )
    r = client.get("/v1/topics/orders/partitions/0/segments")
    assert r.status_code == 502
    assert r.json()["message"].startswith("demo/t-x/0/00000000000000000000-a.rsm-manifest")


def test_api_errors_are_gateway_errors() -> None:
    assert issubclass(NotAcceptableError, GatewayError) and http_status(NotAcceptableError) == 406
    assert issubclass(NotReadyError, GatewayError) and NotReadyError.retriable
    assert HttpRoutingError(404, "Not Found", None).code == "not_found"


def test_unexpected_exception_is_a_generic_500_and_logged(
    client: TestClient, fake: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail["topics"] = ZeroDivisionError("internal detail 1234")
    with caplog.at_level(logging.ERROR):
        r = client.get("/v1/topics")
    assert r.status_code == 500
    body = r.json()
    assert body["error_code"] == "internal_error"
    assert body["retriable"] is False
    assert "1234" not in r.text
    assert "internal detail 1234" in caplog.text
    assert "Traceback" in caplog.text
    del fake.fail["topics"]
    assert client.get("/v1/topics").status_code == 200  # still serving


def test_unexpected_exception_without_the_test_client_reraising(
    app: FastAPI, fake: FakeService
) -> None:
    fake.fail["topics"] = RuntimeError("boom")
    with TestClient(app, raise_server_exceptions=True, base_url="http://localhost") as c:
        assert c.get("/v1/topics").status_code == 500  # handled, nothing re-raised


def test_unknown_route_is_404_with_the_error_body(client: TestClient) -> None:
    r = client.get("/v1/nope")
    assert r.status_code == 404
    assert r.json() == {"error_code": "not_found", "message": "Not Found", "retriable": False}


def test_wrong_method_is_405_with_allow(client: TestClient) -> None:
    r = client.post("/v1/topics")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET"
    assert r.json()["error_code"] == "method_not_allowed"


def test_validation_errors_are_reshaped(client: TestClient) -> None:
    r = client.get("/v1/topics/orders/partitions/-1")
    assert r.status_code == 400
    body = r.json()
    assert body["error_code"] == "invalid_request"
    assert body["parameter"] == "partition"
    assert body["retriable"] is False
    assert body["message"].startswith("partition: ")
    r = client.get("/v1/topics/orders/partitions/zero")
    assert r.json()["parameter"] == "partition"
    r = client.get("/v1/topics/orders/partitions/2147483648")
    assert r.json()["parameter"] == "partition"


# --- topic names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_topic",
    ["%2E%2E", "%2E", "bad%20name", "a" * 250, "caf%C3%A9", "a%3Ab", "a%00b", "a*b"],
)
def test_illegal_topic_names_never_reach_the_service(
    client: TestClient, fake: FakeService, raw_topic: str
) -> None:
    for suffix in ("/partitions", "/partitions/0", "/partitions/0/records?offset=0"):
        r = client.get(f"/v1/topics/{raw_topic}{suffix}")
        assert r.status_code == 400, (raw_topic, suffix, r.text)
        body = r.json()
        assert (body["error_code"], body["parameter"]) == ("invalid_request", "topic")
    assert fake.calls == []


@pytest.mark.parametrize("raw_topic", ["a/b", "a%2Fb", "..%2Fx"])
def test_a_slash_cannot_even_route(client: TestClient, fake: FakeService, raw_topic: str) -> None:
    r = client.get(f"/v1/topics/{raw_topic}/partitions/0")
    assert r.status_code == 404
    assert r.json()["error_code"] == "not_found"
    assert fake.calls == []


def test_dot_dot_in_the_path_does_not_reach_the_service(
    client: TestClient, fake: FakeService
) -> None:
    r = client.get("/v1/topics/../partitions/0")
    assert r.status_code in (400, 404)
    assert fake.calls == []


@pytest.mark.parametrize("topic", ["a" * 249, "x", "a.b_c-D9", "...", "_"])
def test_legal_topic_names_reach_the_service(
    client: TestClient, fake: FakeService, topic: str
) -> None:
    r = client.get(f"/v1/topics/{topic}/partitions/0")
    assert r.status_code == 404
    assert r.json()["error_code"] == "unknown_topic_or_partition"
    assert fake.called("partition") == [{"topic": topic, "partition": 0}]
