"""``GET /v1/topics/{topic}/partitions/{partition}/records``: a fetch, in three representations.

* ``application/json`` (default): one page of at most ``max_bytes`` of record batches
  (default: the ``default_max_bytes`` setting), decoded.
* ``application/x-ndjson``: records streamed one per line, page after page of at most
  ``stream_page_bytes``, until ``max_bytes`` of record batches have been read (default: the
  ``max_response_bytes`` setting) or the end of what is readable is reached (the remote log
  end; for read_committed the last stable offset); the last line is ``{"next_offset",
  "log_start_offset", "log_end_offset", "last_stable_offset", "end_of_remote_log"}``, or an
  error body (with ``next_offset``, where to resume) when a later page fails or a record is
  not valid in the asked format. Only one page is held at a time.
  The stream shares the request's deadline: once it has passed, the stream ends normally after
  the current page.
* ``application/octet-stream``: the record batches as stored, concatenated, with the offsets in
  ``X-*`` headers (sent as views of the cached segment bytes, never joined into one copy);
  for read_committed, ``X-Aborted-Transactions`` lists the aborted transactions so the client
  can filter as a Kafka consumer does, and ``X-Last-Stable-Offset`` is sent.
  ``key_format``, ``value_format`` and ``header_format`` do not apply.

A fetch at exactly the remote log end answers as Kafka's fetch at the high watermark: 200, no
records, ``next_offset`` the offset asked, ``end_of_remote_log`` true (raw:
``X-End-Of-Remote-Log: true``); past it, 416 ``offset_out_of_range``. ``end_of_remote_log`` is
true whenever ``next_offset`` has reached ``log_end_offset`` (read_committed: the last stable
offset, below), so a paging client stops there (docs/paging.md).

read_committed reads as a broker's consumer does, up to the remote last stable offset (LSO:
the first offset of the oldest transaction whose marker is not tiered yet;
:mod:`gateway.service.stable`). Its answers carry ``last_stable_offset`` (JSON and the NDJSON
closing line; raw: ``X-Last-Stable-Offset``), and ``end_of_remote_log`` is true once
``next_offset`` has reached it, so a paging client stops there instead of asking at the LSO
(a request at or past it, below the log end, is the retriable 503 ``transaction_pending``,
whose body carries the bounds). read_uncommitted answers carry ``last_stable_offset`` null
(raw: no header): the LSO is not computed for them.

``max_bytes`` counts record batch bytes as stored, like Kafka's fetch: at least one whole batch
is returned even when it is larger, so a page may exceed it by one batch.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Final, Literal, TypeVar, cast

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import State
from starlette.responses import Response, StreamingResponse

from gateway.api.auth import ReadableTopic
from gateway.api.buffers import BuffersResponse, HeldResponse, release_once
from gateway.api.decoded import Decoding
from gateway.api.direct import direct_route
from gateway.api.errors import error_body
from gateway.api.formats import BASE64, EmbeddedFormat, Encoders, RecordFormat
from gateway.api.models import RecordsResponse, error_responses
from gateway.api.params import (
    MAX_BYTES_MAX,
    TIMEOUT_MS,
    TIMEOUT_MS_MAX,
    Context,
    PartitionNumber,
    ReadyContext,
    deadline_after,
)
from gateway.api.render import (
    NDJSON,
    RAW,
    batch_bytes,
    choose_media_type,
    envelope,
    fit_aborted_header,
    is_large,
    ndjson_line,
    ndjson_prefix,
    off_loop,
    offsets_json,
    raw_headers,
    readable_end,
    records_document,
)
from gateway.deadline import Deadline
from gateway.errors import GatewayError, InvalidFormatError, InvalidRequestError
from gateway.schemas.cache import Schemas
from gateway.service.admission import RequestGate, raw_reservation
from gateway.service.protocol import Service
from gateway.service.types import FetchedRecord, FetchResult, IsolationLevel

log = logging.getLogger(__name__)

STREAM_SLICE: Final = 256 * 1024
"""An NDJSON page is sent in slices of this size: the server's chunked framing copies what it
sends, and a slice is all it copies at once (docs/benchmarks.md, load test)."""

_FORMAT: Final = (
    "how {} are written: base64 (standard), hex, string (UTF-8) or json (an embedded JSON "
    "value); not valid in it: 422 invalid_format. JSON and NDJSON only"
)
_READER: Final = (
    "avro {}s only: resolve each record to this registered schema (Avro schema resolution: "
    "fields it adds take their defaults, fields it lacks are dropped; not resolvable: "
    "422 invalid_format)"
)
_SCHEMA_FORMAT: Final = (
    _FORMAT[:-24] + "; or decoded with the schema registry: avro, protobuf, jsonschema (the "
    "Confluent wire format; the record gains {}_schema_id), auto (the registry's schema type "
    "for a framed payload, else string when UTF-8, else base64). JSON and NDJSON only"
)

RAW_HEADERS: Final = {
    "X-Topic-Id": "the topic id (Kafka Uuid.toString())",
    "X-Next-Offset": "one past the last offset considered: fetch from here",
    "X-Log-Start-Offset": "the remote log start offset",
    "X-Log-End-Offset": "one past the highest remote offset",
    "X-End-Of-Remote-Log": "true when X-Next-Offset is X-Log-End-Offset (read_committed: "
    "X-Last-Stable-Offset): nothing more to read until more is tiered",
    "X-Last-Stable-Offset": "read_committed only: the remote last stable offset, the first "
    "offset of a transaction not decided in the remote tier (X-Log-End-Offset when none is "
    "open); reads stop there",
    "X-First-Offset": "the base offset of the first batch (it may precede `offset`)",
    "X-Aborted-Transactions": "read_committed only: JSON list of {producer_id, first_offset}, "
    "at most 8 KiB (a response with more ends early: follow X-Next-Offset)",
}
_OK: Final = {
    "model": RecordsResponse,
    "description": "records from `offset` on, in the representation the Accept header asks for",
    "content": {
        NDJSON: {
            "schema": {"type": "string"},
            "example": '{"offset":0,...}\n{"next_offset":1,"log_start_offset":0,'
            '"log_end_offset":10,"last_stable_offset":null,"end_of_remote_log":false}\n',
        },
        RAW: {"schema": {"type": "string", "format": "binary"}},
    },
    "headers": {
        name: {"description": text, "schema": {"type": "string"}}
        for name, text in RAW_HEADERS.items()
    },
}


T = TypeVar("T")
Render = Callable[["_Fetch", FetchResult, Sequence[FetchedRecord]], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class _Fetch:
    service: Service
    topic: str
    partition: int
    isolation: IsolationLevel
    deadline: Deadline
    encoders: Encoders
    decoding: Decoding | None  # keys or values decoded with a schema, or decode_errors=raw
    state: State  # the request's: where the audit log finds the offsets served
    gate: RequestGate  # turns for the CPU of a page: decoding and writing it

    async def batches(self, offset: int, max_bytes: int) -> FetchResult:
        result = await self.service.fetch(
            self.topic,
            self.partition,
            offset,
            max_bytes=max_bytes,
            isolation=self.isolation,
            deadline=self.deadline,
        )
        self.state.next_offset = result.next_offset
        return result

    async def page(
        self, offset: int, max_bytes: int, render: Render[T], *, admitted: bool = False
    ) -> tuple[FetchResult, T]:
        """A page's batches, then its records decoded and rendered in one turn of the gate
        (the read itself, which may wait on the store, takes none); ``admitted``: a stream's
        later page, which waits for its turn rather than being refused."""
        result = await self.batches(offset, max_bytes)
        async with self.gate.turn(self.deadline, admitted=admitted):
            records = await self.service.decode(result, offset, self.isolation)
            return result, await render(self, result, records)


async def _lines(
    fetch: _Fetch, result: FetchResult, records: Sequence[FetchedRecord]
) -> bytes | memoryview:
    """The page's lines; raises :class:`_UnfitError` carrying those before a record that is not
    valid in its format."""
    large = is_large(result, records)
    if fetch.decoding is not None:
        loaded = await fetch.decoding.prepare(records)
        pieces, unfit = await off_loop(large, fetch.decoding.write, records, loaded, b"\n")
        lines: bytes | memoryview = b"".join(pieces) + b"\n" if pieces else b""
    else:
        lines, unfit = await off_loop(large, ndjson_prefix, records, fetch.encoders)
    if unfit is not None:
        raise _UnfitError(lines, unfit)
    return lines


class _UnfitError(Exception):
    """A page's lines before a record not valid in its format, and the error."""

    def __init__(self, lines: bytes | memoryview, error: InvalidFormatError) -> None:
        super().__init__(str(error))
        self.lines, self.error = lines, error

    def body(self) -> bytes:
        """The lines, then the error line; ``next_offset`` is the record's offset."""
        return bytes(self.lines) + ndjson_line(
            {**error_body(self.error), "next_offset": self.error.offset}
        )


