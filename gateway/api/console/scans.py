"""The console's reads of many pages: search (with its plan), the key lookup, downloads.

A search page first shows its plan, from segment metadata alone: how many segments and
stored bytes it would read, and where its byte budget stops it. Started, it streams as HTML:
each page's matches, then a progress line; it stops at the end, at ``until``, at the budget
or at ``max_matches``, with a link that goes on from where it stopped. Closing the page (or
the Cancel button, which stops the load) cancels it: the server stops reading when the
connection goes.

A download is the records route's NDJSON record lines, exactly, for offsets [``from``,
``until``), streamed page by page; ``.sha256`` streams the same range again and answers its
SHA-256 in ``sha256sum``'s format (the download's own digest is written to the log line when
it ends). ``--no-console-downloads`` turns both off.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Final, cast

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from gateway.api.auth import access_of
from gateway.api.console import web
from gateway.api.console.routes import (
    View,
    context,
    describable,
    page_reader,
    readable_end,
    shown_record,
)
from gateway.api.console.search import Filter, Progress, scan
from gateway.api.console.view import key_partition, plan
from gateway.api.params import Context
from gateway.api.records import page_document
from gateway.errors import GatewayError, InvalidRequestError
from gateway.security.acl import Operation
from gateway.service.types import IsolationLevel

log = logging.getLogger(__name__)

MAX_MATCHES: Final = 1000
_KEY_ENCODINGS: Final = ("string", "hex")


def _filter(query: web.Query) -> Filter:
    equals = query.params.get("key_equals")
    return Filter(
        key=query.text("key"),
        key_equals=equals,
        value=query.text("value"),
        header=query.text("header", "", 256),
        header_value=query.text("header_value"),
        json_path=query.text("json_path", "", 256),
        json_value=query.text("json_value"),
    )


def _readable(request: Request, who: str, topic: str) -> None:
    access_of(request).check_topic(who, web.host(request), Operation.READ, topic)


async def _bounds(
    ctx: Context, topic: str, partition: int, query: web.Query, view: View
) -> tuple[int, int]:
    """``from`` and ``until`` within what the view can read: the remote log, and for
    read_committed up to its last stable offset."""
    info = await ctx.service.partition(topic, partition)
    end = info.remote_log_end_offset
    if view.isolation == IsolationLevel.READ_COMMITTED:  # the LSO reads transaction indexes
        end = await readable_end(ctx, topic, partition, view)
    start = cast(int, query.integer("from", info.remote_log_start_offset))
    until = cast(int, query.integer("until", end))
    return max(start, info.remote_log_start_offset), min(until, end)


async def search_page(request: Request, topic: str, partition: int) -> Response:
    ctx = context(request)
    who, _ = await describable(request, topic)
    _readable(request, who, topic)
    query = web.Query(request.query_params)
    view = View.of(query, ctx.settings)
    flt = _filter(query)
    start, until = await _bounds(ctx, topic, partition, query, view)
    budget = cast(int, query.integer("budget", ctx.settings.console_scan_bytes, 1, 1 << 40))
    segments = await ctx.service.segments(topic, partition)
    scope = plan(segments, start, until)
    here = f"/topics/{web.segment(topic)}/{partition}"
    terms = {k: v for k, v in query.params.items() if k in _TERMS}
    context_: dict[str, Any] = {
        "title": f"Search {topic} / {partition}",
        "topic": topic,
        "partition": partition,
        "here": here,
        "view": view,
        "plan": scope,
        "budget": budget,
        "terms": terms,
        "start": start,
        "until": until,
        "filter": flt,
        "resume": lambda offset: web.url(
            f"{here}/search",
            **terms,
            **view.params(run=1, budget=budget, until=until),
            **{"from": offset},
        ),
    }
    if query.params.get("run") != "1" or flt.empty:
        return web.page("search.html", empty=flt.empty, running=False, **context_)
    read = page_reader(request, ctx, topic, partition, view)

    async def body() -> AsyncIterator[bytes]:
        yield (
            web.templates.get_template("search.html")
            .render(running=True, open_end=True, **context_)
            .encode()
        )
        row = web.templates.get_template("match.html")
        done = web.templates.get_template("search_end.html")
        last = Progress(start)
        try:
            async for progress in scan(
                read,
                flt,
                start=start,
                until=until,
                budget=budget,
                page_bytes=ctx.settings.stream_page_bytes,
                max_matches=MAX_MATCHES,
            ):
                last = progress
                for record in progress.matches:
                    yield row.render(r=shown_record(record, view), here=here, view=view).encode()
                yield _progress(progress, scope.bytes).encode()
                if progress.stopped:
                    yield done.render(p=progress, **context_).encode()
        except GatewayError as exc:
            yield done.render(p=None, error=exc, **context_).encode()
        except (asyncio.CancelledError, GeneratorExit):  # the page was closed or cancelled
            log.info(
                "console search of %s-%d cancelled at offset %d (%d bytes read)",
                topic, partition, last.next_offset, last.bytes_read,
            )  # fmt: skip
            raise
        else:
            log.info(
                "console search of %s-%d stopped (%s) at offset %d: %d found, %d bytes read",
                topic, partition, last.stopped, last.next_offset, last.found, last.bytes_read,
            )  # fmt: skip

    return StreamingResponse(body(), media_type="text/html; charset=utf-8", headers=web.HEADERS)


_TERMS: Final = ("key", "key_equals", "value", "header", "header_value", "json_path", "json_value")


def _progress(p: Progress, planned: int) -> str:
    share = f" of {planned:,}" if planned else ""
    return (
        f'<output class="progress" data-next="{p.next_offset}">Scanned to offset {p.next_offset}: '
        f"{p.records:,} records, {p.bytes_read:,}{share} bytes read, {p.found} found</output>\n"
    )


async def lookup(request: Request, topic: str) -> Response:
    """The partition Kafka's default partitioner sends ``key`` to, and a search for it there."""
    ctx = context(request)
    await describable(request, topic)
    query = web.Query(request.query_params)
    key = query.text("key_equals")
    encoding = query.choice("key_encoding", _KEY_ENCODINGS, "string")
    try:
        data = bytes.fromhex(key) if encoding == "hex" else key.encode()
    except ValueError:
        raise InvalidRequestError("key_equals is not hexadecimal", "key_equals") from None
    count = len(await ctx.service.partitions(topic))
    target = key_partition(data, count)
    terms: dict[str, object] = {"run": 1}
    if encoding == "hex":
        terms |= {"key_format": "hex", "key_equals": data.hex()}
    else:
        terms |= {"key_equals": key}
    path = f"/topics/{web.segment(topic)}/{target}/search"
    return RedirectResponse(web.url(path, **terms), status_code=303, headers=web.HEADERS)


