"""``/ui``: the history console's pages (server-rendered; docs/console.md).

Topics with their bounds, time span, remote size, segments and health come from the catalog
alone; a partition page seeks by offset, time or end, shows a histogram from segment
metadata and a page of records read exactly as the records route reads them; a record page
adds its provenance (segment, batch, producer, codec, leader epoch, CRC). Searches, key
lookups and downloads are in :mod:`gateway.api.console.scans`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, cast

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.api.auth import access_of
from gateway.api.console import web
from gateway.api.console.search import shown
from gateway.api.console.view import (
    UTC,
    Clipped,
    histogram,
    input_text,
    parse_time,
    time_text,
    zone,
)
from gateway.api.console.window import Read, Window, before, forward
from gateway.api.params import Context, check_topic
from gateway.api.records import RecordsQuery, page_document
from gateway.api.render import OFFLOAD_BYTES, batch_bytes, off_loop, topic_id_text
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import GatewayError, InvalidRequestError, NotReadyError
from gateway.kafka.batch import iter_batches
from gateway.security.acl import Operation
from gateway.service.protocol import Service
from gateway.service.types import FetchResult, IsolationLevel, PartitionInfo, SegmentInfo

FORMATS: Final = ("string", "json", "hex", "base64", "avro", "protobuf", "jsonschema", "auto")
HEADER_FORMATS: Final = ("string", "json", "hex", "base64")
ISOLATION: Final = ("read_uncommitted", "read_committed")
CLIP: Final = 240
MAX_COUNT: Final = 500


def context(request: Request) -> Context:
    state = request.state
    if not cast(Service, state.service).ready():
        raise NotReadyError("the catalog is still loading (the first bucket scan)")
    return Context(state.service, state.settings, state.budget, state.gate)


@dataclass(frozen=True, slots=True)
class View:
    """How records are shown: formats, isolation, time zone, records a page."""

    key_format: str
    value_format: str
    header_format: str
    isolation: str
    tz: str
    count: int
    default_count: int

    @classmethod
    def of(cls, query: web.Query, settings: Settings) -> View:
        tz = query.text("tz", "UTC", 64) or "UTC"
        zone(tz)  # 400 when unknown
        return cls(
            query.choice("key_format", FORMATS, "string"),
            query.choice("value_format", FORMATS, "string"),
            query.choice("header_format", HEADER_FORMATS, "string"),
            query.choice("isolation", ISOLATION, "read_uncommitted"),
            tz,
            cast(int, query.integer("count", settings.console_page_records, 1, MAX_COUNT)),
            settings.console_page_records,
        )

    def params(self, **more: object) -> dict[str, object]:
        """The query that keeps this view (defaults left out), plus ``more``."""
        mine = {
            "key_format": self.key_format,
            "value_format": self.value_format,
            "header_format": self.header_format,
            "isolation": self.isolation,
            "tz": self.tz,
            "count": self.count,
        }
        defaults: dict[str, object] = {"key_format": "string", "value_format": "string"}
        defaults["header_format"] = "string"
        defaults |= {"isolation": "read_uncommitted", "tz": "UTC", "count": self.default_count}
        kept = {k: v for k, v in mine.items() if defaults.get(k) != v}
        return {**kept, **more}

    def records_query(self, offset: int, max_bytes: int | None = None) -> RecordsQuery:
        return RecordsQuery.model_validate(
            {
                "offset": offset,
                "max_bytes": max_bytes,
                "isolation_level": self.isolation,
                "key_format": self.key_format,
                "value_format": self.value_format,
                "header_format": self.header_format,
                "decode_errors": "raw",
            }
        )


PageReader = Callable[[int, int | None], Awaitable[tuple[dict[str, Any], int]]]
"""One page of the records route from an offset (within a byte count, None: the default): its
JSON document and the stored batch bytes it read."""


def page_reader(
    request: Request, ctx: Context, topic: str, partition: int, view: View
) -> PageReader:
    """The records route's pages in the view's formats, parsed off the event loop when large
    (:func:`gateway.api.render.off_loop`, at its threshold)."""

    async def read(offset: int, max_bytes: int | None = None) -> tuple[dict[str, Any], int]:
        body, result = await page_document(
            request.state, ctx, topic, partition, view.records_query(offset, max_bytes)
        )
        read_bytes = batch_bytes(result)
        doc = await off_loop(read_bytes > OFFLOAD_BYTES, orjson.loads, body)
        return cast(dict[str, Any], doc), read_bytes

    return read


def reader(request: Request, ctx: Context, topic: str, partition: int, view: View) -> Read:
    pages = page_reader(request, ctx, topic, partition, view)

    async def read(offset: int) -> dict[str, Any]:
        doc, _ = await pages(offset, None)
        return doc

    return read


async def describable(request: Request, topic: str) -> tuple[str, bool]:
    """The principal, once ``Describe`` on ``topic`` is checked, and whether it may read."""
    check_topic(topic)
    who = await web.principal(request)
    access, host = access_of(request), web.host(request)
    access.check_topic(who, host, Operation.DESCRIBE, topic)
    return who, access.allows(who, host, Operation.READ, topic)


def shown_record(record: dict[str, Any], view: View) -> dict[str, Any]:
    """A record as a table row shows it: times in UTC and the view's zone, texts clipped."""
    tz = zone(view.tz)
    ts = int(record["timestamp"])
    return {
        "offset": record["offset"],
        "utc": time_text(ts, UTC),
        "local": time_text(ts, tz) if view.tz != "UTC" else "",
        "timestamp": ts,
        "timestamp_type": record.get("timestamp_type", ""),
        "key": None if record.get("key") is None else Clipped.of(shown(record["key"]), CLIP),
        "value": None if record.get("value") is None else Clipped.of(shown(record["value"]), CLIP),
        "key_error": record.get("key_error"),
        "value_error": record.get("value_error"),
        "headers": [
            (h.get("key", ""), Clipped.of(shown(h.get("value")), CLIP), h.get("error"))
            for h in record.get("headers") or ()
        ],
        "leader_epoch": record.get("leader_epoch"),
    }


