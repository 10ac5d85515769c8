"""``serve`` over a key prefix with nothing under it says so in its log, once, with the fix
(a real ``serve`` process over the demo bucket). Before: it served an empty topic list without
a word."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx

from gateway.demo import DemoBucket
from tests.integration.serve import serve_process

SCANS = re.compile(r"^tiered_gateway_bucket_scans_total (\S+)$", re.MULTILINE)


def until_scans(url: str, count: int, seconds: float = 60) -> None:
    """Poll /metrics until ``count`` bucket scans completed; only a hang fails."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = SCANS.search(httpx.get(f"{url}/metrics", timeout=10).text)
        assert found is not None, "no tiered_gateway_bucket_scans_total in /metrics"
        if float(found.group(1)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} bucket scans in {seconds} s")


def test_serve_warns_once_about_a_prefix_without_its_slash(
    demo: DemoBucket, tmp_path: Path
) -> None:
    assert demo.key_prefix == "demo/"
    args = ["--store", demo.store_url, "--key-prefix", "demo", "--key-pair", demo.key_pair_spec]
    args += ["--rescan-interval-s", "0.1"]
    log = tmp_path / "serve.log"
    with serve_process(args, log) as url:
        assert httpx.get(f"{url}/v1/topics", timeout=10).json()["topics"] == []
        until_scans(url, 4)  # rescans of the same empty scope do not repeat the warning
    lines = [line for line in log.read_text().splitlines() if "did you mean" in line]
    assert len(lines) == 1, log.read_text()
    assert "WARNING" in lines[0] and "manifests are under 'demo/'" in lines[0]
    assert "did you mean the key prefix 'demo/'?" in lines[0]
