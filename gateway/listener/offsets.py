"""ListOffsets (API key 2, versions 1-11, ``remote-read-semantics.md`` §12.1).

* ``-2`` EARLIEST = the remote log start; ``-1`` LATEST = the last fetchable offset (the
  remote log end; with ``isolation_level`` 1, read_committed, the remote last stable offset);
  ``-3`` MAX_TIMESTAMP (v7+); a timestamp >= 0 = the first offset at or after it, none (-1)
  when that is at or past the last fetchable offset (:meth:`Service.list_offsets`);
* the gateway's log is the remote tier, with no local part: ``-5`` LATEST_TIERED (v9+,
  KIP-1005) = the highest offset in remote storage (the remote log end - 1, with its leader
  epoch; -1 and epoch -1 when the remote log is empty); ``-4`` EARLIEST_LOCAL (v8+) = where
  the local log begins: an empty local log begins at the log end, so the remote log end (with
  the latest leader epoch); ``-6`` EARLIEST_PENDING_UPLOAD (v11+, KIP-1023) = the first
  offset not in remote storage, max(highest remote + 1, log start): the remote log end too,
  and when nothing is in remote storage the EARLIEST answer (§12.1: the local log starts at
  the log start, the gateway having no local part). These three read the remote tier
  whatever the isolation level (as a broker's do);
* a special timestamp below its minimum version, or any other negative one, is
  ``UNSUPPORTED_VERSION`` (§12.1);
* v10+ ``timeout_ms`` (KIP-1075), when positive, is the request's deadline, within
  ``request_timeout_ms``; a partition not answered by then is ``KAFKA_STORAGE_ERROR``
  (retriable, as every deadline here; a broker says ``REQUEST_TIMED_OUT``).

A topic the principal may not ``Describe`` answers ``TOPIC_AUTHORIZATION_FAILED`` (the HTTP
API's ACLs, :meth:`Context.allows`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from gateway.deadline import Deadline
from gateway.errors import DeadlineExceededError
from gateway.kafka.epoch import LeaderEpochCache
from gateway.listener import codes
from gateway.listener.context import Context
from gateway.listener.failures import Failures
from gateway.listener.fetch import READ_CONCURRENCY
from gateway.listener.framing import (
    MAX_NAMED,
    MalformedRequestError,
    Reply,
    Request,
    array,
    frame,
    name,
    response_for,
)
from gateway.security.acl import Operation
from gateway.service.protocol import OffsetSpec
from gateway.service.types import IsolationLevel, OffsetResult

log = logging.getLogger(__name__)

_SPECS: Final[dict[int, tuple[OffsetSpec, int]]] = {
    -1: ("latest", 1),
    -2: ("earliest", 1),
    -3: ("max_timestamp", 7),
}
"""A special timestamp -> the service's spec and the first ListOffsets version taking it."""
EARLIEST_LOCAL: Final = -4
LATEST_TIERED: Final = -5
EARLIEST_PENDING_UPLOAD: Final = -6
_REMOTE_END_SPECS: Final[dict[int, int]] = {
    EARLIEST_LOCAL: 8,
    LATEST_TIERED: 9,
    EARLIEST_PENDING_UPLOAD: 11,
}
"""The special timestamps answered from the remote log end, and their first version."""


def _list_offsets_deadline(ctx: Context, request: Request) -> Deadline:
    """``request_timeout_ms``, or v10+'s ``timeout_ms`` when positive and shorter."""
    timeout_ms = ctx.settings.request_timeout_ms
    asked = getattr(request.body, "timeout_ms", 0) if request.api_version >= 10 else 0
    if asked > 0:
        timeout_ms = min(timeout_ms, asked)
    return Deadline.after(timeout_ms / 1000)


async def _offset(
    ctx: Context,
    topic: str,
    partition: int,
    timestamp: int,
    version: int,
    *,
    deadline: Deadline,
    isolation: IsolationLevel,
) -> tuple[int, int, int] | None:
    """One partition's answer to ``timestamp``: (offset, timestamp, leader epoch), or the
    service's typed error; None for a negative timestamp not served at ``version``."""
    special = _SPECS.get(timestamp)
    if special is not None and version >= special[1]:
        spec: OffsetSpec = special[0]
    elif timestamp >= 0:
        spec = timestamp
    elif version >= _REMOTE_END_SPECS.get(timestamp, version + 1):
        return await _remote_tier(ctx, topic, partition, timestamp, deadline=deadline,
                                  isolation=isolation)  # fmt: skip
    else:
        return None
    return _triple(await ctx.service.list_offsets(topic, partition, spec, deadline,
                                                  isolation=isolation))  # fmt: skip