def partition_summary(info: PartitionInfo, segments: list[SegmentInfo]) -> dict[str, Any]:
    live = [s for s in segments if not s.displaced]
    times = [s.max_timestamp_ms for s in live if s.max_timestamp_ms >= 0]
    return {
        "partition": info.partition,
        "start": info.remote_log_start_offset,
        "end": info.remote_log_end_offset,
        "size": info.size,
        "segments": info.segment_count,
        "displaced": len(segments) - len(live),
        "oldest": time_text(min(times), UTC) if times else "",
        "newest": time_text(max(times), UTC) if times else "",
        "epochs": info.leader_epochs,
    }


async def index(request: Request) -> Response:
    ctx = context(request)
    who = await web.principal(request)
    access, host = access_of(request), web.host(request)
    topics = await ctx.service.topics()
    readiness = ctx.service.readiness()
    rows = []
    for name in access.visible(who, host, sorted(topics)):
        unreadable = [u for u in readiness.unreadable if u.topic == name]
        try:
            infos = sorted(await ctx.service.partitions(name), key=lambda i: i.partition)
            problem = ""
        except GatewayError as exc:  # one topic's failure is its row's health
            infos, problem = [], str(exc)
        rows.append(
            {
                "name": name,
                "ids": [topic_id_text(i) for i in topics[name]],
                "partitions": len(infos),
                "size": sum(i.size for i in infos),
                "segments": sum(i.segment_count for i in infos),
                "unreadable": len(unreadable),
                "problem": problem,
            }
        )
    return web.page("index.html", title="Topics", topics=rows, who=who)


async def topic_page(request: Request, topic: str) -> Response:
    ctx = context(request)
    await describable(request, topic)
    infos = sorted(await ctx.service.partitions(topic), key=lambda i: i.partition)
    readiness = ctx.service.readiness()
    parts = [partition_summary(i, await ctx.service.segments(topic, i.partition)) for i in infos]
    unreadable = [u for u in readiness.unreadable if u.topic == topic]
    return web.page("topic.html", title=topic, topic=topic, partitions=parts, unreadable=unreadable)


async def partition_page(request: Request, topic: str, partition: int) -> Response:
    ctx = context(request)
    _, readable = await describable(request, topic)
    query = web.Query(request.query_params)
    view = View.of(query, ctx.settings)
    info = await ctx.service.partition(topic, partition)
    segments = await ctx.service.segments(topic, partition)
    here = f"/topics/{web.segment(topic)}/{partition}"
    window: Window | None = None
    offset = query.integer("offset", None)
    if readable:
        target = await _seek(request, ctx, topic, partition, view=view, query=query, info=info)
        if target is not None:
            return RedirectResponse(web.url(here, **view.params(offset=target)), status_code=303)
        if offset is None:
            return RedirectResponse(
                web.url(here, **view.params(offset=info.remote_log_start_offset)), 303
            )
        window = await forward(reader(request, ctx, topic, partition, view), offset, view.count)
    tz = zone(view.tz)
    bars = histogram(segments)
    return web.page(
        "partition.html",
        title=f"{topic} / {partition}",
        topic=topic,
        partition=partition,
        here=here,
        info=partition_summary(info, segments),
        readable=readable,
        view=view,
        offset=offset,
        window=window,
        records=[shown_record(r, view) for r in window.records] if window else [],
        bars=bars,
        bar_max=max((b.offsets for b in bars), default=0),
        bar_text=lambda ms: time_text(ms, UTC),
        time_value=input_text(bars[0].start_ms, tz) if bars else "",
        formats=FORMATS,
        header_formats=HEADER_FORMATS,
        downloads=ctx.settings.console_downloads,
    )


