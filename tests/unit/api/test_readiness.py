"""``/readyz`` and the data routes before the catalog is loaded, and a degraded catalog: with
the fake service for the body shapes, and with the real service over a filesystem store."""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from fastapi.testclient import TestClient

from gateway.api import create_app
from gateway.config import Settings
from gateway.demo import DemoBucket
from gateway.kafka.uuids import encode_uuid
from gateway.metadata.follow import FollowStatus
from gateway.remote.keys import ObjectKey, Suffix
from gateway.service.core import GatewayService
from gateway.service.open import open_service
from gateway.service.types import UnreadableManifest
from tests.fakes.orders import TOPIC, TOPIC_ID
from tests.fakes.service import FakeService
from tests.fixtures.demo import copy_demo_bucket

OTHER_ID = uuid.UUID(int=0x0DD)
DATA_ROUTES = [
    "/v1/topics",
    "/v1/topics/orders/partitions",
    "/v1/topics/orders/partitions/0",
    "/v1/topics/orders/partitions/0/segments",
    "/v1/topics/orders/partitions/0/offsets?timestamp=earliest",
    "/v1/topics/orders/partitions/0/records?offset=0",
]


def test_readyz_names_the_reason_it_is_not_ready(client: TestClient, fake: FakeService) -> None:
    fake.is_ready = False
    fake.not_ready_reason = "the first bucket scan failed: ConfigurationError: AccessDenied"
    r = client.get("/readyz")
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    body = r.json()
    assert (body["error_code"], body["retriable"]) == ("not_ready", True)
    assert "AccessDenied" in body["message"]


def test_a_degraded_catalog_is_200_with_the_partitions_and_keys(
    client: TestClient, fake: FakeService
) -> None:
    def bad(topic_id: uuid.UUID, partition: int, start: int) -> UnreadableManifest:
        key = f"t/{TOPIC}-{encode_uuid(topic_id)}/{partition}/{start:020d}-x.rsm-manifest"
        return UnreadableManifest(TOPIC, topic_id, partition, start, key, "CorruptManifestError")

    fake.unreadable = (bad(TOPIC_ID, 1, 500), bad(TOPIC_ID, 0, 70), bad(TOPIC_ID, 1, 200))
    r = client.get("/readyz")
    assert r.status_code == 200  # one bad object does not take the instance out of service
    body = r.json()
    assert body["status"] == "degraded"
    assert [(p["topic"], p["topic_id"], p["partition"]) for p in body["degraded"]] == [
        (TOPIC, encode_uuid(TOPIC_ID), 0),
        (TOPIC, encode_uuid(TOPIC_ID), 1),
    ]
    assert [u["start_offset"] for u in body["degraded"][1]["unreadable"]] == [200, 500]
    first = body["degraded"][0]["unreadable"][0]
    assert first == {
        "start_offset": 70,
        "key": f"t/{TOPIC}-{encode_uuid(TOPIC_ID)}/0/{70:020d}-x.rsm-manifest",
        "reason": "CorruptManifestError",
    }
    fake.unreadable = ()
    assert client.get("/readyz").json() == {"status": "ready"}


# --- the real service ------------------------------------------------------------------------


class _Real:
    """A client of the app with the real service, and that service (to wait on)."""

    def __init__(self, client: TestClient, service: GatewayService) -> None:
        self.client = client
        self.service = service

    def wait_ready(self) -> None:
        assert self.client.portal is not None
        self.client.portal.call(self.service.wait_ready)


@contextlib.contextmanager
def _real(demo: DemoBucket, root: Path) -> Iterator[_Real]:
    """The app with the real service (``open_service``) over the filesystem store ``root``."""
    settings = Settings(
        store=f"file://{root}",
        key_prefix=demo.key_prefix,
        key_pairs=[demo.key_pair_spec],
        rescan_interval_s=0,
    )
    opened: list[GatewayService] = []

    @contextlib.asynccontextmanager
    async def capture(s: Settings) -> AsyncIterator[GatewayService]:
        async with open_service(s) as service:
            opened.append(service)
            yield service

    with TestClient(create_app(settings, capture), base_url="http://localhost") as c:
        yield _Real(c, opened[0])


