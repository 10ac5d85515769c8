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

The query is one model (:mod:`gateway.api.records_query`); a page's fetch and its JSON or
NDJSON rendering, which the console shares, are :mod:`gateway.api.records_pages` (its
:func:`page_document` and :func:`fetch_for` are importable from here too).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Final

from fastapi import APIRouter, Query, Request
from starlette.responses import Response, StreamingResponse

from gateway.api.auth import ReadableTopic
from gateway.api.buffers import BuffersResponse, HeldResponse, release_once
from gateway.api.direct import direct_route
from gateway.api.errors import error_body
from gateway.api.models import RecordsResponse, error_responses
from gateway.api.params import Context, PartitionNumber, ReadyContext, deadline_after
from gateway.api.records_pages import (
    RecordsFetch,
    UnfitError,
    fetch_for,
    json_document,
    ndjson_lines,
    page_document,
)
from gateway.api.records_query import RecordsQuery
from gateway.api.render import (
    NDJSON,
    RAW,
    batch_bytes,
    choose_media_type,
    fit_aborted_header,
    ndjson_line,
    offsets_json,
    raw_headers,
    readable_end,
)
from gateway.errors import GatewayError, InvalidRequestError
from gateway.service.admission import raw_reservation
from gateway.service.types import FetchResult

log = logging.getLogger(__name__)

STREAM_SLICE: Final = 256 * 1024
"""An NDJSON page is sent in slices of this size: the server's chunked framing copies what it
sends, and a slice is all it copies at once (docs/benchmarks.md, load test)."""

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


async def _stream(
    fetch: RecordsFetch,
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
            result, lines = await fetch.page(offset, asked, ndjson_lines, admitted=True)
            if result.next_offset <= offset:  # no progress: never loop on the same offset
                break
            used += batch_bytes(result)
            offset = result.next_offset
    except UnfitError as unfit:
        yield unfit.body()
        return
    except Exception as exc:
        if not isinstance(exc, GatewayError):
            log.exception("NDJSON stream of %s/%d failed", fetch.topic, fetch.partition)
        yield ndjson_line({**error_body(exc), "next_offset": offset})
        return
    yield ndjson_line(offsets_json(result, offset))


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


async def _respond(
    fetch: RecordsFetch, media_type: str, offset: int, total: int, page: int
) -> Response:
    """The answer in ``media_type``: ``total`` batch bytes at most, ``page`` at a time."""
    if media_type == NDJSON:
        try:
            result, lines = await fetch.page(offset, page, ndjson_lines)
        except UnfitError as unfit:
            if not unfit.lines:  # the first record: nothing to stream before the error
                raise unfit.error from None
            return Response(unfit.body(), media_type=NDJSON)
        return StreamingResponse(_stream(fetch, (result, lines), total, page), media_type=NDJSON)
    if media_type == RAW:
        result = fit_aborted_header(await fetch.batches(offset, total))
        return BuffersResponse(
            [b.data for b in result.batches], media_type=RAW, headers=raw_headers(result)
        )
    _, body = await fetch.page(offset, total, json_document)
    return Response(body, media_type="application/json")


__all__ = [
    "RAW_HEADERS",
    "STREAM_SLICE",
    "RecordsQuery",
    "fetch_for",
    "page_document",
    "router",
    "serve_records",
]
