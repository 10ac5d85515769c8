"""A console search cancelled in the browser stops reading on the server.

The gateway reads a moto S3 bucket through the fault proxy with segment GETs stalled, so the
search cannot get past its first read whatever the machine's speed: the page has its Cancel
button (the head is sent before any read), the click stops the load, and the server, seeing
the connection go, cancels the scan and says so in its log (waited for, not slept on).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.browser import Watch, chromium
from tests.integration.fault_proxy import Faults, fault_proxy
from tests.integration.independent_bucket import upload_to_moto, write_independent_bucket
from tests.integration.serve import start_serve, stop, wait_ready


@pytest.fixture(scope="module")
def stalled(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Faults, Path]]:
    work = tmp_path_factory.mktemp("console-cancel")
    bucket = write_independent_bucket(work / "bucket")
    name = upload_to_moto(bucket, moto_endpoint, "console")
    with fault_proxy(moto_endpoint) as (proxy_url, faults):
        args = bucket.serve_args(
            f"s3://{name}", "--s3-endpoint-url", proxy_url, "--s3-region", "us-east-1",
            "--s3-path-style", "--rescan-interval-s", "0", "--workers", "1",
            "--retry-attempt-timeout-s", "120", "--request-timeout-ms", "120000",
        )  # fmt: skip
        log = work / "serve.log"
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "PATH": ""}
        proc, url = start_serve(args, log, log_level="info", env=env)
        try:
            wait_ready(url, proc, log)
            yield url, faults, log
        finally:
            faults.mode = None
            stop(proc)


def test_a_cancelled_search_stops_on_the_server(stalled: tuple[str, Faults, Path]) -> None:
    url, faults, log = stalled
    topic, partition = _a_partition(url)
    faults.mode = "stall"  # every segment GET held until the test lifts it
    with chromium() as browser:
        context = browser.new_context()
        tab = context.new_page()
        watch = Watch(url)
        watch.attach(tab)
        tab.goto(
            f"{url}/ui/topics/{topic}/{partition}/search?value=zz-none&run=1",
            wait_until="commit",
        )
        tab.locator("button.cancel").click()
        status = tab.locator(".status")
        assert status.get_attribute("data-cancelled") == "true"
        assert status.inner_text().startswith("Cancelled")
        assert tab.locator("p.stopped").count() == 0
        line = f"console search of {topic}-{partition} cancelled at offset"
        deadline = time.monotonic() + 60
        while line not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line in log.read_text()
        context.close()
    faults.mode = None
    assert "stopped (" not in log.read_text()  # the scan never went on to an end
    with httpx.Client(base_url=url, timeout=60) as c:  # and the gateway still serves it
        assert c.get(f"/v1/topics/{topic}/partitions/{partition}/records?offset=0").status_code in (
            200,
            416,
        )
    watch.clean()


def _a_partition(url: str) -> tuple[str, int]:
    """A partition with records, its bounds checked (the partition's own answer reads its
    last segment's tail once) before the test stalls the store."""
    with httpx.Client(base_url=url, timeout=30) as c:
        for topic in c.get("/v1/topics").json()["topics"]:
            for p in c.get(f"/v1/topics/{topic['name']}/partitions").json()["partitions"]:
                if p["remote_log_end_offset"] > p["remote_log_start_offset"]:
                    where = f"/v1/topics/{topic['name']}/partitions/{p['partition']}"
                    c.get(where).raise_for_status()
                    return topic["name"], p["partition"]
    raise AssertionError("no partition with records")