async def _seek(
    request: Request,
    ctx: Context,
    topic: str,
    partition: int,
    *,
    view: View,
    query: web.Query,
    info: PartitionInfo,
) -> int | None:
    """The offset a seek (``seek=earliest|latest``, ``time``, ``before``) lands on, or None
    when the page names its ``offset`` itself."""
    seek = query.choice("seek", ("", "earliest", "latest"), "")
    when = query.text("time", "", 64)
    back = query.integer("before", None)
    read = reader(request, ctx, topic, partition, view)
    start = info.remote_log_start_offset
    if seek == "earliest":
        return start
    if when:
        ms = parse_time(when, zone(view.tz))
        found = await ctx.service.list_offsets(
            topic,
            partition,
            ms,
            Deadline.after(ctx.settings.request_timeout_ms / 1000),
            isolation=IsolationLevel(view.isolation),
        )
        return (
            found.offset if found.offset >= 0 else await readable_end(ctx, topic, partition, view)
        )
    if seek == "latest":
        back = await readable_end(ctx, topic, partition, view)
    if back is not None:
        return await before(read, back, view.count, start)
    return None


async def readable_end(ctx: Context, topic: str, partition: int, view: View) -> int:
    found = await ctx.service.list_offsets(
        topic,
        partition,
        "latest",
        Deadline.after(ctx.settings.request_timeout_ms / 1000),
        isolation=IsolationLevel(view.isolation),
    )
    return found.offset


async def record_page(request: Request, topic: str, partition: int, offset: int) -> Response:
    """One record in full, with where it came from."""
    ctx = context(request)
    who, _ = await describable(request, topic)
    access_of(request).check_topic(who, web.host(request), Operation.READ, topic)
    view = View.of(web.Query(request.query_params), ctx.settings)
    body, result = await page_document(
        request.state, ctx, topic, partition, view.records_query(offset, max_bytes=1)
    )
    doc = orjson.loads(body)
    record = next((r for r in doc["records"] if r["offset"] == offset), None)
    segments = await ctx.service.segments(topic, partition)
    return web.page(
        "record.html",
        title=f"{topic} / {partition} @ {offset}",
        topic=topic,
        partition=partition,
        offset=offset,
        view=view,
        record=None if record is None else shown_record(record, view),
        raw=record,
        following=doc["records"][0]["offset"] if doc["records"] else doc["next_offset"],
        batch=provenance(result, offset, segments),
        here=f"/topics/{web.segment(topic)}/{partition}",
    )


def provenance(result: FetchResult, offset: int, segments: list[SegmentInfo]) -> dict[str, Any]:
    """The batch holding ``offset`` in ``result``: its header fields and its segment."""
    for fetched in result.batches:
        for batch in iter_batches(fetched.data):
            if batch.base_offset <= offset <= batch.last_offset:
                segment = next(
                    (
                        s
                        for s in segments
                        if not s.displaced and s.start_offset == fetched.segment_start_offset
                    ),
                    None,
                )
                return {
                    "segment_id": segment.segment_id if segment else "",
                    "segment_start": fetched.segment_start_offset,
                    "segment_end": segment.end_offset if segment else None,
                    "base_offset": batch.base_offset,
                    "last_offset": batch.last_offset,
                    "records": batch.records_count,
                    "size": batch.size_in_bytes,
                    "producer_id": batch.producer_id,
                    "producer_epoch": batch.producer_epoch,
                    "base_sequence": batch.base_sequence,
                    "transactional": batch.is_transactional,
                    "codec": batch.codec.name.lower(),
                    "timestamp_type": "LogAppendTime" if batch.timestamp_type else "CreateTime",
                    "leader_epoch": batch.partition_leader_epoch,
                    "crc": f"{batch.crc:08x}",
                }
    raise InvalidRequestError(f"offset {offset} is in no batch read", "offset")