async def _remote_tier(
    ctx: Context,
    topic: str,
    partition: int,
    timestamp: int,
    *,
    deadline: Deadline,
    isolation: IsolationLevel,
) -> tuple[int, int, int]:
    """The answer to ``-4`` EARLIEST_LOCAL, ``-5`` LATEST_TIERED or ``-6``
    EARLIEST_PENDING_UPLOAD (the module docstring), from the remote log end read
    read_uncommitted (every offset in remote storage) and its epoch. What these mean for a
    log that is all remote tier is the service's semantics, answered here from its
    ``latest``, ``earliest`` and partition bounds."""
    end = await ctx.service.list_offsets(
        topic, partition, "latest", deadline, isolation=IsolationLevel.READ_UNCOMMITTED
    )
    epoch = -1 if end.leader_epoch is None else end.leader_epoch
    if timestamp == EARLIEST_LOCAL or (timestamp == EARLIEST_PENDING_UPLOAD and end.offset > 0):
        return end.offset, -1, epoch
    if timestamp == EARLIEST_PENDING_UPLOAD:  # nothing uploaded: as EARLIEST (§12.1)
        found = await ctx.service.list_offsets(
            topic, partition, "earliest", deadline, isolation=isolation
        )
        return _triple(found)
    if end.offset <= 0:  # LATEST_TIERED, nothing in remote storage
        return -1, -1, -1
    info = await ctx.service.partition(topic, partition)
    return end.offset - 1, -1, _epoch_of(info.leader_epochs, end.offset - 1)


def _triple(found: OffsetResult) -> tuple[int, int, int]:
    """A service answer as the partition's (offset, timestamp, leader epoch); -1: none."""
    return found.offset, found.timestamp, -1 if found.leader_epoch is None else found.leader_epoch


def _epoch_of(lineage: Sequence[tuple[int, int]], offset: int) -> int:
    """The leader epoch of ``offset`` in a partition's epoch lineage ((epoch, start offset),
    ascending, as :class:`~gateway.service.types.PartitionInfo` shows it, from the service's
    own :class:`LeaderEpochCache`): Kafka's ``epochForOffset``, the last epoch starting at or
    before it; -1 when none does."""
    epoch = LeaderEpochCache(lineage).epoch_for_offset(offset)
    return -1 if epoch is None else epoch


async def list_offsets(ctx: Context, request: Request) -> Reply:
    """Every partition answered (the module docstring), at most :data:`READ_CONCURRENCY`
    read at a time; a partition of an allowed topic named twice answers ``INVALID_REQUEST`` at
    each occurrence, as Kafka's; an unexpected error is that partition's
    ``UNKNOWN_SERVER_ERROR``; the failures are logged on one line."""
    response_class = response_for(request)
    topic_class = response_class.ListOffsetsTopicResponse
    partition_class = topic_class.ListOffsetsPartitionResponse
    version = request.api_version
    deadline = _list_offsets_deadline(ctx, request)
    committed = version >= 2 and request.body.isolation_level == 1
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    asked = [
        (name(t.name, "a topic name"), array(t.partitions, "partitions"))
        for t in array(request.body.topics, "topics")
    ]
    if sum(len(partitions) for _, partitions in asked) > MAX_NAMED:
        raise MalformedRequestError(f"a ListOffsets request naming more than {MAX_NAMED} "
                                    "partitions")  # fmt: skip
    named = Counter((topic, p.partition_index) for topic, partitions in asked for p in partitions)
    allowed = {
        topic: ctx.allows(request.principal, request.host, Operation.DESCRIBE, topic)
        for topic in {topic for topic, _ in asked}
    }
    limit = asyncio.Semaphore(READ_CONCURRENCY)
    failures = Failures("list offsets", log)

    async def one(topic: str, p: Any) -> Any:
        answer = partition_class(
            partition_index=p.partition_index,
            error_code=codes.NONE,
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        )
        if not allowed[topic]:  # first, as Kafka: duplicates are looked for among the allowed
            answer.error_code = codes.TOPIC_AUTHORIZATION_FAILED
            return answer
        if named[(topic, p.partition_index)] > 1:
            answer.error_code = codes.INVALID_REQUEST
            return answer
        try:
            async with limit:
                try:  # the request's deadline, whatever the service does with it
                    async with asyncio.timeout(max(deadline.remaining(), 0.0)):
                        found = await _offset(
                            ctx, topic, p.partition_index, p.timestamp, version,
                            deadline=deadline, isolation=isolation,
                        )  # fmt: skip
                except TimeoutError:
                    raise DeadlineExceededError(
                        f"list offsets of {topic}-{p.partition_index}: the deadline passed"
                    ) from None
        except Exception as exc:  # the service's typed error, or a bug: this partition's answer
            where = f"{topic}-{p.partition_index} ({p.timestamp})"  # the others stand
            answer.error_code = failures.failed(where, exc)
            return answer
        if found is None:  # §12.1: below its version, or no such timestamp
            answer.error_code = codes.UNSUPPORTED_VERSION
        else:
            answer.offset, answer.timestamp, answer.leader_epoch = found
        return answer

    answers = iter(await asyncio.gather(*(one(t, p) for t, ps in asked for p in ps)))
    topics = [
        topic_class(name=topic, partitions=[next(answers) for _ in partitions])
        for topic, partitions in asked
    ]
    failures.log()
    error = next(
        (p.error_code for t in topics for p in t.partitions if p.error_code != codes.NONE),
        codes.NONE,
    )
    body = response_class(throttle_time_ms=0, topics=topics)
    one_topic = topics[0].name if len({t.name for t in topics}) == 1 else None
    return Reply([frame(body, request.correlation_id)], error=error, topic=one_topic)
