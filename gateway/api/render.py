"""Service values to response bytes: record JSON, NDJSON lines, raw batches, Accept choice.

Keys, values and header values are standard base64 (``null`` stays ``null``); header keys are
strings. Rendering a large page (base64 plus orjson) is CPU work, so :func:`off_loop` moves it
to a worker thread past :data:`OFFLOAD_RECORDS` records or :data:`OFFLOAD_BYTES` batch bytes.
"""

from __future__ import annotations

import binascii
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import anyio.to_thread
import orjson

from gateway.errors import NotAcceptableError
from gateway.kafka.batch import iter_batches
from gateway.remote.keys import encode_uuid
from gateway.service.types import (
    AbortedTransaction,
    FetchedBatches,
    FetchedRecord,
    FetchResult,
    PartitionInfo,
    SegmentInfo,
)

T = TypeVar("T")

JSON: Final = "application/json"
NDJSON: Final = "application/x-ndjson"
RAW: Final = "application/octet-stream"
SUPPORTED: Final = (JSON, NDJSON, RAW)
_ALIASES: Final = {"application/jsonl": NDJSON, "application/x-jsonlines": NDJSON}
OFFLOAD_RECORDS: Final = 256
OFFLOAD_BYTES: Final = 256 * 1024
MAX_ABORTED_HEADER: Final = 8 * 1024  # bytes of the X-Aborted-Transactions value


def _ranges(accept: str) -> list[tuple[str, float]]:
    ranges = []
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        ranges.append((_ALIASES.get(media, media), quality))
    return ranges


def _quality(media_type: str, ranges: list[tuple[str, float]]) -> float:
    """The q of the most specific range matching ``media_type`` (0 when none does)."""
    best_specificity, quality = -1, 0.0
    for media, q in ranges:
        if media == media_type:
            specificity = 2
        elif media == media_type.split("/", maxsplit=1)[0] + "/*":
            specificity = 1
        elif media == "*/*":
            specificity = 0
        else:
            continue
        if specificity > best_specificity:
            best_specificity, quality = specificity, q
    return quality


def choose_media_type(accept: str | None) -> str:
    """The supported type the ``Accept`` header ranks highest (RFC 9110: each type takes the
    q-value of the most specific range matching it); ties go to JSON, then NDJSON, then raw.
    No header: JSON."""
    if accept is None or not accept.strip():
        return JSON
    ranges = _ranges(accept)
    quality, chosen = max((_quality(t, ranges), -i) for i, t in enumerate(SUPPORTED))
    if quality <= 0:
        raise NotAcceptableError(f"Accept {accept!r}: this resource is {', '.join(SUPPORTED)}")
    return SUPPORTED[-chosen]


def topic_id_text(topic_id: uuid.UUID) -> str:
    return encode_uuid(topic_id)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else binascii.b2a_base64(data, newline=False).decode("ascii")


def record_json(item: FetchedRecord) -> dict[str, Any]:
    record = item.record
    return {
        "offset": item.offset,
        "timestamp": item.timestamp,
        "timestamp_type": "LogAppendTime" if item.log_append_time else "CreateTime",
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [{"key": key, "value": _b64(value)} for key, value in record.headers],
        "leader_epoch": item.leader_epoch,
    }


def records_document(result: FetchResult, records: Sequence[FetchedRecord]) -> bytes:
    return orjson.dumps(
        {
            "topic": result.topic,
            "topic_id": topic_id_text(result.topic_id),
            "partition": result.partition,
            "records": [record_json(r) for r in records],
            "next_offset": result.next_offset,
            "log_start_offset": result.log_start_offset,
            "log_end_offset": result.log_end_offset,
        }
    )


def ndjson_lines(records: Sequence[FetchedRecord]) -> bytes:
    dumps, option = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    return b"".join(dumps(record_json(r), option=option) for r in records)


def ndjson_line(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_APPEND_NEWLINE)


def batch_bytes(result: FetchResult) -> int:
    return sum(len(b.data) for b in result.batches)


