"""Fetch (API key 1, versions 4-18): several partitions per request, read from the service core
concurrently and answered within ``max_wait_ms``. The rules it follows (byte sharing, the
deadline and the first-answer grace, topic ids, ACLs, errors) are in docs/kafka-listener.md,
"Fetch, as the code implements it"; this module orchestrates the reads of a request planned
by :mod:`~gateway.listener.fetch_plan`, each holding its share of ``inflight_bytes``
(:mod:`~gateway.listener.fetch_share`), and answers them in the wire encoding of
:mod:`~gateway.listener.fetch_wire`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

from gateway.deadline import Deadline
from gateway.errors import (
    GatewayError,
    OffsetOutOfRangeError,
    TransactionPendingError,
)
from gateway.listener import codes
from gateway.listener.context import Context
from gateway.listener.failures import Failures
from gateway.listener.fetch_plan import Wanted, plan
from gateway.listener.fetch_share import Reservation
from gateway.listener.fetch_wire import PartitionAnswer, TopicKey, cut_to, encode_response
from gateway.listener.framing import Reply, Request
from gateway.service.types import IsolationLevel

log = logging.getLogger(__name__)

READ_CONCURRENCY: Final = 8
"""The partitions of one Fetch read at a time."""
FIRST_ANSWER_GRACE_S: Final = 10.0
"""How long past ``max_wait_ms`` a response with nothing yet waits for its first answer."""


async def _read_one(  # noqa: PLR0917 - one partition's read and its accounting
    ctx: Context,
    want: Wanted,
    isolation: IsolationLevel,
    deadline: Deadline,
    reservation: Reservation,
    limit: asyncio.Semaphore,
    failures: Failures,
) -> PartitionAnswer:
    answer = PartitionAnswer(want.partition)
    if want.refused != codes.NONE:
        answer.error = want.refused
        return answer
    if want.offset < 0:
        answer.error = codes.OFFSET_OUT_OF_RANGE
        return answer
    async with limit:
        try:
            taken = await reservation.take(want.max_bytes)
        except GatewayError as exc:  # no share of inflight_bytes within the deadline
            error = failures.failed(want.where, exc)
            await _fill_bounds(ctx, want, answer)  # its real bounds: no client stores -1
            answer.error = error
            return answer
        if not taken:  # max_bytes is spent by answers with records: not read, its bounds
            await _fill_bounds(ctx, want, answer)
            return answer
        try:
            return await _read_taken(ctx, want, isolation, deadline, reservation, taken, failures)
        finally:
            reservation.done()


async def _read_taken(  # noqa: PLR0917 - _read_one's read, its share taken
    ctx: Context,
    want: Wanted,
    isolation: IsolationLevel,
    deadline: Deadline,
    reservation: Reservation,
    taken: int,
    failures: Failures,
) -> PartitionAnswer:
    """The read of one partition with ``taken`` bytes of the request reserved; what it does
    not use is given back to the request before it returns (or raises)."""
    answer = PartitionAnswer(want.partition)
    try:
        result = await ctx.service.fetch(
            want.topic,
            want.partition,
            want.offset,
            max_bytes=taken,
            isolation=isolation,
            deadline=deadline,
        )
    except TransactionPendingError as exc:  # at the last stable offset: nothing yet
        reservation.give_back(taken)
        if _other_incarnation(want, exc.topic_id, failures):
            answer.error = codes.UNKNOWN_TOPIC_ID
            return answer
        answer.high_watermark = _known(exc.log_end_offset)
        answer.log_start_offset = _known(exc.log_start_offset)
        answer.last_stable_offset = exc.last_stable_offset
        return answer
    except OffsetOutOfRangeError as exc:
        reservation.give_back(taken)
        if _other_incarnation(want, exc.topic_id, failures):
            answer.error = codes.UNKNOWN_TOPIC_ID
            return answer
        answer.error = codes.OFFSET_OUT_OF_RANGE
        answer.high_watermark = _known(exc.log_end_offset)
        answer.log_start_offset = _known(exc.log_start_offset)
        return answer
    except Exception as exc:  # the service's typed error, or a bug: this partition's answer
        reservation.give_back(taken)
        answer.error = failures.failed(want.where, exc)
        return answer
    except BaseException:  # cancelled: the response went without it
        reservation.give_back(taken)
        raise
    if _other_incarnation(want, result.topic_id, failures):
        reservation.give_back(taken)  # another incarnation's records: never answered
        answer.error = codes.UNKNOWN_TOPIC_ID
        return answer
    answer.high_watermark = result.log_end_offset
    answer.log_start_offset = result.log_start_offset
    answer.last_stable_offset = result.last_stable_offset
    answer.aborted = result.aborted_transactions
    answer.records = [b.data for b in result.batches]
    reservation.give_back(taken - answer.size)  # what the read did not use
    return answer


def _other_incarnation(want: Wanted, read: uuid.UUID | None, failures: Failures) -> bool:
    """Whether a read by id (v13+) found another incarnation of the topic than the id asked
    (re-created between the id lookup and the read), or one it cannot name: its records, and
    its bounds and errors too, are not the id's (an ``OFFSET_OUT_OF_RANGE`` with another
    incarnation's bounds would fire the client's ``auto.offset.reset``). Such an answer is
    ``UNKNOWN_TOPIC_ID``, logged in the request's failure line."""
    if want.topic_id is None or read == want.topic_id:
        return False
    failures.add(want.where, codes.UNKNOWN_TOPIC_ID, f"read topic id {read}, not {want.topic_id}")
    return True


