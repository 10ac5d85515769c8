"""``/readyz`` and the data routes before the catalog is loaded, and a degraded catalog: with
the fake service for the body shapes, and with the real service over a filesystem store."""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.api import create_app
from gateway.config import Settings
from gateway.demo import DemoBucket, write_demo_bucket
from gateway.remote.keys import ObjectKey, Suffix, encode_uuid
from gateway.service.types import UnreadableManifest
from tests.unit.api.fake import TOPIC, TOPIC_ID, FakeService

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


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoBucket:
    return write_demo_bucket(tmp_path_factory.mktemp("demo") / "bucket-root")


@contextlib.contextmanager
def _real(demo: DemoBucket, root: Path) -> Iterator[TestClient]:
    """The app with the real service (``open_service``) over the filesystem store ``root``."""
    settings = Settings(
        store=f"file://{root}",
        key_prefix=demo.key_prefix,
        key_pairs=[demo.key_pair_spec],
        rescan_interval_s=0,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _wait(client: TestClient, status: int) -> None:
    for _ in range(3000):  # up to a minute: only a hang fails
        if client.get("/readyz").status_code == status:
            return
        time.sleep(0.02)
    raise AssertionError(f"/readyz never answered {status}")


def test_the_real_service_is_not_ready_while_the_store_cannot_be_listed(
    demo: DemoBucket, tmp_path: Path
) -> None:
    """Started on a store root that is not there, the gateway is not ready with an empty
    catalog: /readyz is 503 with the reason and every data route 503 not_ready (not 404)."""
    root = tmp_path / "mnt" / "bucket"
    with _real(demo, root) as client:
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
        _wait(client, 200)
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.get("/v1/topics/orders/partitions/0/records?offset=0").status_code == 200


def test_the_real_service_reports_unreadable_manifests(demo: DemoBucket, tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    shutil.copytree(demo.root / "bucket", root)
    ghost = ObjectKey(demo.key_prefix, "ghost", OTHER_ID, 2, 40, uuid.UUID(int=9), Suffix.MANIFEST)
    path = root.joinpath(*ghost.key.split("/"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"[]")
    with _real(demo, root) as client:
        _wait(client, 200)
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
        assert 'tiered_gateway_unreadable_manifests{topic="ghost",partition="2"} 1' in metrics
        assert "tiered_gateway_rescans_aborted_total 0" in metrics
