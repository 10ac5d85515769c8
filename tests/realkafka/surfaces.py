"""Each surface of the gateway, read as a client reads it, as rows in the oracle's shape
(``partition, offset, timestamp, timestampType, key, value, headers, leaderEpoch``)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import httpx
from kafka.record.default_records import DefaultRecordBatch

from tests.realkafka.report import Row, b64

RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"
_HEADER = struct.Struct(">qiiB")  # base offset, length, partition leader epoch, magic
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 ABORT, 1 COMMIT)
WALK_LIMIT = 10_000  # requests per walk: a walk that does not end is a failure, not a hang


class WalkError(AssertionError):
    """A walk that did not move forward, or an answer that was not 200."""


def from_json(partition: int, r: dict[str, Any]) -> Row:
    return {
        "partition": partition,
        "offset": r["offset"],
        "timestamp": r["timestamp"],
        "timestampType": r["timestamp_type"],
        "key": r["key"],
        "value": r["value"],
        "headers": [[h["key"], h["value"]] for h in r["headers"]],
        "leaderEpoch": r["leader_epoch"],
    }


def json_walk(
    client: httpx.Client, topic: str, partition: int, isolation: str, max_bytes: int = 65536
) -> list[Row]:
    """Page by ``next_offset`` from the remote log start until ``end_of_remote_log``."""
    info = client.get(f"/v1/topics/{topic}/partitions/{partition}").json()
    offset, rows = info["remote_log_start_offset"], []
    for _ in range(WALK_LIMIT):
        r = client.get(
            RECORDS.format(topic=topic, partition=partition),
            params={"offset": offset, "isolation_level": isolation, "max_bytes": max_bytes},
        )
        if r.status_code != 200:
            raise WalkError(f"{topic}-{partition}@{offset}: {r.status_code} {r.text[:300]}")
        body = r.json()
        rows += [from_json(partition, x) for x in body["records"]]
        if body["end_of_remote_log"]:
            return rows
        if body["next_offset"] <= offset:
            raise WalkError(f"{topic}-{partition}@{offset}: next_offset {body['next_offset']}")
        offset = body["next_offset"]
    raise WalkError(f"{topic}-{partition}: no end after {WALK_LIMIT} pages")


def ndjson_walk(client: httpx.Client, topic: str, partition: int, isolation: str) -> list[Row]:
    """Streams (one line per record, a closing line) until ``end_of_remote_log``."""
    offset, rows = 0, []
    for _ in range(WALK_LIMIT):
        with client.stream(
            "GET",
            RECORDS.format(topic=topic, partition=partition),
            params={"offset": offset, "isolation_level": isolation},
            headers={"Accept": "application/x-ndjson"},
        ) as r:
            if r.status_code != 200:
                raise WalkError(f"{topic}-{partition}@{offset}: {r.status_code} {r.read()[:300]!r}")
            lines = [json.loads(line) for line in r.read().split(b"\n") if line]
        *records, last = lines
        if "next_offset" not in last or "error" in last or "error_code" in last:
            raise WalkError(f"{topic}-{partition}@{offset}: closing line {last}")
        rows += [from_json(partition, x) for x in records]
        if last["end_of_remote_log"]:
            return rows
        if last["next_offset"] <= offset:
            raise WalkError(f"{topic}-{partition}@{offset}: next_offset {last['next_offset']}")
        offset = last["next_offset"]
    raise WalkError(f"{topic}-{partition}: no end after {WALK_LIMIT} streams")


Page = tuple[bytes, list[tuple[int, int]]]
"""A raw answer: its record batches, and the aborted transactions it names (producer id, first
offset; ``X-Aborted-Transactions``, read_committed)."""


def raw_walk(
    client: httpx.Client,
    topic: str,
    partition: int,
    isolation: str = "read_uncommitted",
    max_bytes: int = 65536,
) -> list[Page]:
    """The raw answers of a walk by ``X-Next-Offset``, each as the consumer gets one fetch."""
    offset, pages = 0, []
    for _ in range(WALK_LIMIT):
        r = client.get(
            RECORDS.format(topic=topic, partition=partition),
            params={"offset": offset, "max_bytes": max_bytes, "isolation_level": isolation},
            headers={"Accept": "application/octet-stream"},
        )
        if r.status_code != 200:
            raise WalkError(f"{topic}-{partition}@{offset}: {r.status_code} {r.text[:300]}")
        aborted = json.loads(r.headers.get("X-Aborted-Transactions") or "[]")
        pages.append((r.content, [(t["producer_id"], t["first_offset"]) for t in aborted]))
        if r.headers["X-End-Of-Remote-Log"] == "true":
            return pages
        nxt = int(r.headers["X-Next-Offset"])
        if nxt <= offset:
            raise WalkError(f"{topic}-{partition}@{offset}: X-Next-Offset {nxt}")
        offset = nxt
    raise WalkError(f"{topic}-{partition}: no end after {WALK_LIMIT} pages")


def raw_pages_rows(partition: int, pages: list[Page], committed: bool) -> list[Row]:
    """The records of a raw walk as a consumer reads it, each answer on its own (Kafka's
    consumer keeps no aborted-transaction state from one fetch to the next)."""
    return [
        r
        for data, aborted in pages
        for r in raw_rows(partition, data, aborted if committed else None)
    ]


def batches(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(partition leader epoch, batch bytes) of each batch of ``data``."""
    pos = 0
    while pos < len(data):
        _, length, epoch, _ = _HEADER.unpack_from(data, pos)
        yield epoch, data[pos : pos + 12 + length]
        pos += 12 + length


def raw_rows(
    partition: int, data: bytes, aborted: list[tuple[int, int]] | None = None
) -> list[Row]:
    """The data records of raw batches, read by kafka-python's record reader (every CRC
    checked), as a consumer sees them: control batches left out, and with ``aborted`` (the
    read_committed answer's list) the aborted transactions' batches too, as Kafka's consumer
    drops them (``CompletedFetch``: a producer is aborted from its first offset to its ABORT
    marker)."""
    pending = sorted((first, pid) for pid, first in aborted or ())
    active: set[int] = set()
    rows: list[Row] = []
    for epoch, raw in batches(data):
        batch = DefaultRecordBatch(raw)
        if not batch.validate_crc():
            raise WalkError(f"partition {partition}: batch at {batch.base_offset} fails its CRC")
        records = list(batch)
        while pending and pending[0][0] <= batch.base_offset + batch.last_offset_delta:
            active.add(pending.pop(0)[1])
        if batch.is_control_batch:
            key = records[0].key if records else None
            if key is not None and _CONTROL_KEY.unpack_from(key)[1] == 0:  # ABORT
                active.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in active:
            continue
        stamp_type = "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"
        rows += [
            {
                "partition": partition,
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "timestampType": stamp_type,
                "key": b64(rec.key),
                "value": b64(rec.value),
                "headers": [[k, b64(v)] for k, v in rec.headers],
                "leaderEpoch": epoch,
            }
            for rec in records
        ]
    return rows
