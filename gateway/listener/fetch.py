"""Fetch (API key 1, versions 4-18): several partitions per request, from the service core.

Semantics (``remote-read-semantics.md`` §7, §8, as :meth:`Service.fetch` implements them):

* each partition is read by :meth:`Service.fetch` from its ``fetch_offset`` with
  ``partition_max_bytes`` (at least one whole batch, as the broker's minOneMessage); at
  exactly the remote log end: no records and no error; outside ``[remote start, remote end]``:
  ``OFFSET_OUT_OF_RANGE``. ``high_watermark`` is the remote log end, ``log_start_offset`` the
  remote log start; ``last_stable_offset`` is, for read_committed, the remote last stable
  offset (:mod:`gateway.service.stable`: the records end before it, and a fetch at or past it,
  below the end, answers no records and no error, as a broker's at its LSO), and the remote
  log end for read_uncommitted (whose clients do not read it);
* at most :data:`MAX_PARTITIONS` partitions per request (more is a malformed request: the
  connection closes); a (topic, partition) named twice is read and answered once, at its
  first occurrence (as Kafka collapses them); at most :data:`READ_CONCURRENCY` partitions of
  one request are read at a time, and the failures of one request are logged on one line;
* ``max_bytes`` is shared in request order: each read reserves its share of
  ``inflight_bytes`` (its ``partition_max_bytes`` within what is left of ``max_bytes``) and
  gives back what it did not use; once nothing is left, a partition waits for the reads under
  way (they may give bytes back) and, still nothing left, is not read: it answers no records,
  no error and its bounds. (With a few bytes left a partition is read, and the service's read
  gives at least one whole batch, which the cut below may drop: at most one batch per
  partition past the reservation, where a broker, whose minOneMessage holds for the first
  partition with data only, would read none.) A
  partition's batches are cut to whole batches that fit what is left, the first partition
  with data is never cut to nothing (so every response with data makes progress); a
  partition cut to nothing answers no records and no error, and the client asks again from
  the same offset. Once the answer is cut, the reservation is released down to its size
  (held until it is sent);
* ``max_wait_ms`` (at most ``request_timeout_ms``) is the deadline of the response, not of
  the reads: the partitions are read concurrently, and at ``max_wait_ms`` the response
  carries what is ready; when nothing is ready yet it waits for the first partition that
  answers (never an empty response while data is on its way), for at most
  :data:`FIRST_ANSWER_GRACE_S` more and below ``request_timeout_ms`` (:func:`first_answer_cap`);
  past that cap, the partitions still reading answer ``KAFKA_STORAGE_ERROR`` (retriable).
  A partition not ready answers no records, no error and its real bounds (the remote log
  end as ``high_watermark`` and ``last_stable_offset``, the remote log start), from the
  service's partition bounds, never -1 (clients store them: aiokafka's ``highwater``); a
  stable offset too high only delays a read_committed client's end of partition by a fetch,
  one too low would end it early;
* a response with nothing to say (every partition at its end, no error) is sent at
  ``max_wait_ms``, as a broker holds it, so consumers at the end do not spin;
* read_committed: ``aborted_transactions`` from the transaction indexes, as the service
  proves them; read_uncommitted: null;
* a topic the principal may not ``Read`` (the HTTP API's ACL check): its partitions answer
  ``TOPIC_AUTHORIZATION_FAILED`` and are not read, whether or not the topic exists;
* from v13 topics are named by id (KIP-516), in the request and the answer. An id is served
  when it is the newest incarnation of its name in the catalog (:meth:`Service.topics`, as
  Metadata lists it): :meth:`Service.fetch` reads a name's newest incarnation only. Any other
  id (unknown, or an older incarnation of a re-created topic still in the bucket) answers
  ``UNKNOWN_TOPIC_ID`` per partition, as a broker does for an id its metadata does not hold
  (the client refreshes its metadata and gets the current id); while the catalog cannot be
  listed (not loaded yet), the error of that. The ACL check is by the id's name, as by name
  (``TOPIC_AUTHORIZATION_FAILED``, as Kafka's Fetch: an id is an unguessable 128-bit value).
  Every read's result, and its ``OFFSET_OUT_OF_RANGE`` or pending-transaction bounds, carry
  the id it read: one that is not the id asked (the topic was re-created between the lookup
  and the read) answers ``UNKNOWN_TOPIC_ID`` and none of its records or bounds, so an id never
  gets another incarnation's records, nor its out-of-range verdict;
* v15+ carry ``replica_state`` instead of ``replica_id`` (consumers: -1), v17-18 fields for
  followers only (tagged); v16 adds the response's ``node_endpoints`` (KIP-951), which a broker
  fills only for a partition answered ``NOT_LEADER_OR_FOLLOWER`` or ``FENCED_LEADER_EPOCH``
  with its ``current_leader``: the gateway, leader of every partition, never answers those, so
  it is left empty (not written, a tagged field), as is ``preferred_read_replica`` (-1).

The record batches are sent as stored: the response is a list of buffers, the encoded fields
around views of the bytes the fetch read (no copy of a batch, measured in
docs/kafka-listener.md: kafka-python's encoder copies the records into its buffer). Fetch
sessions (KIP-227) are not kept: the answer's ``session_id`` 0 tells clients to send full
requests.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
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
from gateway.listener.failures import Failures
from gateway.listener.framing import (
    Buffer,
    MalformedRequestError,
    Reply,
    Request,
    array,
    name,
    response_header,
    size_prefix,
)
from gateway.security.acl import Operation
from gateway.service.admission import ByteBudget
from gateway.service.types import AbortedTransaction, IsolationLevel

log = logging.getLogger(__name__)

FLEXIBLE_FROM: Final = 12
TOPIC_IDS_FROM: Final = 13
"""From this version topics are named by id (KIP-516) in the request and the answer."""
MAX_PARTITIONS: Final = 1000
"""The most partitions one Fetch names (Kafka's consumers ask for a few hundred at most)."""
READ_CONCURRENCY: Final = 8
"""The partitions of one Fetch read at a time."""
FIRST_ANSWER_GRACE_S: Final = 10.0
"""How long past ``max_wait_ms`` a response with nothing yet waits for its first answer."""
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
    last_stable_offset: int | None = None  # None: the high watermark

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


TopicKey = str | uuid.UUID
"""How a Fetch names a topic: by name to v12, by id from v13 (:data:`TOPIC_IDS_FROM`)."""


def encode_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[TopicKey, Sequence[PartitionAnswer]]],
    error: int = codes.NONE,
) -> list[Buffer]:
    """A whole Fetch response frame (versions 4-18) as buffers: the fields, encoded here,
    around the record views, which are not copied. Topics are keyed by name to v12, by id from
    v13; the tagged fields (v12+: a partition's diverging epoch, current leader, snapshot id;
    v16+: the response's node endpoints) are never written."""
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM
    parts: list[Buffer] = []
    out = bytearray()

    def array(n: int) -> None:
        out.extend(encode_uvarint(n + 1) if flexible else struct.pack(">i", n))

    out += struct.pack(">i", 0)  # throttle_time_ms
    if version >= 7:
        out += struct.pack(">hi", error, 0)  # error_code, session_id: no session kept
    array(len(topics))
    for topic, partitions in topics:
        if by_id != isinstance(topic, uuid.UUID):
            raise ValueError(f"Fetch v{version} names a topic by {'id' if by_id else 'name'}, "
                             f"not {topic!r}")  # fmt: skip
        if isinstance(topic, uuid.UUID):
            out += topic.bytes
        else:
            raw = topic.encode()
            out += encode_uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))
            out += raw
        array(len(partitions))
        for p in partitions:
            out += struct.pack(">ihq", p.partition, p.error, p.high_watermark)
            lso = p.high_watermark if p.last_stable_offset is None else p.last_stable_offset
            out += struct.pack(">q", lso)
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
    topic: str  # the name ("" for an id not served)
    partition: int
    offset: int
    max_bytes: int
    refused: int = codes.NONE  # not read: answered with this error
    topic_id: uuid.UUID | None = None  # v13+: the id asked, which the read must be of

    @property
    def where(self) -> str:
        """The partition and offset, as the failure line names them."""
        return f"{self.topic or self.topic_id}-{self.partition} at {self.offset}"

    @property
    def key(self) -> TopicKey:
        """How the answer names the topic: as the request did."""
        return self.topic if self.topic_id is None else self.topic_id