async def _stream(
    fetch: _Fetch,
    first: tuple[FetchResult, bytes | memoryview],
    budget: int,
    page_bytes: int,
) -> AsyncIterator[bytes | memoryview]:
    """NDJSON lines, one page at a time; see the module docstring."""
    result, lines = first
    del first  # the first page is not held for the whole stream
    used = batch_bytes(result)
    offset = result.next_offset
    try:
        while True:
            view = memoryview(lines)
            del lines  # not held while the next page is read: only the slice being sent is
            for at in range(0, len(view), STREAM_SLICE):
                yield view[at : at + STREAM_SLICE]
            del view
            done = used >= budget or offset >= readable_end(result)  # never ask at the LSO
            if done or fetch.deadline.remaining() <= 0 or fetch.state.drain.is_set():
                break  # the closing line says where to go on (the server may be stopping)
            asked = min(page_bytes, budget - used)
            result, lines = await fetch.page(offset, asked, _lines, admitted=True)
            if result.next_offset <= offset:  # no progress: never loop on the same offset
                break
            used += batch_bytes(result)
            offset = result.next_offset
    except _UnfitError as unfit:
        yield unfit.body()
        return
    except Exception as exc:
        if not isinstance(exc, GatewayError):
            log.exception("NDJSON stream of %s/%d failed", fetch.topic, fetch.partition)
        yield ndjson_line({**error_body(exc), "next_offset": offset})
        return
    yield ndjson_line(offsets_json(result, offset))


