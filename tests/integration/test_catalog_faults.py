"""A store fault is not a deletion, over real processes: ``tiered-gateway serve`` reads a moto S3
bucket (the demo bucket's objects) through the fault proxy, which fails the bucket LISTs or the
manifest GETs with S3's AccessDenied or SlowDown.

* started while the bucket cannot be listed: /readyz 503 with the reason, every data route 503
  ``not_ready`` (never ready with an empty catalog), then ready once the store answers;
* a rescan that cannot list or read changes nothing (a deletion made meanwhile is applied only
  once a listing succeeds), and is counted in /metrics.

Waits poll for a condition with a generous bound: no verdict depends on a sleep.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from gateway.demo import DemoBucket
from tests.fixtures.demo import copy_demo_bucket
from tests.integration.fault_proxy import Faults, fault_proxy
from tests.integration.serve import start_serve, stop

RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"
DATA_ROUTES = [
    "/v1/topics",
    "/v1/topics/orders/partitions",
    "/v1/topics/orders/partitions/0",
    "/v1/topics/orders/partitions/0/segments",
    "/v1/topics/orders/partitions/0/offsets?timestamp=earliest",
    "/v1/topics/orders/partitions/0/records?offset=0",
]
ABORTED = re.compile(r"^tiered_gateway_rescans_aborted_total (\S+)$", re.MULTILINE)


def _objects(demo: DemoBucket) -> dict[str, Path]:
    root = demo.root / "bucket"
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def s3_name(demo: DemoBucket, moto_endpoint: str) -> str:
    """A fresh moto bucket holding the demo bucket's objects."""
    name = f"catalog-faults-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=name)
    for key, path in _objects(demo).items():
        s3.put_object(Bucket=name, Key=key, Body=path.read_bytes())
    return name


@pytest.fixture(scope="module")
def proxy(moto_endpoint: str) -> Iterator[tuple[str, Faults]]:
    with fault_proxy(moto_endpoint) as running:
        yield running


@pytest.fixture
def faults(proxy: tuple[str, Faults]) -> Iterator[Faults]:
    _, injected = proxy
    injected.clear()
    try:
        yield injected
    finally:
        injected.mode, injected.suffix = None, ".log"


@contextlib.contextmanager
def serving(
    demo: DemoBucket, store: str, proxy_url: str, log_path: Path, *extra: str
) -> Iterator[httpx.Client]:
    """``serve`` as a process, handed over once it answers /healthz (ready or not)."""
    args = [*demo.serve_args[:1], store, *demo.serve_args[2:]]  # --store replaced
    proc, url = start_serve(
        [*args, "--s3-endpoint-url", proxy_url, "--s3-region", "us-east-1", "--s3-path-style",
         "--retry-max-attempts", "2", "--retry-base-delay-s", "0.01", *extra],
        log_path,
    )  # fmt: skip
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            until(lambda: _alive(client, proc, log_path), "serve to answer /healthz")
            yield client
    finally:
        stop(proc)