class _Reservation:
    """One request's share of ``inflight_bytes``: reserved read by read, within what is left
    of the request's ``max_bytes`` (Kafka's readFromLog with the remaining bytes), given back
    as reads turn out smaller, and released down to the answer once it is cut.

    Once nothing is left, a read waits for the reads under way (they may give bytes back);
    when they are done and still nothing is left, the bytes are held by answers with records
    and :meth:`take` answers 0: the partition is not read (Kafka's minOneMessage is for the
    first partition with data only), so a spent ``max_bytes`` reads no more batches."""

    def __init__(self, budget: ByteBudget, total: int, deadline: Deadline) -> None:
        self._budget = budget
        self._deadline = deadline
        self.left = total
        self.held = 0
        self._reading = 0  # reads holding a share, not done
        self._changed = asyncio.Event()  # set (and replaced) when one of them is done

    async def take(self, wanted: int) -> int:
        """Reserve a read's share (at most ``wanted``, within what is left); 0: nothing is
        left and no read under way can give any back, the partition is not to be read. A
        share taken is ended by :meth:`done` once the read has given back what it did not
        use; a share refused (the budget did not free up in time) ends itself."""
        while self.left <= 0 and self._reading:
            await self._changed.wait()
        if self.left <= 0:
            return 0
        asked = min(wanted, self.left)  # taken from the request before waiting for the budget,
        self.left -= asked  # so reads waiting together do not each take what is left
        self._reading += 1
        try:
            n = await self._budget.acquire(asked, self._deadline)
        except BaseException:
            self.left += asked
            self.done()
            raise
        self.held += n
        self.left += asked - n
        return n

    def done(self) -> None:
        """A read that took a share has given back what it did not use."""
        self._reading -= 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def give_back(self, n: int, *, to_request: bool = True) -> None:
        n = min(n, self.held)
        if n <= 0:
            return
        self.held -= n
        if to_request:
            self.left += n
        self._budget.release(n)

    def keep(self, n: int) -> None:
        """Release all but ``n`` bytes (the answer's size)."""
        self.give_back(self.held - n, to_request=False)

    def release(self) -> None:
        self.give_back(self.held, to_request=False)