class RecordsQuery(BaseModel):
    """The query of a records request, validated as one model (one pass of pydantic-core
    instead of FastAPI's per-parameter machinery: issue 15)."""

    model_config = ConfigDict(extra="ignore")

    offset: int = Field(ge=0, description="the first offset wanted", examples=[0])
    max_bytes: int | None = Field(
        None,
        ge=1,
        description="record batch bytes to read (at least one batch); for NDJSON the whole "
        "stream's budget. Default: the default_max_bytes setting, for NDJSON "
        "max_response_bytes; at most max_response_bytes (the maximum here is its default)",
        json_schema_extra=MAX_BYTES_MAX,
    )
    isolation_level: IsolationLevel = Field(
        IsolationLevel.READ_UNCOMMITTED,
        description="read_committed drops aborted transactions and stops at the last stable "
        "offset (the first offset of a transaction not decided in the remote tier), as a Kafka "
        "consumer does (any case)",
    )
    key_format: RecordFormat = Field(
        RecordFormat.BASE64, description=_SCHEMA_FORMAT.format("keys", "key")
    )
    value_format: RecordFormat = Field(
        RecordFormat.BASE64, description=_SCHEMA_FORMAT.format("values", "value")
    )
    header_format: EmbeddedFormat = Field(
        EmbeddedFormat.BASE64, description=_FORMAT.format("header values")
    )
    key_reader_schema_id: int | None = Field(
        None, ge=1, le=2**31 - 1, description=_READER.format("key")
    )
    value_reader_schema_id: int | None = Field(
        None, ge=1, le=2**31 - 1, description=_READER.format("value")
    )
    decode_errors: Literal["fail", "raw"] = Field(
        "fail",
        description="fail: a key, value or header value not valid in its format is 422 "
        "invalid_format naming its offset; raw: the page goes on and that field is null "
        "beside key_error / value_error ({message, raw}: raw in standard base64; a header: "
        "error and raw beside its value)",
    )
    timeout_ms: int | None = Field(
        None, ge=1, description=TIMEOUT_MS, json_schema_extra=TIMEOUT_MS_MAX
    )


def router() -> APIRouter:
    r = APIRouter(prefix="/v1", tags=["records"])

    async def get_records(
        *,
        request: Request,
        ctx: ReadyContext,
        topic: ReadableTopic,
        partition: PartitionNumber,
        query: Annotated[RecordsQuery, Query()],
    ) -> Response:
        """Records from `offset` on: JSON (default), NDJSON stream, or raw record batches
        (by the Accept header). At exactly the remote log end: no records and
        `end_of_remote_log` true (raw: `X-End-Of-Remote-Log: true`); past it: 416.
        read_committed reads up to `last_stable_offset` (raw: `X-Last-Stable-Offset`; null
        for read_uncommitted) and says `end_of_remote_log` true once `next_offset` reaches it;
        a request at or past it, below the log end: 503 `transaction_pending` with the
        bounds.
        A key, value or header value not valid in the asked format: 422 `invalid_format`
        naming the offset (NDJSON: the stream's last line, after the records before it)."""
        return await serve_records(request, ctx, topic, partition, query)

    r.add_api_route(
        "/topics/{topic}/partitions/{partition}/records",
        get_records,
        methods=["GET"],
        response_model=None,
        responses={200: _OK, **error_responses(400, 403, 404, 406, 416, 422, 502, 503, 504)},
        route_class_override=direct_route(RecordsQuery, serve_records),  # gateway.api.direct
    )
    return r


