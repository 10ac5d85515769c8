"""A records request's fetch and its pages, rendered as the records route
(:mod:`gateway.api.records`) and the console answer them: the JSON document of a page, or its
NDJSON record lines. :class:`RecordsFetch` reads a page's batches, then decodes and renders
its records in one turn of the request gate; :func:`page_document` is one page whole, held
against the in-flight budget while it is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from starlette.datastructures import State

from gateway.api.decoded import Decoding
from gateway.api.errors import error_body
from gateway.api.formats import BASE64, Encoders
from gateway.api.params import Context, deadline_after
from gateway.api.records_query import RecordsQuery
from gateway.api.render import (
    envelope,
    is_large,
    ndjson_line,
    ndjson_prefix,
    off_loop,
    records_document,
)
from gateway.deadline import Deadline
from gateway.errors import InvalidFormatError
from gateway.schemas.cache import Schemas
from gateway.service.admission import RequestGate
from gateway.service.protocol import Service
from gateway.service.types import FetchedRecord, FetchResult, IsolationLevel

T = TypeVar("T")
Render = Callable[["RecordsFetch", FetchResult, Sequence[FetchedRecord]], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class RecordsFetch:
    """One records request's reads and renderers: the partition, its isolation and deadline,
    how its keys, values and headers are written."""

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


async def ndjson_lines(
    fetch: RecordsFetch, result: FetchResult, records: Sequence[FetchedRecord]
) -> bytes | memoryview:
    """The page's lines; raises :class:`UnfitError` carrying those before a record that is not
    valid in its format."""
    large = is_large(result, records)
    if fetch.decoding is not None:
        loaded = await fetch.decoding.prepare(records)
        pieces, unfit = await off_loop(large, fetch.decoding.write, records, loaded, b"\n")
        lines: bytes | memoryview = b"".join(pieces) + b"\n" if pieces else b""
    else:
        lines, unfit = await off_loop(large, ndjson_prefix, records, fetch.encoders)
    if unfit is not None:
        raise UnfitError(lines, unfit)
    return lines


class UnfitError(Exception):
    """A page's lines before a record not valid in its format, and the error."""

    def __init__(self, lines: bytes | memoryview, error: InvalidFormatError) -> None:
        super().__init__(str(error))
        self.lines, self.error = lines, error

    def body(self) -> bytes:
        """The lines, then the error line; ``next_offset`` is the record's offset."""
        return bytes(self.lines) + ndjson_line(
            {**error_body(self.error), "next_offset": self.error.offset}
        )


def fetch_for(
    state: State,
    ctx: Context,
    topic: str,
    partition: int,
    query: RecordsQuery,
    *,
    deadline: Deadline,
) -> RecordsFetch:
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
    return RecordsFetch(
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
        result, body = await fetch.page(query.offset, page, json_document)
        return body, result
    finally:
        budget.release(held)


async def _ndjson_page(
    fetch: RecordsFetch, offset: int, page: int
) -> tuple[bytes | memoryview, FetchResult]:
    try:
        result, body = await fetch.page(offset, page, ndjson_lines)
    except UnfitError as unfit:
        raise unfit.error from None
    return body, result


async def json_document(
    fetch: RecordsFetch, result: FetchResult, records: Sequence[FetchedRecord]
) -> bytes | memoryview:
    """The page's JSON document; raises the :class:`InvalidFormatError` of a record that is
    not valid in its format."""
    large = is_large(result, records)
    if fetch.decoding is None:
        return await off_loop(large, records_document, result, records, fetch.encoders)
    loaded = await fetch.decoding.prepare(records)
    pieces, unfit = await off_loop(large, fetch.decoding.write, records, loaded, b",")
    if unfit is not None:
        raise unfit
    before, after = envelope(result)
    return b"".join([before, *pieces, after])
