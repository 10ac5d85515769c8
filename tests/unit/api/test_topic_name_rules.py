"""The API checks topic names with the core's rules (gateway.kafka.topic), newline included."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.fakes.service import FakeService


@pytest.mark.parametrize("raw_topic", ["orders%0A", "orders%0D%0A", "%0A"])
def test_a_trailing_newline_is_not_a_legal_topic_name(
    client: TestClient, fake: FakeService, raw_topic: str
) -> None:
    """Before: the API's own pattern ``^...$`` let ``orders\\n`` through (``$`` matches before a
    final newline), so the service was asked about a topic Kafka cannot have."""
    r = client.get(f"/v1/topics/{raw_topic}/partitions/0")
    assert r.status_code == 400, r.text
    assert (r.json()["error_code"], r.json()["parameter"]) == ("invalid_request", "topic")
    assert fake.calls == []