def _known(value: int | None) -> int:
    return -1 if value is None else value


def _answered(task: asyncio.Task[PartitionAnswer]) -> bool:
    """A finished read with something to say: records or an error."""
    answer = task.result()
    return bool(answer.records) or answer.error != codes.NONE


def first_answer_cap(wait_s: float, request_timeout_ms: int) -> float:
    """How long (from the start) a response with nothing ready at ``wait_s`` waits for its
    first answer: :data:`FIRST_ANSWER_GRACE_S` more, and within 80% of the request timeout
    (so the client, whose own request timeout is usually the same 30 s, gets an answer
    before it gives up on the connection); never less than ``wait_s``."""
    return max(wait_s, min(wait_s + FIRST_ANSWER_GRACE_S, 0.8 * request_timeout_ms / 1000))


async def fetch(ctx: Context, request: Request) -> Reply:
    """The Fetch response to ``request`` (the rules: docs/kafka-listener.md)."""
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
    wants, allowed = await plan(ctx, request, total)
    # max_wait_ms within request_timeout_ms: a client cannot park a connection for longer
    wait_ms = min(max(body.max_wait_ms, 0), ctx.settings.request_timeout_ms)
    deadline = ctx.deadline(wait_ms)
    started = time.monotonic()
    reservation = Reservation(ctx.budget, total, deadline)
    try:
        wait_s = wait_ms / 1000
        cap_s = first_answer_cap(wait_s, ctx.settings.request_timeout_ms)
        answers = await _gather(ctx, wants, isolation, deadline, wait_s, cap_s, reservation)
        if not any(a.records or a.error != codes.NONE for a in answers):
            # Nothing to say: like a broker, answer at max_wait_ms, not at once (a consumer
            # at the end of its partitions would otherwise send fetches in a tight loop);
            # holding no share of inflight_bytes meanwhile.
            reservation.release()
            await asyncio.sleep(max(0.0, min(started + wait_s, deadline.at) - time.monotonic()))
        left = total
        for answer in answers:
            if answer.records:
                first = left == total
                kept = answer.records if first else cut_to(answer.records, left)
                answer.records = kept
                left = max(0, left - answer.size)
        reservation.keep(sum(a.size for a in answers))
        pairs = list(zip(wants, answers, strict=True))
        buffers = encode_response(version, request.correlation_id, _by_topic(pairs))
    except BaseException:
        reservation.release()
        raise
    # the share is held until the views are sent (as the HTTP raw response holds it)
    error = next((a.error for a in answers if a.error != codes.NONE), codes.NONE)
    one = next(iter(allowed)) if len(allowed) == 1 else None
    return Reply(buffers, reservation.release, error=error, topic=one)


