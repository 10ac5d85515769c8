"""Fetch (API key 1, versions 4-12): several partitions per request, from the service core.

Semantics (``remote-read-semantics.md`` §7, §8, as :meth:`Service.fetch` implements them):

* each partition is read by :meth:`Service.fetch` from its ``fetch_offset`` with
  ``partition_max_bytes`` (at least one whole batch, as the broker's minOneMessage); at
  exactly the remote log end: no records and no error; outside ``[remote start, remote end]``:
  ``OFFSET_OUT_OF_RANGE``. ``high_watermark`` and ``last_stable_offset`` are the remote log
  end (the service knows no other stable offset: a read_committed fetch stops before a
  transaction whose marker is not tiered), ``log_start_offset`` the remote log start;
* ``max_bytes`` is shared in request order: a partition's batches are cut to whole batches
  that fit what is left, the first partition with data is never cut to nothing (so every
  response with data makes progress); a partition cut to nothing answers no records and no
  error, and the client asks again from the same offset;
* ``max_wait_ms`` (at most ``request_timeout_ms``) is the deadline of the response, not of
  the reads: the partitions are read concurrently, and at ``max_wait_ms`` the response
  carries what is ready; when nothing is ready yet it waits for the first partition that
  answers (never an empty response while data is on its way), within ``request_timeout_ms``.
  A partition not ready answers no records, no error and unknown (-1) offsets, which clients
  ignore;
* a response with nothing to say (every partition at its end, no error) is sent at
  ``max_wait_ms``, as a broker holds it, so consumers at the end do not spin;
* read_committed: ``aborted_transactions`` from the transaction indexes, as the service
  proves them; read_uncommitted: null;
* a topic the principal may not ``Read`` (the HTTP API's ACL check): its partitions answer
  ``TOPIC_AUTHORIZATION_FAILED`` and are not read, whether or not the topic exists.

The record batches are sent as stored: the response is a list of buffers, the encoded fields
around views of the bytes the fetch read (no copy of a batch, measured in
docs/kafka-listener.md: kafka-python's encoder copies the records into its buffer). Fetch
sessions (KIP-227) are not kept: the answer's ``session_id`` 0 tells clients to send full
requests.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.deadline import Deadline
from gateway.errors import (
    GatewayError,
    OffsetOutOfRangeError,
    TransactionPendingError,
)
from gateway.kafka.varint import encode_uvarint
from gateway.listener import codes
from gateway.listener.context import Context
from gateway.listener.framing import (
    Buffer,
    Reply,
    Request,
    array,
    name,
    response_header,
    size_prefix,
)
from gateway.security.acl import Operation
from gateway.service.types import AbortedTransaction, IsolationLevel

log = logging.getLogger(__name__)

FLEXIBLE_FROM: Final = 12
_BATCH_LENGTH: Final = struct.Struct(">i")  # at byte 8 of a batch: the bytes after byte 12
_BATCH_OVERHEAD: Final = 12  # base offset, length


@dataclass(slots=True)
class PartitionAnswer:
    """One partition of a Fetch response; ``records`` are views of stored batches."""

    partition: int
    error: int = codes.NONE
    high_watermark: int = -1
    log_start_offset: int = -1
    aborted: Sequence[AbortedTransaction] | None = None
    records: list[Buffer] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(_nbytes(b) for b in self.records)


def _nbytes(b: Buffer) -> int:
    return b.nbytes if isinstance(b, memoryview) else len(b)


def cut_to(records: list[Buffer], budget: int) -> list[Buffer]:
    """The whole batches of ``records`` (each a run of whole batches) within ``budget``."""
    out: list[Buffer] = []
    left = budget
    for run in records:
        size = _nbytes(run)
        if size <= left:
            out.append(run)
            left -= size
            continue
        view = memoryview(run)
        pos = 0
        while pos + _BATCH_OVERHEAD <= size:
            (length,) = _BATCH_LENGTH.unpack_from(view, pos + 8)
            end = pos + _BATCH_OVERHEAD + length
            if end > left:
                break
            pos = end
        if pos:
            out.append(view[:pos])
        break
    return out


def encode_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str, Sequence[PartitionAnswer]]],
    error: int = codes.NONE,
) -> list[Buffer]:
    """A whole Fetch response frame (versions 4-12) as buffers: the fields, encoded here,
    around the record views, which are not copied."""
    flexible = version >= FLEXIBLE_FROM
    parts: list[Buffer] = []
    out = bytearray()

    def array(n: int) -> None:
        out.extend(encode_uvarint(n + 1) if flexible else struct.pack(">i", n))

    out += struct.pack(">i", 0)  # throttle_time_ms
    if version >= 7:
        out += struct.pack(">hi", error, 0)  # error_code, session_id: no session kept
    array(len(topics))
    for topic, partitions in topics:
        raw = topic.encode()
        out += encode_uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))
        out += raw
        array(len(partitions))
        for p in partitions:
            out += struct.pack(">ihq", p.partition, p.error, p.high_watermark)
            out += struct.pack(">q", p.high_watermark)  # last_stable_offset: the remote end
            if version >= 5:
                out += struct.pack(">q", p.log_start_offset)
            if p.aborted is None:
                out += b"\x00" if flexible else struct.pack(">i", -1)
            else:
                array(len(p.aborted))
                for t in p.aborted:
                    out += struct.pack(">qq", t.producer_id, t.first_offset)
                    if flexible:
                        out += b"\x00"
            if version >= 11:
                out += struct.pack(">i", -1)  # preferred_read_replica: none
            size = p.size
            out += encode_uvarint(size + 1) if flexible else struct.pack(">i", size)
            if p.records:
                parts.append(bytes(out))
                parts.extend(p.records)
                out = bytearray()
            if flexible:
                out += b"\x00"  # the partition's tagged fields
        if flexible:
            out += b"\x00"  # the topic's
    if flexible:
        out += b"\x00"  # the response's
    parts.append(bytes(out))
    header = response_header(correlation_id, flexible)
    total = len(header) + sum(_nbytes(b) for b in parts)
    return [size_prefix(total) + header, *parts]


@dataclass(frozen=True, slots=True)
class _Wanted:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    allowed: bool = True  # the principal may read the topic


async def _read_one(
    ctx: Context, want: _Wanted, isolation: IsolationLevel, deadline: Deadline
) -> PartitionAnswer:
    answer = PartitionAnswer(want.partition)
    if not want.allowed:
        answer.error = codes.TOPIC_AUTHORIZATION_FAILED
        return answer
    try:
        if want.offset < 0:
            raise OffsetOutOfRangeError(f"offset {want.offset} is negative", None, None)
        result = await ctx.service.fetch(
            want.topic,
            want.partition,
            want.offset,
            max_bytes=want.max_bytes,
            isolation=isolation,
            deadline=deadline,
        )
    except TransactionPendingError:
        return answer  # nothing committed to return yet: no records, no error
    except OffsetOutOfRangeError as exc:
        answer.error = codes.OFFSET_OUT_OF_RANGE
        answer.high_watermark = _known(exc.log_end_offset)
        answer.log_start_offset = _known(exc.log_start_offset)
        return answer
    except GatewayError as exc:
        answer.error = codes.error_code(exc)
        _log_failure(want, exc, answer.error)
        return answer
    except Exception:
        log.exception("fetch of %s-%d at %d failed", want.topic, want.partition, want.offset)
        answer.error = codes.UNKNOWN_SERVER_ERROR
        return answer
    answer.high_watermark = result.log_end_offset
    answer.log_start_offset = result.log_start_offset
    answer.aborted = result.aborted_transactions
    answer.records = [b.data for b in result.batches]
    return answer


def _known(value: int | None) -> int:
    return -1 if value is None else value


def _log_failure(want: _Wanted, exc: GatewayError, code: int) -> None:
    serious = code in (codes.UNKNOWN_SERVER_ERROR, codes.CORRUPT_MESSAGE)
    level = logging.WARNING if serious else logging.INFO
    log.log(level, "fetch of %s-%d at %d: error %d: %s", want.topic, want.partition,
            want.offset, code, exc)  # fmt: skip


def _answered(task: asyncio.Task[PartitionAnswer]) -> bool:
    """A finished read with something to say: records or an error."""
    answer = task.result()
    return bool(answer.records) or answer.error != codes.NONE


async def fetch(ctx: Context, request: Request) -> Reply:
    """The Fetch response to ``request`` (see the module docstring)."""
    body: Any = request.body
    version = request.api_version
    if body.session_id != 0 or body.session_epoch > 0:
        code = codes.FETCH_SESSION_ID_NOT_FOUND
        return Reply(encode_response(version, request.correlation_id, [], code), error=code)
    isolation = (
        IsolationLevel.READ_COMMITTED
        if body.isolation_level == 1
        else IsolationLevel.READ_UNCOMMITTED
    )
    total = max(1, min(body.max_bytes, ctx.settings.max_response_bytes))
    allowed: dict[str, bool] = {}
    wants = []
    for t in array(body.topics, "topics"):
        topic = name(t.topic, "a topic name")
        if topic not in allowed:
            allowed[topic] = ctx.allows(request.principal, request.host, Operation.READ, topic)
        for p in array(t.partitions, "partitions"):
            share = max(1, min(p.partition_max_bytes, total))
            wants.append(_Wanted(topic, p.partition, p.fetch_offset, share, allowed[topic]))
    # max_wait_ms within request_timeout_ms: a client cannot park a connection for longer
    wait_ms = min(max(body.max_wait_ms, 0), ctx.settings.request_timeout_ms)
    deadline = ctx.deadline(wait_ms)
    started = time.monotonic()
    try:
        shares = sum(w.max_bytes for w in wants if w.allowed)
        held = await ctx.budget.acquire(min(total, shares), deadline)
    except GatewayError as exc:  # overloaded: every partition says so, retriable
        code = codes.error_code(exc)
        failed = [(w, PartitionAnswer(w.partition, code)) for w in wants]
        return Reply(
            encode_response(version, request.correlation_id, _by_topic(failed)), error=code
        )
    try:
        wait_s = wait_ms / 1000
        answers = await _gather(ctx, wants, isolation, deadline, wait_s)
        if not any(a.records or a.error != codes.NONE for a in answers):
            # Nothing to say: like a broker, answer at max_wait_ms, not at once (a consumer
            # at the end of its partitions would otherwise send fetches in a tight loop);
            # holding no share of inflight_bytes meanwhile.
            ctx.budget.release(held)
            held = 0
            await asyncio.sleep(max(0.0, min(started + wait_s, deadline.at) - time.monotonic()))
        left = total
        for answer in answers:
            if answer.records:
                first = left == total
                kept = answer.records if first else cut_to(answer.records, left)
                answer.records = kept
                left = max(0, left - answer.size)
        pairs = list(zip(wants, answers, strict=True))
        buffers = encode_response(version, request.correlation_id, _by_topic(pairs))
    except BaseException:
        ctx.budget.release(held)
        raise
    # the share is held until the views are sent (as the HTTP raw response holds it)
    error = next((a.error for a in answers if a.error != codes.NONE), codes.NONE)
    one = next(iter(allowed)) if len(allowed) == 1 else None
    return Reply(buffers, functools.partial(ctx.budget.release, held), error=error, topic=one)


def _by_topic(
    pairs: Sequence[tuple[_Wanted, PartitionAnswer]],
) -> list[tuple[str, list[PartitionAnswer]]]:
    """The answers grouped by topic, in request order."""
    topics: list[tuple[str, list[PartitionAnswer]]] = []
    for want, answer in pairs:
        if topics and topics[-1][0] == want.topic:
            topics[-1][1].append(answer)
        else:
            topics.append((want.topic, [answer]))
    return topics


async def _gather(
    ctx: Context,
    wants: list[_Wanted],
    isolation: IsolationLevel,
    deadline: Deadline,
    wait_s: float,
) -> list[PartitionAnswer]:
    """Every partition's answer: at ``wait_s``, those ready (waiting on for the first one
    that says something when none does yet); the others answer empty."""
    if not wants:
        return []
    tasks = [asyncio.ensure_future(_read_one(ctx, w, isolation, deadline)) for w in wants]
    pending: set[asyncio.Task[PartitionAnswer]] = set(tasks)
    try:
        done, pending = await asyncio.wait(pending, timeout=max(wait_s, 0.0))
        while pending and not any(_answered(t) for t in done):
            more, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            done |= more
    finally:
        for task in pending:
            task.cancel()
    return [
        t.result() if t.done() and not t.cancelled() else PartitionAnswer(w.partition)
        for t, w in zip(tasks, wants, strict=True)
    ]
