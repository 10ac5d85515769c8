"""Faults through a real server: ``tiered-gateway serve`` reads a moto S3 bucket through a
proxy (:mod:`tests.integration.fault_proxy`) that logs every GET and injects 503s, stalls and
flipped bytes. Each test reads its own cold partition or segment, so caches never hide a fault.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter
from collections.abc import Iterator

import boto3
import httpx
import pytest

from tests.integration.fault_proxy import Faults, fault_proxy
from tests.integration.independent_bucket import (
    IndependentBucket,
    upload_to_moto,
    write_independent_bucket,
)
from tests.integration.serve import serve_process

RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"
RETRY_ATTEMPTS = 3


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> IndependentBucket:
    return write_independent_bucket(tmp_path_factory.mktemp("faults"))


@pytest.fixture(scope="module")
def s3_name(bucket: IndependentBucket, moto_endpoint: str) -> str:
    return upload_to_moto(bucket, moto_endpoint, "faults")


@pytest.fixture(scope="module")
def proxy(moto_endpoint: str) -> Iterator[tuple[str, Faults]]:
    with fault_proxy(moto_endpoint) as running:
        yield running


@pytest.fixture(scope="module")
def base_url(
    bucket: IndependentBucket,
    s3_name: str,
    proxy: tuple[str, Faults],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    url, _ = proxy
    args = bucket.serve_args(
        f"s3://{s3_name}", "--s3-endpoint-url", url, "--s3-region", "us-east-1",
        "--s3-path-style", "--rescan-interval-s", "0",
        "--retry-max-attempts", str(RETRY_ATTEMPTS), "--retry-base-delay-s", "0.01",
        "--retry-attempt-timeout-s", "5",
    )  # fmt: skip
    with serve_process(args, tmp_path_factory.mktemp("faults-log") / "serve.log") as base:
        yield base


@pytest.fixture
def faults(proxy: tuple[str, Faults], base_url: str) -> Iterator[Faults]:
    _, injected = proxy
    injected.clear()
    try:
        yield injected
    finally:
        injected.mode = None


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=90) as c:
        yield c


def _segment_start(client: httpx.Client, topic: str, partition: int, index: int) -> int:
    segments = client.get(f"/v1/topics/{topic}/partitions/{partition}/segments").json()
    starts = sorted({s["start_offset"] for s in segments["segments"]})
    return int(starts[index])


def test_store_503s_give_503_with_retry_after(client: httpx.Client, faults: Faults) -> None:
    faults.mode = "503"
    r = client.get(RECORDS.format(topic="sealed.eu-1", partition=0), params={"offset": 0})
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["error_code"] == "storage_unavailable" and body["retriable"] is True
    assert "SlowDown" in body["message"]
    assert int(r.headers["retry-after"]) >= 1
    attempts = Counter(faults.gets())
    assert attempts and max(attempts.values()) == RETRY_ATTEMPTS
    faults.mode = None  # the store recovers: so does the gateway, with nothing cached wrong
    ok = client.get(RECORDS.format(topic="sealed.eu-1", partition=0), params={"offset": 0})
    assert ok.status_code == 200 and ok.json()["records"][0]["offset"] == 0


def test_stalled_store_gives_504_within_the_deadline(client: httpx.Client, faults: Faults) -> None:
    faults.mode = "stall"
    t0 = time.monotonic()
    r = client.get(
        RECORDS.format(topic="sealed-zstd.v3", partition=0),
        params={"offset": 0, "timeout_ms": 1500},
    )
    elapsed = time.monotonic() - t0
    assert r.status_code == 504, r.text
    assert r.json()["error_code"] == "deadline_exceeded" and r.json()["retriable"] is True
    assert elapsed < 1.5 + 3.0, elapsed  # the deadline, plus slack for a loaded CI machine


@pytest.mark.parametrize(
    ("topic", "partition", "segment"),
    [("plain.v1-raw", 0, 0), ("sealed-zstd.v3", 0, 2), ("zstd-chunks.v2", 0, 3)],
)
def test_a_corrupted_chunk_gives_502_naming_the_object_never_records(
    client: httpx.Client,
    faults: Faults,
    bucket: IndependentBucket,
    topic: str,
    partition: int,
    segment: int,
) -> None:
    offset = _segment_start(client, topic, partition, segment)
    faults.mode = "corrupt"
    r = client.get(
        RECORDS.format(topic=topic, partition=partition),
        params={"offset": offset, "max_bytes": 1 << 20},
    )
    assert r.status_code == 502, r.text
    body = r.json()
    assert body["retriable"] is False and "records" not in body
    assert f"{topic}-" in body["message"] and ".log" in body["message"]
    faults.mode = None  # what was corrupt in transit was not kept: the next read is good
    ok = client.get(
        RECORDS.format(topic=topic, partition=partition),
        params={"offset": offset, "max_bytes": 1 << 20},
    )
    assert ok.status_code == 200, ok.text
    written = bucket.partitions[(topic, partition)].records
    first = next(w.offset for w in written if w.offset >= offset)  # a marker may come first
    assert ok.json()["records"][0]["offset"] == first


def test_bytes_damaged_in_transit_once_are_read_again(
    client: httpx.Client, faults: Faults, bucket: IndependentBucket
) -> None:
    topic, partition = "plain.v1-raw", 1
    offset = _segment_start(client, topic, partition, 1)
    faults.mode = "corrupt_once"
    r = client.get(  # a small read: the last segment stays cold for the deletion test
        RECORDS.format(topic=topic, partition=partition),
        params={"offset": offset, "max_bytes": 5000},
    )
    assert r.status_code == 200, r.text
    want = [w for w in bucket.partitions[(topic, partition)].records if w.offset >= offset]
    got = r.json()["records"]
    assert [(x["offset"], x["value"]) for x in got] == [
        (w.offset, None if w.value is None else base64.b64encode(w.value).decode())
        for w in want[: len(got)]
    ]
    assert faults.mode is None and len(faults.gets()) >= 2  # the damaged GET, then a good one


def test_a_segment_deleted_under_the_gateway(
    client: httpx.Client, faults: Faults, s3_name: str, moto_endpoint: str
) -> None:
    """Retention deletes the oldest segment; the catalog has not rescanned. The read finds the
    objects gone, the gateway checks the manifest, forgets the segment and re-resolves: 416
    with the new log start offset, and the partition reports it too."""
    topic, partition = "plain.v1-raw", 1
    segments = client.get(f"/v1/topics/{topic}/partitions/{partition}/segments").json()
    first, second = sorted({s["start_offset"] for s in segments["segments"]})[:2]
    doomed_id = next(s["segment_id"] for s in segments["segments"] if s["start_offset"] == first)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    listed = s3.list_objects_v2(Bucket=s3_name, Prefix="tiered/")["Contents"]
    doomed = [o["Key"] for o in listed if doomed_id in o["Key"]]
    assert len(doomed) == 3
    for key in doomed:
        s3.delete_object(Bucket=s3_name, Key=key)
    r = client.get(RECORDS.format(topic=topic, partition=partition), params={"offset": first + 1})
    assert r.status_code == 416, r.text
    assert r.json()["log_start_offset"] == second, r.text
    info = client.get(f"/v1/topics/{topic}/partitions/{partition}").json()
    assert info["remote_log_start_offset"] == second
    ok = client.get(RECORDS.format(topic=topic, partition=partition), params={"offset": second})
    assert ok.status_code == 200 and ok.json()["records"][0]["offset"] == second


def test_100_concurrent_requests_for_one_cold_range_cause_one_get_per_chunk(
    base_url: str, faults: Faults, bucket: IndependentBucket
) -> None:
    topic, partition = "zstd-chunks.v2", 0
    offset = bucket.partitions[(topic, partition)].records[40].offset
    url = RECORDS.format(topic=topic, partition=partition)

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=base_url, timeout=90, limits=limits) as c:
            return await asyncio.gather(
                *(c.get(url, params={"offset": offset, "max_bytes": 8000}) for _ in range(100))
            )

    responses = asyncio.run(storm())
    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1  # every reader got the same answer
    gets = faults.gets()
    assert gets, "the range was cold: it must have been fetched"
    assert all(n == 1 for n in Counter(gets).values()), Counter(gets).most_common(3)
    assert len(faults.gets(".indexes")) == 1  # and the segment's indexes once
