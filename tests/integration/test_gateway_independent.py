"""End to end over real HTTP, on the filesystem store and on a moto S3 server (with either S3
data plane): a bucket whose
batches all come from independent encoders (:mod:`tests.integration.independent_bucket`),
tiered with every chunk transform combination; what comes back must equal what was written.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kafka.record import MemoryRecords

from gateway.storage.filesystem import FilesystemStore
from tests.integration.independent_bucket import (
    BIG_VALUE,
    TOPICS,
    IndependentBucket,
    Written,
    WrittenPartition,
    upload_all,
    upload_to_moto,
    write_independent_bucket,
)
from tests.integration.serve import serve_process, walk

RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"
OFFSETS = "/v1/topics/{topic}/partitions/{partition}/offsets"
PARTITIONS = [(t.name, p) for t in TOPICS for p in range(t.partitions)]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> IndependentBucket:
    root = tmp_path_factory.mktemp("independent")
    written = write_independent_bucket(root)
    (root / "bucket").mkdir()

    async def upload() -> None:
        store = FilesystemStore(root / "bucket")
        await upload_all(store, written)

    asyncio.run(upload())
    return written


@pytest.fixture(scope="module", params=["filesystem", "s3", "s3-httpx"])
def base_url(
    request: pytest.FixtureRequest,
    bucket: IndependentBucket,
    moto_endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("independent-log") / "serve.log"
    if request.param == "filesystem":
        args = bucket.serve_args((bucket.root / "bucket").as_uri())
    else:
        name = upload_to_moto(bucket, moto_endpoint, "e2e")
        args = bucket.serve_args(
            f"s3://{name}", "--s3-endpoint-url", moto_endpoint, "--s3-region", "us-east-1"
        )
        if request.param == "s3-httpx":  # the other data plane, signed by botocore's SigV4
            args += ["--s3-data-plane", "httpx", "--s3-path-style"]
    with serve_process([*args, "--rescan-interval-s", "0"], log_path) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=60) as c:
        yield c


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _want(w: Written) -> tuple[Any, ...]:
    headers = [{"key": k, "value": _b64(v)} for k, v in w.headers]
    kind = "LogAppendTime" if w.log_append_time else "CreateTime"
    return (w.offset, w.timestamp, kind, _b64(w.key), _b64(w.value), headers, w.epoch)


def _got(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["offset"], r["timestamp"], r["timestamp_type"], r["key"], r["value"],
            r["headers"], r["leader_epoch"])  # fmt: skip


def test_partitions_report_what_was_written(
    client: httpx.Client, bucket: IndependentBucket
) -> None:
    names = sorted(t["name"] for t in client.get("/v1/topics").json()["topics"])
    assert names == sorted(t.name for t in TOPICS)
    for (topic, p), written in bucket.partitions.items():
        info = client.get(f"/v1/topics/{topic}/partitions/{p}").json()
        assert info["remote_log_start_offset"] == 0
        assert info["remote_log_end_offset"] == written.next_offset
        starts: dict[int, int] = {}
        for stamp in written.stamps:
            starts.setdefault(stamp.epoch, stamp.offset)
        assert info["leader_epochs"] == [{"epoch": e, "start_offset": o} for e, o in starts.items()]
        assert sorted(starts) == [0, 2, 5]
        # Kafka's listing keeps a displaced upload until retention deletes it
        assert info["segment_count"] == written.segments + 1


@pytest.mark.parametrize(
    ("max_bytes", "isolation"),
    [
        (1, "read_uncommitted"),
        (5000, "read_committed"),
        (1 << 20, "read_uncommitted"),
        (1 << 20, "read_committed"),
    ],
)
def test_walk_returns_every_record_once_as_written(
    client: httpx.Client, bucket: IndependentBucket, max_bytes: int, isolation: str
) -> None:
    for (topic, p), written in bucket.partitions.items():
        want = written.committed() if isolation == "read_committed" else written.records
        got, _ = walk(client, topic, p, max_bytes, isolation)
        assert [_got(r) for r in got] == [_want(w) for w in want], (topic, p)


def test_written_data_covers_what_the_issue_asks(bucket: IndependentBucket) -> None:
    """Not a gateway check: the fixture's own guard that every case is really present."""
    for written in bucket.partitions.values():
        records = written.records
        assert any(r.aborted for r in records) and any(not r.aborted for r in records)
        assert any(r.log_append_time for r in records)
        assert any(r.key is None for r in records) and any(r.value is None for r in records)
        assert any(v is None for r in records for _, v in r.headers)
        assert any(r.value is not None and len(r.value) == BIG_VALUE for r in records)
        assert written.segments >= 3


