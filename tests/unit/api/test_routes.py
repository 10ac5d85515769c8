"""Every non-record route against the fake service: health, metrics, topics, partitions,
segments, ListOffsets; the lifespan opens and closes the service."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gateway.kafka.uuids import encode_uuid
from tests.fakes.orders import LOG_END, OLD_TOPIC_ID, TOPIC_ID
from tests.fakes.service import FakeService


def test_lifespan_opens_and_closes_the_service(app: FastAPI, fake: FakeService) -> None:
    assert (fake.opened, fake.closed) == (0, 0)
    with TestClient(app, base_url="http://localhost") as c:
        assert (fake.opened, fake.closed) == (1, 0)
        assert c.get("/healthz").json() == {"status": "ok"}
    assert (fake.opened, fake.closed) == (1, 1)


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_readyz_is_503_until_the_service_is_ready(client: TestClient, fake: FakeService) -> None:
    fake.is_ready = False
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    body = r.json()
    assert body["error_code"] == "not_ready"
    assert body["retriable"] is True
    fake.is_ready = True
    r = client.get("/readyz")
    assert (r.status_code, r.json()) == (200, {"status": "ready"})


def test_metrics_has_latency_by_route_template_and_the_service_metrics(
    client: TestClient,
) -> None:
    client.get("/v1/topics/orders/partitions/0/records", params={"offset": 3})
    client.get("/v1/topics/orders/partitions/9")
    client.get("/no/such/path")
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    name = "tiered_gateway_http_request_duration_seconds"
    assert (
        f'{name}_count{{method="GET",route="/v1/topics/{{topic}}/partitions/{{partition}}/records",'
        'status="200"} 1.0' in text
    )
    assert (
        f'{name}_count{{method="GET",route="/v1/topics/{{topic}}/partitions/{{partition}}",'
        'status="404"} 1.0' in text
    )
    assert f'{name}_count{{method="GET",route="<unmatched>",status="404"}} 1.0' in text
    assert 'route="/v1/topics/orders' not in text  # never the raw path
    assert "\ntiered_gateway_fake_gets_total 7.0\n" in text  # the service's collector


def test_topics(client: TestClient) -> None:
    r = client.get("/v1/topics")
    assert r.status_code == 200
    assert r.json() == {
        "topics": [
            {"name": "audit", "topic_ids": [encode_uuid(OLD_TOPIC_ID)]},
            {"name": "orders", "topic_ids": [encode_uuid(TOPIC_ID), encode_uuid(OLD_TOPIC_ID)]},
        ]
    }


def test_partitions_sorted_by_number(client: TestClient) -> None:
    r = client.get("/v1/topics/orders/partitions")
    assert r.status_code == 200
    body = r.json()
    assert body["topic"] == "orders"
    assert [p["partition"] for p in body["partitions"]] == [0, 1]
    assert body["partitions"][1]["remote_log_end_offset"] == 0


def test_partition(client: TestClient) -> None:
    r = client.get("/v1/topics/orders/partitions/0")
    assert r.status_code == 200
    assert r.json() == {
        "topic": "orders",
        "topic_id": encode_uuid(TOPIC_ID),
        "partition": 0,
        "remote_log_start_offset": 0,
        "remote_log_end_offset": LOG_END,
        "size": 2000,
        "segment_count": 2,
        "leader_epochs": [{"epoch": 0, "start_offset": 0}, {"epoch": 2, "start_offset": 50}],
    }


def test_segments(client: TestClient) -> None:
    r = client.get("/v1/topics/orders/partitions/0/segments")
    assert r.status_code == 200
    body = r.json()
    assert (body["topic"], body["partition"]) == ("orders", 0)
    assert body["segments"][1] == {
        "segment_id": "AAAAAAAAAAAAAAAAAAAAAg",
        "start_offset": 50,
        "end_offset": 99,
        "state": "COPY_SEGMENT_FINISHED",
        "size": 1000,
        "max_timestamp_ms": 6,
        "event_timestamp_ms": 10,
        "leader_epochs": [{"epoch": 2, "start_offset": 50}],
        "txn_index_empty": False,
        "displaced": False,
        "displaced_by": None,
    }


@pytest.mark.parametrize(
    ("timestamp", "spec", "expected"),
    [
        ("earliest", "earliest", {"offset": 0, "timestamp": -1, "leader_epoch": 0}),
        ("latest", "latest", {"offset": LOG_END, "timestamp": -1, "leader_epoch": 2}),
        (
            "max_timestamp",
            "max_timestamp",
            {"offset": 99, "timestamp": 1_700_000_000_099, "leader_epoch": 2},
        ),
        (
            "1700000000042",
            1_700_000_000_042,
            {"offset": 42, "timestamp": 1_700_000_000_042, "leader_epoch": 0},
        ),
        ("1800000000000", 1_800_000_000_000, {"offset": -1, "timestamp": -1, "leader_epoch": None}),
        ("0", 0, {"offset": 0, "timestamp": 1_700_000_000_000, "leader_epoch": 0}),
    ],
)
def test_offsets(
    client: TestClient, fake: FakeService, timestamp: str, spec: object, expected: object
) -> None:
    r = client.get("/v1/topics/orders/partitions/0/offsets", params={"timestamp": timestamp})
    assert r.status_code == 200
    assert r.json() == expected
    (call,) = fake.called("list_offsets")
    assert call["spec"] == spec


@pytest.mark.parametrize("timestamp", ["-7", "abc", "1_000", " 5", "+5", "1.5", "", "9" * 20])
def test_offsets_rejects_bad_timestamps(
    client: TestClient, fake: FakeService, timestamp: str
) -> None:
    r = client.get("/v1/topics/orders/partitions/0/offsets", params={"timestamp": timestamp})
    assert r.status_code == 400
    body = r.json()
    assert (body["error_code"], body["parameter"]) == ("invalid_request", "timestamp")
    assert not fake.called("list_offsets")


def test_offsets_needs_a_timestamp(client: TestClient) -> None:
    r = client.get("/v1/topics/orders/partitions/0/offsets")
    assert r.status_code == 400
    assert r.json()["parameter"] == "timestamp"


def test_offsets_passes_the_request_deadline(client: TestClient, fake: FakeService) -> None:
    client.get(
        "/v1/topics/orders/partitions/0/offsets",
        params={"timestamp": "latest", "timeout_ms": 5000},
    )
    (call,) = fake.called("list_offsets")
    assert 4.0 < call["deadline"].remaining() <= 5.0