async def _read_one(  # noqa: PLR0917 - one partition's read and its accounting
    ctx: Context,
    want: _Wanted,
    isolation: IsolationLevel,
    deadline: Deadline,
    reservation: _Reservation,
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
            answer.error = codes.error_code(exc)
            failures.add(want.where, answer.error, exc)
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
    want: _Wanted,
    isolation: IsolationLevel,
    deadline: Deadline,
    reservation: _Reservation,
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
    except GatewayError as exc:
        reservation.give_back(taken)
        answer.error = codes.error_code(exc)
        failures.add(want.where, answer.error, exc)
        return answer
    except Exception as exc:
        reservation.give_back(taken)
        answer.error = codes.UNKNOWN_SERVER_ERROR
        failures.add(want.where, answer.error, repr(exc))
        failures.unexpected = failures.unexpected or exc
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


def _other_incarnation(want: _Wanted, read: uuid.UUID | None, failures: Failures) -> bool:
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


async def _topic_ids(ctx: Context, wanted: list[uuid.UUID]) -> tuple[dict[uuid.UUID, str], int]:
    """The ids served (each name's newest incarnation) and their names (:class:`TopicIds`,
    kept between requests), and the error an id not among them answers: ``UNKNOWN_TOPIC_ID``,
    or the catalog's own error while it cannot be listed (e.g. ``LEADER_NOT_AVAILABLE`` before
    the first bucket scan is done)."""
    try:
        names = await ctx.topic_ids.names(ctx.service, wanted)
    except GatewayError as exc:
        code = codes.error_code(exc)
        log.info("fetch: the topic ids cannot be resolved: error %d: %s", code, exc)
        return {}, code
    return names, codes.UNKNOWN_TOPIC_ID


async def _wants(
    ctx: Context, request: Request, total: int
) -> tuple[list[_Wanted], dict[str, bool]]:
    """The partitions asked, each once (its first occurrence), with the principal's right to
    read their topics (v13+: named by id, resolved by :func:`_topic_ids`); more than
    :data:`MAX_PARTITIONS` entries is a malformed request."""
    body: Any = request.body
    by_id = request.api_version >= TOPIC_IDS_FROM
    names: dict[uuid.UUID, str] = {}
    unknown = codes.UNKNOWN_TOPIC_ID
    if by_id:
        wanted = [t.topic_id for t in array(body.topics, "topics")]
        names, unknown = await _topic_ids(ctx, [i for i in wanted if isinstance(i, uuid.UUID)])
    allowed: dict[str, bool] = {}
    wants: list[_Wanted] = []
    seen: set[tuple[TopicKey, int]] = set()
    entries = 0
    for t in array(body.topics, "topics"):
        topic_id: uuid.UUID | None = None
        if by_id:
            topic_id = t.topic_id
            if not isinstance(topic_id, uuid.UUID):
                raise MalformedRequestError("a topic id is null")
            topic = names.get(topic_id, "")
        else:
            topic = name(t.topic, "a topic name")
        partitions = array(t.partitions, "partitions")
        entries += len(partitions)
        if entries > MAX_PARTITIONS:
            raise MalformedRequestError(f"a Fetch naming more than {MAX_PARTITIONS} partitions")
        if not topic and by_id:
            refused = unknown
        else:
            if topic not in allowed:
                allowed[topic] = ctx.allows(request.principal, request.host, Operation.READ,
                                            topic)  # fmt: skip
            refused = codes.NONE if allowed[topic] else codes.TOPIC_AUTHORIZATION_FAILED
        key: TopicKey = topic if topic_id is None else topic_id
        for p in partitions:
            if (key, p.partition) in seen:
                continue  # as Kafka: the first occurrence is read and answered
            seen.add((key, p.partition))
            share = max(1, min(p.partition_max_bytes, total))
            wants.append(_Wanted(topic, p.partition, p.fetch_offset, share, refused, topic_id))
    return wants, allowed


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
    wants, allowed = await _wants(ctx, request, total)
    # max_wait_ms within request_timeout_ms: a client cannot park a connection for longer
    wait_ms = min(max(body.max_wait_ms, 0), ctx.settings.request_timeout_ms)
    deadline = ctx.deadline(wait_ms)
    started = time.monotonic()
    reservation = _Reservation(ctx.budget, total, deadline)
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
    pairs: Sequence[tuple[_Wanted, PartitionAnswer]],
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
    wants: list[_Wanted],
    isolation: IsolationLevel,
    deadline: Deadline,
    wait_s: float,
    cap_s: float,
    reservation: _Reservation,
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
    late: list[tuple[_Wanted, PartitionAnswer]] = []
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
    late: list[tuple[_Wanted, PartitionAnswer]],
    limit: asyncio.Semaphore,
    *,
    storage_error: bool,
) -> None:
    """Fill in the real bounds of the partitions not read in time (the service's in-memory
    partition bounds), so that no client stores -1 as a high watermark; with
    ``storage_error`` (nothing answered by the cap), they also say ``KAFKA_STORAGE_ERROR``.
    A partition whose bounds fail answers the error of that failure."""

    async def one(want: _Wanted, answer: PartitionAnswer) -> None:
        async with limit:
            if await _fill_bounds(ctx, want, answer) and storage_error:
                answer.error = codes.KAFKA_STORAGE_ERROR

    await asyncio.gather(*(one(w, a) for w, a in late))


async def _fill_bounds(ctx: Context, want: _Wanted, answer: PartitionAnswer) -> bool:
    """Set the real bounds of a partition answered without a read (the service's in-memory
    partition bounds: the remote log end as ``high_watermark`` and ``last_stable_offset``);
    False, with the error, when they fail or are another incarnation's than the id asked."""
    try:
        info = await ctx.service.partition(want.topic, want.partition)
    except GatewayError as exc:
        answer.error = codes.error_code(exc)
        return False
    except Exception:  # a bug: this partition says so, the response goes
        log.warning("fetch: the bounds of %s failed", want.where, exc_info=True)
        answer.error = codes.UNKNOWN_SERVER_ERROR
        return False
    if want.topic_id is not None and info.topic_id != want.topic_id:
        answer.error = codes.UNKNOWN_TOPIC_ID  # re-created meanwhile: not this id's bounds
        return False
    answer.high_watermark = info.remote_log_end_offset
    answer.log_start_offset = info.remote_log_start_offset
    return True