def test_ndjson_streams_each_partition(client: httpx.Client, bucket: IndependentBucket) -> None:
    for (topic, p), written in bucket.partitions.items():
        with client.stream(
            "GET",
            RECORDS.format(topic=topic, partition=p),
            params={"offset": 0, "isolation_level": "read_committed"},
            headers={"Accept": "application/x-ndjson"},
        ) as r:
            assert r.status_code == 200
            *records, last = [json.loads(line) for line in r.read().split(b"\n") if line]
        assert [_got(x) for x in records] == [_want(w) for w in written.committed()]
        assert last["next_offset"] == written.next_offset


def test_raw_batches_decode_with_kafka_python(
    client: httpx.Client, bucket: IndependentBucket
) -> None:
    for (topic, p), written in bucket.partitions.items():
        offset, got = 0, []
        while offset < written.next_offset:
            r = client.get(
                RECORDS.format(topic=topic, partition=p),
                params={"offset": offset, "max_bytes": 20_000},
                headers={"Accept": "application/octet-stream"},
            )
            assert r.status_code == 200
            records = MemoryRecords(r.content)
            while (batch := records.next_batch()) is not None:
                if not batch.is_control_batch:
                    got += [(x.offset, x.key, x.value) for x in batch if x.offset >= offset]
            offset = int(r.headers["x-next-offset"])
        assert got == [(w.offset, w.key, w.value) for w in written.records], (topic, p)


def test_raw_read_committed_with_the_aborted_list_gives_the_committed_records(
    client: httpx.Client, bucket: IndependentBucket
) -> None:
    """A client bringing its own decoder: kafka-python frames the raw batches and this test
    applies the consumer's rule with the X-Aborted-Transactions list."""
    for (topic, p), written in bucket.partitions.items():
        offset, got = 0, []
        aborted_pids: set[int] = set()
        while offset < written.next_offset:
            r = client.get(
                RECORDS.format(topic=topic, partition=p),
                params={"offset": offset, "max_bytes": 3000, "isolation_level": "read_committed"},
                headers={"Accept": "application/octet-stream"},
            )
            assert r.status_code == 200
            pending = sorted(
                (t["first_offset"], t["producer_id"])
                for t in json.loads(r.headers["x-aborted-transactions"])
            )
            records = MemoryRecords(r.content)
            while (batch := records.next_batch()) is not None:
                last = batch.base_offset + batch.last_offset_delta
                while pending and pending[0][0] <= last:
                    aborted_pids.add(pending.pop(0)[1])
                if batch.is_control_batch:
                    aborted_pids.discard(batch.producer_id)  # its marker ends the transaction
                    continue
                if batch.is_transactional and batch.producer_id in aborted_pids:
                    continue
                got += [(x.offset, x.value) for x in batch if x.offset >= offset]
            offset = int(r.headers["x-next-offset"])
        assert got == [(w.offset, w.value) for w in written.committed()], (topic, p)


def test_one_record_larger_than_max_bytes_is_returned(
    client: httpx.Client, bucket: IndependentBucket
) -> None:
    for (topic, p), written in bucket.partitions.items():
        big = next(w for w in written.records if w.value and len(w.value) == BIG_VALUE)
        body = client.get(
            RECORDS.format(topic=topic, partition=p), params={"offset": big.offset, "max_bytes": 1}
        ).json()
        assert body["records"] and _got(body["records"][0]) == _want(big)


def _brute_force(written: WrittenPartition, ts: int) -> tuple[int, int, int | None]:
    """Kafka's search: the first batch (in offset order) whose max timestamp is at least
    ``ts``, then its first record at or after ``ts``; control records count."""
    for s in written.stamps:
        if s.batch_max_timestamp >= ts and s.timestamp >= ts:
            return (s.offset, s.timestamp, s.epoch)
    return (-1, -1, None)


def test_list_offsets_equal_a_brute_force_search(
    client: httpx.Client, bucket: IndependentBucket
) -> None:
    for (topic, p), written in bucket.partitions.items():
        url = OFFSETS.format(topic=topic, partition=p)
        stamps = sorted({s.timestamp for s in written.stamps})
        probes = [stamps[0] - 1, *stamps[:: max(1, len(stamps) // 40)], stamps[-1], stamps[-1] + 1]
        for ts in probes:
            body = client.get(url, params={"timestamp": ts}).json()
            assert (body["offset"], body["timestamp"], body["leader_epoch"]) == _brute_force(
                written, ts
            ), (topic, p, ts)
        top = max(s.timestamp for s in written.stamps)
        hit = next(s for s in written.stamps if s.timestamp == top)
        body = client.get(url, params={"timestamp": "max_timestamp"}).json()
        assert (body["offset"], body["timestamp"]) == (hit.offset, top)
        assert client.get(url, params={"timestamp": "earliest"}).json()["offset"] == 0
        latest = client.get(url, params={"timestamp": "latest"}).json()["offset"]
        assert latest == written.next_offset