async def serve_records(
    request: Request, ctx: Context, topic: str, partition: int, query: RecordsQuery
) -> Response:
    """The records route once its parameters are checked and the topic authorised."""
    _, settings, budget, gate = ctx
    media_type = choose_media_type(request.headers.get("accept"))
    deadline = deadline_after(settings, query.timeout_ms)
    max_bytes = query.max_bytes
    if max_bytes is not None and max_bytes > settings.max_response_bytes:
        raise InvalidRequestError(
            f"max_bytes {max_bytes} exceeds the maximum {settings.max_response_bytes}",
            "max_bytes",
        )
    fetch = fetch_for(request.state, ctx, topic, partition, query, deadline=deadline)
    if media_type == NDJSON:
        total = max_bytes or settings.max_response_bytes
        page = min(settings.stream_page_bytes, total)  # a stream holds one page at a time
    else:
        total = page = max_bytes or settings.default_max_bytes
    gate.admit()  # not while the event loop runs late
    # The page's share of the bytes in flight, held until the response is sent.
    held = await budget.acquire(raw_reservation(page) if media_type == RAW else page, deadline)
    release = release_once(lambda: budget.release(held))
    try:
        response = await _respond(fetch, media_type, query.offset, total, page)
    except BaseException:
        release()
        raise
    return HeldResponse(response, release)


def fetch_for(
    state: State,
    ctx: Context,
    topic: str,
    partition: int,
    query: RecordsQuery,
    *,
    deadline: Deadline,
) -> _Fetch:
    """The reads and renderers of ``query`` (its formats, the registry's schemas)."""
    decoding = Decoding.of(
        query.key_format,
        query.value_format,
        query.header_format,
        query.decode_errors == "raw",
        cast(Schemas | None, getattr(state, "schemas", None)),
        readers=(query.key_reader_schema_id, query.value_reader_schema_id),
    )
    encoders = BASE64
    if decoding is None:
        key, value = query.key_format.embedded, query.value_format.embedded
        assert key is not None and value is not None  # else decoding
        encoders = Encoders.of(key, value, query.header_format)
    service, _, _, gate = ctx
    return _Fetch(
        service, topic, partition, query.isolation_level, deadline, encoders, decoding, state, gate
    )


async def page_document(
    state: State,
    ctx: Context,
    topic: str,
    partition: int,
    query: RecordsQuery,
    *,
    lines: bool = False,
) -> tuple[bytes | memoryview, FetchResult]:
    """One page as the records route answers it (``query.max_bytes`` of batches, the default
    when None): its JSON document, or with ``lines`` its NDJSON record lines (no closing line),
    and the fetch it rendered: what the console renders, scans and downloads. Held against the
    in-flight budget while it is built."""
    _, settings, budget, gate = ctx
    deadline = deadline_after(settings, query.timeout_ms)
    fetch = fetch_for(state, ctx, topic, partition, query, deadline=deadline)
    page = min(query.max_bytes or settings.default_max_bytes, settings.max_response_bytes)
    gate.admit()
    held = await budget.acquire(page, deadline)
    try:
        if lines:
            return await _ndjson_page(fetch, query.offset, page)
        result, body = await fetch.page(query.offset, page, _document)
        return body, result
    finally:
        budget.release(held)


async def _ndjson_page(
    fetch: _Fetch, offset: int, page: int
) -> tuple[bytes | memoryview, FetchResult]:
    try:
        result, body = await fetch.page(offset, page, _lines)
    except _UnfitError as unfit:
        raise unfit.error from None
    return body, result


async def _respond(fetch: _Fetch, media_type: str, offset: int, total: int, page: int) -> Response:
    """The answer in ``media_type``: ``total`` batch bytes at most, ``page`` at a time."""
    if media_type == NDJSON:
        try:
            result, lines = await fetch.page(offset, page, _lines)
        except _UnfitError as unfit:
            if not unfit.lines:  # the first record: nothing to stream before the error
                raise unfit.error from None
            return Response(unfit.body(), media_type=NDJSON)
        return StreamingResponse(_stream(fetch, (result, lines), total, page), media_type=NDJSON)
    if media_type == RAW:
        result = fit_aborted_header(await fetch.batches(offset, total))
        return BuffersResponse(
            [b.data for b in result.batches], media_type=RAW, headers=raw_headers(result)
        )
    _, body = await fetch.page(offset, total, _document)
    return Response(body, media_type="application/json")


async def _document(
    fetch: _Fetch, result: FetchResult, records: Sequence[FetchedRecord]
) -> bytes | memoryview:
    large = is_large(result, records)
    if fetch.decoding is None:
        return await off_loop(large, records_document, result, records, fetch.encoders)
    loaded = await fetch.decoding.prepare(records)
    pieces, unfit = await off_loop(large, fetch.decoding.write, records, loaded, b",")
    if unfit is not None:
        raise unfit
    before, after = envelope(result)
    return b"".join([before, *pieces, after])