def _by_topic(
    pairs: Sequence[tuple[Wanted, PartitionAnswer]],
) -> list[tuple[TopicKey, list[PartitionAnswer]]]:
    """The answers grouped by topic (as the request named it), in request order."""
    topics: list[tuple[TopicKey, list[PartitionAnswer]]] = []
    for want, answer in pairs:
        if topics and topics[-1][0] == want.key:
            topics[-1][1].append(answer)
        else:
            topics.append((want.key, [answer]))
    return topics


async def _gather(  # noqa: PLR0917
    ctx: Context,
    wants: list[Wanted],
    isolation: IsolationLevel,
    deadline: Deadline,
    wait_s: float,
    cap_s: float,
    reservation: Reservation,
) -> list[PartitionAnswer]:
    """Every partition's answer: at ``wait_s``, those ready (waiting on, until ``cap_s``, for
    the first one that says something when none does yet); the others answer their bounds
    with no records, and ``KAFKA_STORAGE_ERROR`` when nothing answered by ``cap_s``."""
    if not wants:
        return []
    limit = asyncio.Semaphore(READ_CONCURRENCY)
    failures = Failures("fetch", log)
    tasks = [
        asyncio.ensure_future(_read_one(ctx, w, isolation, deadline, reservation, limit, failures))
        for w in wants
    ]
    started = time.monotonic()
    pending: set[asyncio.Task[PartitionAnswer]] = set(tasks)
    try:
        done, pending = await asyncio.wait(pending, timeout=max(wait_s, 0.0))
        while pending and not any(_answered(t) for t in done):
            left = started + cap_s - time.monotonic()
            if left <= 0:
                break
            more, pending = await asyncio.wait(
                pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            done |= more
    finally:
        for task in pending:
            task.cancel()
        if pending:  # their reservations are given back as they end
            await asyncio.gather(*pending, return_exceptions=True)
    answers: list[PartitionAnswer] = []
    late: list[tuple[Wanted, PartitionAnswer]] = []
    for t, w in zip(tasks, wants, strict=True):
        if t in pending or t.cancelled():
            answer = PartitionAnswer(w.partition)
            late.append((w, answer))
        else:
            answer = t.result()
        answers.append(answer)
    if late:
        nothing = not any(a.records or a.error != codes.NONE for a in answers)
        await _bounds(ctx, late, limit, storage_error=nothing)
    failures.log()
    return answers


async def _bounds(
    ctx: Context,
    late: list[tuple[Wanted, PartitionAnswer]],
    limit: asyncio.Semaphore,
    *,
    storage_error: bool,
) -> None:
    """Fill in the real bounds of the partitions not read in time (the service's in-memory
    partition bounds), so that no client stores -1 as a high watermark; with
    ``storage_error`` (nothing answered by the cap), they also say ``KAFKA_STORAGE_ERROR``.
    A partition whose bounds fail answers the error of that failure."""

    async def one(want: Wanted, answer: PartitionAnswer) -> None:
        async with limit:
            if await _fill_bounds(ctx, want, answer) and storage_error:
                answer.error = codes.KAFKA_STORAGE_ERROR

    await asyncio.gather(*(one(w, a) for w, a in late))


async def _fill_bounds(ctx: Context, want: Wanted, answer: PartitionAnswer) -> bool:
    """Set the real bounds of a partition answered without a read (the service's in-memory
    partition bounds: the remote log end as ``high_watermark`` and ``last_stable_offset``);
    False, with the error, when they fail or are another incarnation's than the id asked."""
    try:
        info = await ctx.service.partition(want.topic, want.partition)
    except Exception as exc:
        answer.error = codes.error_code(exc)
        if not isinstance(exc, GatewayError):  # a bug: this partition says so, the response goes
            log.warning("fetch: the bounds of %s failed", want.where, exc_info=True)
        return False
    if want.topic_id is not None and info.topic_id != want.topic_id:
        answer.error = codes.UNKNOWN_TOPIC_ID  # re-created meanwhile: not this id's bounds
        return False
    answer.high_watermark = info.remote_log_end_offset
    answer.log_start_offset = info.remote_log_start_offset
    return True