async def download(request: Request, topic: str, partition: int, digest: bool) -> Response:
    ctx = context(request)
    if not ctx.settings.console_downloads:
        raise InvalidRequestError("downloads are turned off (--no-console-downloads)", "download")
    who, _ = await describable(request, topic)
    _readable(request, who, topic)
    query = web.Query(request.query_params)
    view = View.of(query, ctx.settings)
    start, until = await _bounds(ctx, topic, partition, query, view)
    name = f"{topic}-{partition}-{start}-{until}.ndjson"
    lines = _lines(request, ctx, topic, partition, view=view, start=start, until=until)
    if digest:
        sha = hashlib.sha256()
        async for piece in lines:
            sha.update(piece)
        text = f"{sha.hexdigest()}  {name}\n"
        return Response(text, media_type="text/plain; charset=utf-8", headers=web.HEADERS)

    async def body() -> AsyncIterator[bytes]:
        sha, size = hashlib.sha256(), 0
        async for piece in lines:
            sha.update(piece)
            size += len(piece)
            yield piece
        log.info("download %s: %d bytes, sha256 %s", name, size, sha.hexdigest())

    headers = {**web.HEADERS, "Content-Disposition": f'attachment; filename="{name}"'}
    return StreamingResponse(body(), media_type="application/x-ndjson", headers=headers)


async def _lines(
    request: Request,
    ctx: Context,
    topic: str,
    partition: int,
    *,
    view: View,
    start: int,
    until: int,
) -> AsyncIterator[bytes]:
    """The records route's NDJSON record lines for offsets [``start``, ``until``)."""
    at = start
    while at < until:
        query = view.records_query(at, ctx.settings.stream_page_bytes)
        body, result = await page_document(request.state, ctx, topic, partition, query, lines=True)
        text = bytes(body)
        if result.next_offset > until:
            text = b"".join(
                line + b"\n"
                for line in text.split(b"\n")
                if line and orjson.loads(line)["offset"] < until
            )
        yield text
        if result.next_offset <= at:
            return
        at = result.next_offset