def test_the_real_service_is_not_ready_while_the_store_cannot_be_listed(
    demo: DemoBucket, tmp_path: Path
) -> None:
    """Started on a store root that is not there, the gateway is not ready with an empty
    catalog: /readyz is 503 with the reason and every data route 503 not_ready (not 404)."""
    root = tmp_path / "mnt" / "bucket"
    with _real(demo, root) as real:
        client = real.client
        for _ in range(3000):
            r = client.get("/readyz")
            if "not a directory" in r.json().get("message", ""):
                break
            time.sleep(0.02)
        assert r.status_code == 503 and r.json()["error_code"] == "not_ready", r.text
        for route in DATA_ROUTES:
            got = client.get(route)
            assert got.status_code == 503, (route, got.text)
            assert got.json()["error_code"] == "not_ready" and got.json()["retriable"] is True
            assert "retry-after" in got.headers
        shutil.copytree(demo.root / "bucket", root)  # the store is back: the scan is retried
        real.wait_ready()
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.get("/v1/topics/orders/partitions/0/records?offset=0").status_code == 200


def test_the_real_service_reports_unreadable_manifests(demo: DemoBucket, tmp_path: Path) -> None:
    root = copy_demo_bucket(demo, tmp_path)
    ghost = ObjectKey(demo.key_prefix, "ghost", OTHER_ID, 2, 40, uuid.UUID(int=9), Suffix.MANIFEST)
    path = root.joinpath(*ghost.key.split("/"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"[]")
    with _real(demo, root) as real:
        real.wait_ready()
        client = real.client
        body = client.get("/readyz").json()
        assert body["status"] == "degraded"
        (part,) = body["degraded"]
        assert (part["topic"], part["topic_id"], part["partition"]) == (
            "ghost",
            encode_uuid(OTHER_ID),
            2,
        )
        assert [(u["start_offset"], u["key"]) for u in part["unreadable"]] == [(40, ghost.key)]
        r = client.get("/v1/topics/ghost/partitions/2/records?offset=40")
        assert r.status_code == 502 and r.json()["error_code"] == "corrupt_manifest"
        assert ghost.key in r.json()["message"]
        topics = {t["name"]: t["topic_ids"] for t in client.get("/v1/topics").json()["topics"]}
        assert topics["ghost"] == [encode_uuid(OTHER_ID)]
        metrics = client.get("/metrics").text
        assert 'tiered_gateway_unreadable_manifests{partition="2",topic="ghost"} 1.0' in metrics
        assert "tiered_gateway_rescans_aborted_total 0" in metrics


def test_readyz_shows_the_followed_metadata_topic(client: TestClient, fake: FakeService) -> None:
    """A catalog following ``__remote_log_metadata``: its state in the body (the last error
    only to an operator: here, loopback with no authentication); a metadata partition stopped
    on a record that does not decode makes the catalog degraded."""
    fake.follow = FollowStatus(
        partitions=(0, 1),
        positions={0: 10, 1: 4},
        end_offsets={0: 12, 1: 4},
        caught_up=True,
        connected=False,
        records=14,
        errors=2,
        last_error="KafkaConnectionError: the broker went away",
    )
    body = client.get("/readyz").json()
    assert body["status"] == "ready"
    assert body["metadata"] == {
        "topic": "__remote_log_metadata",
        "connected": False,
        "caught_up": True,
        "lag": 2,
        "records": 14,
        "errors": 2,
        "failed_partitions": [],
        "last_error": "KafkaConnectionError: the broker went away",
    }
    fake.follow.failed[1] = "offset 4: a record that does not decode"
    body = client.get("/readyz").json()
    assert (body["status"], body["metadata"]["failed_partitions"], body["metadata"]["lag"]) == (
        "degraded",
        [1],
        2,
    )


def test_not_ready_while_following_says_why(client: TestClient, fake: FakeService) -> None:
    fake.is_ready = False
    fake.not_ready_reason = "following __remote_log_metadata at k:9092: NoBrokersAvailable"
    r = client.get("/readyz")
    assert r.status_code == 503 and "NoBrokersAvailable" in r.json()["message"]
