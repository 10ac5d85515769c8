"""Render benchmark (issue 15): fetched batches -> JSON and NDJSON bytes, records per
CPU-second of this process, the path before issue 15 and today's in the same run.

The bytes: batches of ~16 KiB of 200-byte values with 12-byte keys, built with kafka-python's
batch builder (CRC included), in pages of 1 MiB of batches (the default ``max_bytes``) as a
fetch hands them over (the fetch has checked their CRCs).

* before: a frozen dataclass per record, the CRC checked again, a dict, two base64 strings and
  a header list per record, one ``orjson.dumps``;
* now: :func:`gateway.service.records.decode_records` (records grouped by batch as the C decoder
  hands them out) and :mod:`gateway.api.recordjson` (one ``bytes %`` per record).

Both outputs are compared byte for byte before timing. Runs alternate (before, now, ...) and
the best of each is kept: this machine is shared, the best run is the least disturbed.

    python -m tests.bench.bench_render [--records N] [--repeat N]
"""

from __future__ import annotations

import argparse
import binascii
import os
import random
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from kafka.record.default_records import DefaultRecordBatchBuilder

from gateway.api.formats import BASE64
from gateway.api.render import ndjson_lines, records_document
from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, iter_batches
from gateway.service.records import DecodedRecords, decode_records
from gateway.service.types import FetchedBatches, FetchedRecord, FetchResult, IsolationLevel

BATCH_BYTES = 16 * 1024
RU = IsolationLevel.READ_UNCOMMITTED


def make_pages(n: int, page_bytes: int) -> list[FetchResult]:
    """``n`` records in batches built by kafka-python, as fetches of ``page_bytes`` each."""
    rng = random.Random(15)
    pages: list[FetchResult] = []
    batches: list[bytes] = []
    offset, first, size, ts = 0, 0, 0, 1_700_000_000_000
    while offset < n:
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, BATCH_BYTES)
        count = min(BATCH_BYTES // 230, n - offset)
        for i in range(count):
            value = rng.randbytes(100).hex().encode()
            builder.append(i, ts + offset + i, b"user-%07d" % (offset + i), value, [])
        batch = builder.build()
        struct.pack_into(">q", batch, 0, offset)  # baseOffset: outside the CRC
        batches.append(bytes(batch))
        offset += count
        size += len(batch)
        if size >= page_bytes or offset == n:
            part = FetchedBatches(first, b"".join(batches), first, offset - 1)
            pages.append(FetchResult("bench", uuid.UUID(int=15), 0, (part,), offset, 0, n, None))
            batches, first, size = [], offset, 0
    return pages


def _b64(data: bytes | None) -> str | None:
    return None if data is None else binascii.b2a_base64(data, newline=False).decode("ascii")


def _before_records(result: FetchResult) -> list[FetchedRecord]:
    out, position = [], result.batches[0].first_offset
    for part in result.batches:
        for batch in iter_batches(part.data):
            epoch = batch.partition_leader_epoch
            log_append = bool(batch.attributes & TIMESTAMP_TYPE_MASK)
            for record in batch.records():  # the CRC, checked a second time
                if record.offset < position:
                    continue
                position = record.offset + 1
                stamp = batch.max_timestamp if log_append else record.timestamp
                out.append(FetchedRecord(record, record.offset, stamp, log_append,
                                   epoch if epoch >= 0 else None))  # fmt: skip
    return out


def _before_json(item: FetchedRecord) -> dict[str, Any]:
    record = item.record
    return {
        "offset": item.offset,
        "timestamp": item.timestamp,
        "timestamp_type": "LogAppendTime" if item.log_append_time else "CreateTime",
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [{"key": k, "value": _b64(v)} for k, v in record.headers],
        "leader_epoch": item.leader_epoch,
    }


def before_json(result: FetchResult) -> bytes:
    return orjson.dumps(
        {
            "topic": result.topic,
            "topic_id": "AAAAAAAAAAAAAAAAAAAADw",
            "partition": result.partition,
            "records": [_before_json(r) for r in _before_records(result)],
            "next_offset": result.next_offset,
            "log_start_offset": result.log_start_offset,
            "log_end_offset": result.log_end_offset,
            "end_of_remote_log": result.next_offset >= result.log_end_offset,
        }
    )


def before_ndjson(result: FetchResult) -> bytes:
    option = orjson.OPT_APPEND_NEWLINE
    return b"".join(orjson.dumps(_before_json(r), option=option) for r in _before_records(result))


def _now(result: FetchResult) -> DecodedRecords:
    return decode_records(result.batches, result.batches[0].first_offset, RU, None)


def now_json(result: FetchResult) -> bytes:
    return records_document(result, _now(result), BASE64)


def now_ndjson(result: FetchResult) -> bytes:
    return ndjson_lines(_now(result), BASE64)


def cpu_seconds(fn: Callable[[FetchResult], bytes], pages: list[FetchResult]) -> float:
    t0 = time.process_time()
    for page in pages:
        fn(page)
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--page-bytes", type=int, default=1 << 20, help="batch bytes per fetch")
    args = ap.parse_args()
    pages = make_pages(args.records, args.page_bytes)
    print(
        f"cores: {os.cpu_count()}  records: {args.records}  value: 200 B  key: 12 B  "
        f"pages: {len(pages)} of {args.page_bytes} B"
    )
    pairs = {"JSON": (before_json, now_json), "NDJSON": (before_ndjson, now_ndjson)}
    for name, (before, now) in pairs.items():
        if any(before(page) != now(page) for page in pages):
            raise RuntimeError(f"{name}: the two paths write different bytes")
        best = {before: float("inf"), now: float("inf")}
        for _ in range(args.repeat):
            for fn in (before, now):
                best[fn] = min(best[fn], cpu_seconds(fn, pages))
        rate_before, rate_now = args.records / best[before], args.records / best[now]
        print(
            f"{name:7s} decode+render  before {rate_before / 1e3:7.0f} k records/CPU-s   "
            f"now {rate_now / 1e3:7.0f} k records/CPU-s   {rate_now / rate_before:.2f}x"
        )


if __name__ == "__main__":
    main()