def _alive(client: httpx.Client, proc: subprocess.Popen[bytes], log_path: Path) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"serve exited with {proc.returncode}:\n{log_path.read_text()}")
    try:
        return client.get("/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def until(condition: Callable[[], bool], what: str, seconds: float = 90) -> None:
    """Poll ``condition`` until it holds; only a hang (``seconds``) fails."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def aborted(client: httpx.Client) -> float:
    found = ABORTED.search(client.get("/metrics").text)
    assert found is not None, "no tiered_gateway_rescans_aborted_total in /metrics"
    return float(found.group(1))


def segment_starts(client: httpx.Client, topic: str, partition: int) -> list[int]:
    r = client.get(f"/v1/topics/{topic}/partitions/{partition}/segments")
    assert r.status_code == 200, r.text
    return [s["start_offset"] for s in r.json()["segments"]]


def test_a_bucket_that_cannot_be_listed_at_start_means_not_ready(
    demo: DemoBucket,
    s3_name: str,
    proxy: tuple[str, Faults],
    faults: Faults,
    tmp_path: Path,
) -> None:
    url, _ = proxy
    faults.suffix, faults.mode = f"/{s3_name}", "403"  # the bucket LIST: AccessDenied
    with serving(demo, f"s3://{s3_name}", url, tmp_path / "serve.log") as client:
        until(lambda: "AccessDenied" in client.get("/readyz").text, "the reason in /readyz")
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["error_code"] == "not_ready"
        assert "retry-after" in r.headers
        for route in DATA_ROUTES:  # not 404 unknown topic, not an empty topic list
            got = client.get(route)
            assert got.status_code == 503, (route, got.text)
            assert got.json()["error_code"] == "not_ready" and got.json()["retriable"] is True
        assert aborted(client) >= 1
        faults.mode = None  # access granted: the retried first scan loads the catalog
        until(lambda: client.get("/readyz").status_code == 200, "ready")
        assert client.get("/readyz").json() == {"status": "ready"}
        r = client.get(RECORDS.format(topic="orders", partition=0), params={"offset": 0})
        assert r.status_code == 200 and r.json()["records"][0]["offset"] == 0


@pytest.mark.parametrize(
    ("what", "mode"),
    [("list", "403"), ("list", "503"), ("manifest", "403"), ("manifest", "503")],
)
def test_a_rescan_that_meets_a_store_fault_changes_nothing(
    demo: DemoBucket,
    s3_name: str,
    moto_endpoint: str,
    proxy: tuple[str, Faults],
    faults: Faults,
    tmp_path: Path,
    what: str,
    mode: str,
) -> None:
    """Retention deletes the oldest segment of orders-0 and a new segment of orders-1 is
    uploaded while the store fails the rescans' LISTs (or the new manifest's GET): the catalog
    keeps the deleted segment and does not register the new one until a pass succeeds."""
    url, _ = proxy
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    keys = sorted(_objects(demo))
    held_back = max(k for k in keys if "/orders-" in k and "/1/" in k and k.endswith("manifest"))
    s3.delete_object(Bucket=s3_name, Key=held_back)  # the "new" segment, uploaded later
    args = ("--rescan-interval-s", "0.2")
    with serving(demo, f"s3://{s3_name}", url, tmp_path / "serve.log", *args) as client:
        until(lambda: client.get("/readyz").status_code == 200, "ready")
        starts0, starts1 = segment_starts(client, "orders", 0), segment_starts(client, "orders", 1)
        doomed = next(k for k in keys if "/orders-" in k and "/0/" in k)  # the oldest of orders-0
        doomed_prefix = doomed.rsplit(".", 1)[0]
        faults.suffix = f"/{s3_name}" if what == "list" else ".rsm-manifest"
        faults.mode = mode  # type: ignore[assignment]
        if what == "list":
            # A pass whose LIST reached the proxy just before the fault may reach moto after the
            # upload below and register it. Passes run one at a time: once one is aborted after
            # the fault, every later pass LISTs into it.
            first = aborted(client)
            until(lambda: aborted(client) >= first + 1, "a rescan aborted by the fault")
        # The upload first: a pass that lists the deletion then also GETs the new manifest, so
        # a manifest fault fails it (deleting first let a pass in between succeed, GET-free).
        s3.put_object(
            Bucket=s3_name, Key=held_back, Body=(demo.root / "bucket" / held_back).read_bytes()
        )
        for key in keys:
            if key.startswith(doomed_prefix):
                s3.delete_object(Bucket=s3_name, Key=key)
        before = aborted(client)
        until(lambda: aborted(client) >= before + 2, "two rescans aborted by the fault")
        assert segment_starts(client, "orders", 0) == starts0  # not deleted by a failed pass
        assert segment_starts(client, "orders", 1) == starts1  # nor the new one registered
        assert client.get("/readyz").json() == {"status": "ready"}
        faults.mode = None
        until(lambda: segment_starts(client, "orders", 0) == starts0[1:], "the deletion applied")
        until(lambda: len(segment_starts(client, "orders", 1)) == len(starts1) + 1, "the upload")


def _read(client: httpx.Client, topic: str, partition: int, offset: int = 0) -> httpx.Response:
    return client.get(RECORDS.format(topic=topic, partition=partition), params={"offset": offset})


def _away(r: httpx.Response) -> bool:
    """The store-away answer: 503, retriable, Retry-After; never object_not_found or 416."""
    body = r.json()
    return (
        r.status_code == 503
        and body["error_code"] == "storage_unavailable"
        and body["retriable"] is True
        and "retry-after" in r.headers
    )


def _store_away_then_back(
    client: httpx.Client, leave: Callable[[], None], back: Callable[[], None]
) -> None:
    """Issue 33: reads while the store is away answer 503 retriable (a cold read, and again
    after rescans failed meanwhile), the catalog keeps every topic and segment, and reads resume
    once the store is back, with the records they had."""
    until(lambda: client.get("/readyz").status_code == 200, "ready")
    warm = _read(client, "orders", 0)
    assert warm.status_code == 200
    topics = client.get("/v1/topics").json()
    starts = segment_starts(client, "audit", 0)
    leave()
    cold = _read(client, "audit", 0)
    assert _away(cold), cold.text
    first = aborted(client)
    until(lambda: aborted(client) >= first + 2, "two rescans aborted while the store is away")
    assert client.get("/v1/topics").json() == topics  # nothing forgotten
    assert segment_starts(client, "audit", 0) == starts
    again = _read(client, "audit", 0, 7)
    assert _away(again), again.text
    back()
    until(lambda: _read(client, "audit", 0).status_code == 200, "reads to resume")
    assert _read(client, "audit", 0).json()["records"][0]["offset"] == 0
    assert _read(client, "orders", 0).json() == warm.json()
    assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize("mode", ["nobucket", "503"])
def test_the_bucket_away_answers_503_and_reads_resume_when_it_is_back(
    demo: DemoBucket,
    s3_name: str,
    proxy: tuple[str, Faults],
    faults: Faults,
    tmp_path: Path,
    mode: str,
) -> None:
    url, _ = proxy
    args = ("--rescan-interval-s", "0.2")
    with serving(demo, f"s3://{s3_name}", url, tmp_path / "serve.log", *args) as client:

        def leave() -> None:
            faults.suffix, faults.mode = "", mode  # type: ignore[assignment]

        def back() -> None:
            faults.mode = None

        _store_away_then_back(client, leave, back)


def test_the_store_root_away_answers_503_and_a_real_deletion_is_the_catalogs(
    demo: DemoBucket, tmp_path: Path
) -> None:
    root = copy_demo_bucket(demo, tmp_path)
    moved = root.with_name("bucket.away")
    args = [*demo.serve_args[:1], root.as_uri(), *demo.serve_args[2:], "--rescan-interval-s", "0.2"]
    proc, url = start_serve(args, tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            until(lambda: _alive(client, proc, tmp_path / "serve.log"), "serve to answer")
            _store_away_then_back(client, lambda: root.rename(moved), lambda: moved.rename(root))
            # A segment deleted while the store answers is gone: the log starts after it.
            starts = segment_starts(client, "orders", 1)
            for path in root.glob(f"*/orders-*/1/{starts[0]:020d}-*"):
                path.unlink()
            r = _read(client, "orders", 1, starts[0])
            assert r.status_code == 416, r.text
            assert r.json()["log_start_offset"] == starts[1]
            until(lambda: segment_starts(client, "orders", 1) == starts[1:], "the rescan to agree")
    finally:
        stop(proc)


def test_a_deadline_after_some_batches_answers_them_not_504(
    demo: DemoBucket, s3_name: str, proxy: tuple[str, Faults], faults: Faults, tmp_path: Path
) -> None:
    """Issue 33: the store stalls after a part of the segment was read (held in memory from an
    earlier read); the fetch's deadline passes while it waits for the rest. Kafka answers at
    max_wait with what it has: 200 with those batches and next_offset after them, never a 504
    that loses them, never an empty page."""
    url, _ = proxy
    with serving(demo, f"s3://{s3_name}", url, tmp_path / "serve.log") as client:
        until(lambda: client.get("/readyz").status_code == 200, "ready")
        _partial_answer(client, faults)


def _partial_answer(client: httpx.Client, faults: Faults) -> None:
    topic, partition = "audit", 0  # segments of ~190 KB in 16 KiB chunks: a read in windows
    segments = client.get(f"/v1/topics/{topic}/partitions/{partition}/segments").json()
    largest = max(segments["segments"], key=lambda s: s["size"])
    start = largest["start_offset"]
    path = RECORDS.format(topic=topic, partition=partition)
    first = client.get(path, params={"offset": start, "max_bytes": 1})  # the segment's head
    assert first.status_code == 200 and first.json()["records"]
    faults.mode = "stall"  # every later segment GET held until the test lifts it
    try:
        r = client.get(
            path, params={"offset": start, "max_bytes": largest["size"], "timeout_ms": 1500}
        )
    finally:
        faults.mode = None
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["records"] and body["records"][0]["offset"] == start
    assert body["next_offset"] == body["records"][-1]["offset"] + 1
    assert body["next_offset"] <= largest["end_offset"]  # a part: the rest was not read
    assert body["end_of_remote_log"] is False
    whole = client.get(path, params={"offset": start, "max_bytes": largest["size"]}).json()
    assert whole["records"][: len(body["records"])] == body["records"]