def _aborted_json(t: AbortedTransaction) -> dict[str, int]:
    return {"producer_id": t.producer_id, "first_offset": t.first_offset}


def fit_aborted_header(result: FetchResult, limit: int = MAX_ABORTED_HEADER) -> FetchResult:
    """A raw response whose ``X-Aborted-Transactions`` header stays within ``limit`` bytes
    (clients refuse huge headers: h11 and Go stop near 16 KiB, nginx at 4-8 KiB): when the
    transactions overflow it, the response ends with the last whole batch before the first
    transaction that does not fit; ``next_offset`` tells the client where to go on. The first
    batch is always kept (at least one batch, as in every fetch)."""
    txns = result.aborted_transactions
    if not txns:
        return result
    used, fit = 2, 0  # "[]"
    for t in txns:
        used += len(orjson.dumps(_aborted_json(t))) + (1 if fit else 0)
        if used > limit:
            break
        fit += 1
    if fit == len(txns):
        return result
    stop = txns[fit].first_offset  # kept batches must end before this transaction starts
    kept: list[FetchedBatches] = []
    for part in result.batches:
        cut, last = 0, -1
        for batch in iter_batches(part.data):
            if batch.last_offset >= stop and (kept or cut):
                break
            cut, last = batch.position + batch.size_in_bytes, batch.last_offset
        if cut:
            kept.append(FetchedBatches(part.segment_start_offset, part.data[:cut],
                                       part.first_offset, last))  # fmt: skip
        if cut < len(part.data):
            break
    if not kept:
        return result
    end = kept[-1].last_offset
    return dataclasses.replace(
        result,
        batches=tuple(kept),
        next_offset=end + 1,
        aborted_transactions=tuple(t for t in txns if t.first_offset <= end),
    )


def raw_headers(result: FetchResult) -> dict[str, str]:
    """The headers of an ``application/octet-stream`` fetch."""
    headers = {
        "X-Topic-Id": topic_id_text(result.topic_id),
        "X-Next-Offset": str(result.next_offset),
        "X-Log-Start-Offset": str(result.log_start_offset),
        "X-Log-End-Offset": str(result.log_end_offset),
    }
    if result.batches:
        headers["X-First-Offset"] = str(result.batches[0].first_offset)
    if result.aborted_transactions is not None:
        aborted = [_aborted_json(t) for t in result.aborted_transactions]
        headers["X-Aborted-Transactions"] = orjson.dumps(aborted).decode("ascii")
    return headers


async def off_loop(large: bool, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, in a worker thread when the work is ``large``."""
    if large:
        return await anyio.to_thread.run_sync(fn, *args)
    return fn(*args)


def is_large(result: FetchResult, records: Sequence[FetchedRecord]) -> bool:
    return len(records) > OFFLOAD_RECORDS or batch_bytes(result) > OFFLOAD_BYTES


def leader_epochs(pairs: Sequence[tuple[int, int]]) -> list[dict[str, int]]:
    return [{"epoch": epoch, "start_offset": start} for epoch, start in pairs]


def partition_json(info: PartitionInfo) -> dict[str, Any]:
    return {
        "topic": info.topic,
        "topic_id": topic_id_text(info.topic_id),
        "partition": info.partition,
        "remote_log_start_offset": info.remote_log_start_offset,
        "remote_log_end_offset": info.remote_log_end_offset,
        "size": info.size,
        "segment_count": info.segment_count,
        "leader_epochs": leader_epochs(info.leader_epochs),
    }


def segment_json(info: SegmentInfo) -> dict[str, Any]:
    return {
        "segment_id": info.segment_id,
        "start_offset": info.start_offset,
        "end_offset": info.end_offset,
        "state": info.state,
        "size": info.size,
        "max_timestamp_ms": info.max_timestamp_ms,
        "event_timestamp_ms": info.event_timestamp_ms,
        "leader_epochs": leader_epochs(info.leader_epochs),
        "txn_index_empty": info.txn_index_empty,
    }
