"""A damaged bucket behind a real ``serve`` process (issue 13, point 9): the request that meets
the damage answers a typed 502 at once, every other endpoint keeps answering meanwhile, and
SIGTERM shuts the server down. Before the read core, one negative offset-index position sent
``Fetcher._read_segment`` into an endless loop on the event loop: that request, ``/healthz``
and every other topic hung, and SIGTERM was ignored."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.demo import DemoBucket, write_demo_bucket
from gateway.remote.manifest import IndexType, parse_manifest
from tests.integration.serve import RECORDS, wait_ready
from tests.unit.api.server import free_port


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoBucket:
    return write_demo_bucket(tmp_path_factory.mktemp("demo") / "root")


def negative_index_position(bucket: Path) -> None:
    """The first ``orders-0`` segment's first offset-index position turned negative."""
    logs = sorted(p for p in bucket.rglob("*.log") if "/orders-" in str(p) and "/0/" in str(p))
    manifest_path = logs[0].with_suffix(".rsm-manifest")
    manifest = parse_manifest(manifest_path.read_bytes(), str(manifest_path))
    piece = manifest.segment_indexes[IndexType.OFFSET]
    assert piece is not None and piece.size >= 8
    indexes = logs[0].with_suffix(".indexes")
    data = bytearray(indexes.read_bytes())
    data[piece.position + 4] |= 0x80
    indexes.write_bytes(bytes(data))


def test_damage_is_a_502_the_server_stays_responsive_and_sigterm_stops_it(
    demo: DemoBucket, tmp_path: Path
) -> None:
    bucket = tmp_path / "bucket"
    shutil.copytree(demo.root / "bucket", bucket)
    negative_index_position(bucket)
    args = ["--store", f"file://{bucket}", "--key-prefix", demo.key_prefix,
            "--key-pair", demo.key_pair_spec]  # fmt: skip
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", *args, "--port", str(port),
             "--log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, log_path)
        with httpx.Client(base_url=url, timeout=60) as client:
            damaged = client.get(RECORDS.format(topic="orders", partition=0),
                                 params={"offset": 0, "max_bytes": 4096})  # fmt: skip
            assert damaged.status_code == 502, damaged.text
            body = damaged.json()
            assert body["error_code"] == "corrupt_index", body
            assert ".indexes" in body["message"]
            # Others are served, and the damaged request does not linger.
            assert client.get("/healthz").status_code == 200
            other = client.get(RECORDS.format(topic="audit", partition=0),
                               params={"offset": 0, "max_bytes": 4096})  # fmt: skip
            assert other.status_code == 200, other.text
        proc.send_signal(signal.SIGTERM)
        # Only a hang is detected here: a generous bound, no race with a short timeout.
        assert proc.wait(timeout=60) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
