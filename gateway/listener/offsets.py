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
  whatever the isolation level (as a broker's do); the service answers them
  (:meth:`GatewayService.list_offsets <gateway.service.core.GatewayService.list_offsets>`),
  this module maps each to its spec and first version;
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
from typing import Any, Final

from gateway.deadline import Deadline
from gateway.errors import DeadlineExceededError
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
    -4: ("earliest_local", 8),  # KIP-1005 EARLIEST_LOCAL
    -5: ("latest_tiered", 9),  # KIP-1005 LATEST_TIERED
    -6: ("earliest_pending_upload", 11),  # KIP-1023 EARLIEST_PENDING_UPLOAD
}
"""A special timestamp -> the service's spec and the first ListOffsets version taking it (what
-4 to -6 mean for a log that is all remote tier is the service's to say)."""


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
    else:
        return None
    return _triple(await ctx.service.list_offsets(topic, partition, spec, deadline,
                                                  isolation=isolation))  # fmt: skip


def _triple(found: OffsetResult) -> tuple[int, int, int]:
    """A service answer as the partition's (offset, timestamp, leader epoch); -1: none."""
    return found.offset, found.timestamp, -1 if found.leader_epoch is None else found.leader_epoch


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
