"""Service values to response bytes: record JSON, NDJSON lines, raw batches, Accept choice.

Keys, values and header values are in the formats the request asks for
(:mod:`gateway.api.formats`; standard base64 by default, ``null`` stays ``null``); header keys
are strings; records are written in bulk (:mod:`gateway.api.recordjson`). Every fetch says
whether it reached the end of the remote log: ``next_offset`` at ``log_end_offset``, or for
read_committed at ``last_stable_offset`` (the first offset of a transaction still open in the
remote tier), past which nothing is readable until more is tiered.
Rendering a large page (base64 of every key and value) is CPU work, so
:func:`off_loop` moves it to a worker thread past :data:`OFFLOAD_RECORDS` records or
:data:`OFFLOAD_BYTES` batch bytes.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import anyio.to_thread
import orjson

from gateway.api.formats import BASE64, Encoders
from gateway.api.recordjson import Buffer, Writer, write
from gateway.errors import InvalidFormatError, NotAcceptableError
from gateway.kafka.batch import iter_batches
from gateway.kafka.uuids import encode_uuid
from gateway.service.records import ColumnRecords
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


def readable_end(result: FetchResult) -> int:
    """Where reading stops at the fetch's isolation level: the remote last stable offset for
    read_committed (at or past it, below the end, a fetch is 503 ``transaction_pending``), the
    remote log end for read_uncommitted."""
    stable = result.last_stable_offset
    return result.log_end_offset if stable is None else min(stable, result.log_end_offset)


def end_of_remote_log(result: FetchResult, next_offset: int | None = None) -> bool:
    """Whether ``next_offset`` (default: the result's) has reached :func:`readable_end`:
    nothing more to read (yet) at the fetch's isolation level."""
    offset = result.next_offset if next_offset is None else next_offset
    return offset >= readable_end(result)


def offsets_json(result: FetchResult, next_offset: int | None = None) -> dict[str, Any]:
    """The offsets every fetch answer ends with (JSON body, NDJSON closing line):
    ``last_stable_offset`` is null for read_uncommitted (not computed: reads go to the end)."""
    offset = result.next_offset if next_offset is None else next_offset
    return {
        "next_offset": offset,
        "log_start_offset": result.log_start_offset,
        "log_end_offset": result.log_end_offset,
        "last_stable_offset": result.last_stable_offset,
        "end_of_remote_log": end_of_remote_log(result, offset),
    }


def envelope(result: FetchResult) -> tuple[bytes, bytes]:
    """The JSON document of a page before and after its records' text."""
    head = orjson.dumps(
        {
            "topic": result.topic,
            "topic_id": topic_id_text(result.topic_id),
            "partition": result.partition,
        }
    )
    tail = orjson.dumps(offsets_json(result))
    return head[:-1] + b',"records":[', b"]," + tail[1:]


def records_document(
    result: FetchResult, records: Sequence[FetchedRecord], encoders: Encoders = BASE64
) -> bytes | memoryview:
    """The JSON document of a page: ``orjson.dumps`` of its object, the records' text
    (:mod:`gateway.api.recordjson`) written between its two halves, in one join."""
    before, after = envelope(result)
    fast = _compiled(records, encoders, b",", before, after)
    if fast is not None:
        return fast
    out: list[Buffer] = [before]
    write(records, encoders, b",", out)
    out.append(after)
    return b"".join(out)


def _compiled(
    records: Sequence[FetchedRecord], encoders: Encoders, sep: bytes, prefix: bytes, suffix: bytes
) -> memoryview | None:
    """The whole body by the compiled writer when it takes ``records``
    (:mod:`gateway.api.jsonkernel`), else None."""
    if not isinstance(records, ColumnRecords) or not len(records):
        return None
    from gateway.api import jsonkernel  # noqa: PLC0415 - numba, loaded with ColumnRecords

    codes = jsonkernel.formats_of(encoders)
    if codes is None:
        return None
    return jsonkernel.write(records, codes, sep, prefix=prefix, suffix=suffix)


def _lines(out: list[Buffer]) -> bytes:
    if out:
        out.append(b"\n")
    return b"".join(out)


def ndjson_lines(
    records: Sequence[FetchedRecord], encoders: Encoders = BASE64
) -> bytes | memoryview:
    """The lines of ``records``; raises :class:`InvalidFormatError` naming the first record
    not valid in its format."""
    lines, error = ndjson_prefix(records, encoders)
    if error is not None:
        raise error
    return lines


def ndjson_prefix(
    records: Sequence[FetchedRecord], encoders: Encoders
) -> tuple[bytes | memoryview, InvalidFormatError | None]:
    """The lines of ``records``; when one is not valid in its format, the lines of those
    before it and the error (so a stream ends at the record, never skipping it)."""
    fast = _compiled(records, encoders, b"\n", b"", b"\n")
    if fast is not None:
        return fast, None
    out: list[Buffer] = []
    error = Writer(encoders, b"\n").render(records, out)
    return _lines(out), error


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
        "X-End-Of-Remote-Log": "true" if end_of_remote_log(result) else "false",
    }
    if result.last_stable_offset is not None:
        headers["X-Last-Stable-Offset"] = str(result.last_stable_offset)
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
        "displaced": info.displaced,
        "displaced_by": info.displaced_by,
    }
