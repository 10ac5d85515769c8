"""A damaged bucket behind a real ``serve`` process (issue 13, point 9): the request that meets
the damage answers a typed 502 at once, every other endpoint keeps answering meanwhile, and
SIGTERM shuts the server down. Before the read core, one negative offset-index position sent
``Fetcher._read_segment`` into an endless loop on the event loop: that request, ``/healthz``
and every other topic hung, and SIGTERM was ignored."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from gateway.demo import DemoBucket
from gateway.remote.manifest import IndexType, parse_manifest
from tests.fixtures.demo import copy_demo_bucket
from tests.integration.serve import RECORDS, start_serve, wait_ready


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
    bucket = copy_demo_bucket(demo, tmp_path)
    negative_index_position(bucket)
    args = ["--store", f"file://{bucket}", "--key-prefix", demo.key_prefix,
            "--key-pair", demo.key_pair_spec]  # fmt: skip
    log_path = tmp_path / "serve.log"
    proc, url = start_serve(args, log_path)
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
