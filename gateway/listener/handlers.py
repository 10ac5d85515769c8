"""The APIs other than Fetch, and the versions advertised (:data:`VERSIONS`).

* ApiVersions (0-3): the version table; a client asking a newer ApiVersions version gets the
  v0 answer with ``UNSUPPORTED_VERSION`` and the table, then asks again at a version listed
  (KIP-511);
* Metadata (1-12): the gateway as the only broker (:data:`NODE_ID`, the listener's address),
  leader of every remote partition (leader epoch: the partition's latest); partitions 0 to
  the highest with remote data, those with none ``LEADER_NOT_AVAILABLE`` with no leader (-1)
  and no replicas, as clients take the partition count from the list; topic ids; a topic
  not in the bucket: ``UNKNOWN_TOPIC_OR_PARTITION`` (never created); no topics asked (null):
  every topic in the catalog;
* ListOffsets (1-11, ``remote-read-semantics.md`` §12.1): ``-2`` EARLIEST = the remote log
  start, ``-1`` LATEST = the last fetchable offset (the remote log end; with
  ``isolation_level`` 1, read_committed, the remote last stable offset), ``-3``
  MAX_TIMESTAMP (v7+), a timestamp >= 0 = the first offset at or after it, none (-1) when
  that is at or past the last fetchable offset (:meth:`Service.list_offsets`). The gateway's
  log is the remote tier, with no local part: ``-5`` LATEST_TIERED (v9+, KIP-1005) = the
  highest offset in remote storage (the remote log end - 1, with its leader epoch; -1 and
  epoch -1 when the remote log is empty); ``-4`` EARLIEST_LOCAL (v8+) = where the local log
  begins: an empty local log begins at the log end, so the remote log end (with the latest
  leader epoch); ``-6`` EARLIEST_PENDING_UPLOAD (v11+, KIP-1023) = the first offset not in
  remote storage, max(highest remote + 1, log start): the remote log end too, and when
  nothing is in remote storage the EARLIEST answer (§12.1: the local log starts at the log
  start, the gateway having no local part). These three
  read the remote tier whatever the isolation level (as a broker's do). A special timestamp
  below its minimum version, or any other negative one, is ``UNSUPPORTED_VERSION`` (§12.1).
  v10+ ``timeout_ms`` (KIP-1075), when positive, is the request's deadline, within
  ``request_timeout_ms``; a partition not answered by then is ``KAFKA_STORAGE_ERROR``
  (retriable, as every deadline here; a broker says ``REQUEST_TIMED_OUT``);
* FindCoordinator (0-4), OffsetFetch (1-9), OffsetCommit (2-9), JoinGroup (0-9), SyncGroup
  (0-5), Heartbeat (0-4), LeaveGroup (0-5), DescribeConfigs (1-4):
  :mod:`gateway.listener.groups` (the gateway is the group coordinator of a group with no
  committed offsets; membership, commits and configs are refused with typed errors);
* Produce (3-9): every partition ``INVALID_REQUEST`` with the message that this is a read-only
  history listener; acks=0 (no answer expected): the connection is closed, as Kafka does
  when such a produce fails;
* SaslHandshake (0-1), SaslAuthenticate (0-2): :mod:`gateway.listener.sasl`.

ACLs, as the HTTP API's (:meth:`Context.allows`): Metadata and ListOffsets need ``Describe``
on the topic, Fetch ``Read``; a topic refused is ``TOPIC_AUTHORIZATION_FAILED`` whether or not
it exists (asked by id: ``UNKNOWN_TOPIC_ID``, as for an id not known); a Metadata request for
every topic lists only those the principal may describe.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from gateway.deadline import Deadline
from gateway.errors import DeadlineExceededError, GatewayError
from gateway.listener import codes, groups
from gateway.listener.context import NODE_ID, Context
from gateway.listener.failures import Failures
from gateway.listener.fetch import READ_CONCURRENCY, fetch
from gateway.listener.framing import (
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    MESSAGES,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    MalformedRequestError,
    Reply,
    Request,
    array,
    frame,
    name,
)
from gateway.security.acl import Operation
from gateway.service.protocol import OffsetSpec
from gateway.service.types import IsolationLevel

log = logging.getLogger(__name__)

VERSIONS: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 9),
    FETCH: (4, 18),
    LIST_OFFSETS: (1, 11),
    METADATA: (1, 12),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    API_VERSIONS: (0, 3),
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_CONFIGS: (1, 4),
}
"""API key -> the versions served. Fetch from 4 (isolation levels, aborted transactions), to 18
(v13+ names topics by id); ListOffsets to 11 (every special timestamp); OffsetFetch and
OffsetCommit to 9 (v10 names topics by id); FindCoordinator to 4 (v5+ adds share groups). Every
version listed is one kafka-python's schemas decode and ``tests/unit/listener`` asks."""

CLUSTER_ID: Final = "tiered-gateway"
READ_ONLY: Final = (
    "this is a read-only Kafka listener over tiered history: Produce is not supported"
)
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

MAX_NAMED: Final = 10_000
"""The most topics one Metadata request names, and the most partitions one ListOffsets
request names (entries, duplicates counted): more is a malformed request and closes the
connection, as a Fetch naming more than its :data:`~gateway.listener.fetch_plan.MAX_PARTITIONS`.
A client asks for every topic with a null list, not by naming ten thousand."""

Handler = Callable[[Context, Request], Awaitable[Reply | None]]


def _response(request: Request) -> Any:
    """kafka-python's response class at the request's version."""
    return MESSAGES[request.api_key][1][request.api_version]


def api_versions_table(response_class: Any) -> list[Any]:
    return [
        response_class.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(VERSIONS.items())
    ]


def unsupported_api_versions(correlation_id: int) -> Reply:
    """The v0 ApiVersions answer to a version newer than 3: ``UNSUPPORTED_VERSION`` and the
    table, from which the client picks the version to ask again with."""
    response_class = MESSAGES[API_VERSIONS][1][0]
    body = response_class(
        error_code=codes.UNSUPPORTED_VERSION, api_keys=api_versions_table(response_class)
    )
    return Reply([frame(body, correlation_id)])


async def api_versions(ctx: Context, request: Request) -> Reply:
    response_class = _response(request)
    body = response_class(
        error_code=codes.NONE,
        api_keys=api_versions_table(response_class),
        throttle_time_ms=0,
        supported_features=[],
        finalized_features_epoch=-1,
        finalized_features=[],
        zk_migration_ready=False,
    )
    return Reply([frame(body, request.correlation_id)])


async def metadata(ctx: Context, request: Request) -> Reply:
    response_class = _response(request)
    asked = request.body.topics
    try:
        catalog = await ctx.service.topics()  # name -> ids, newest first
    except GatewayError as exc:  # e.g. the first bucket scan has not finished
        code = codes.error_code(exc)
        log.info("metadata: error %d: %s", code, exc)
        catalog, unknown = {}, code
    else:
        unknown = codes.UNKNOWN_TOPIC_OR_PARTITION
    by_id = {ids[0]: name for name, ids in catalog.items() if ids}
    who = (request.principal, request.host)
    if asked is None:  # every topic the principal may describe
        names: list[tuple[str | None, uuid.UUID | None]] = [
            (n, None) for n in sorted(catalog) if ctx.allows(*who, Operation.DESCRIBE, n)
        ]
    else:  # each topic once (as Kafka, which collects them in a set), in request order
        listed = array(asked, "topics")
        if len(listed) > MAX_NAMED:
            raise MalformedRequestError(f"a Metadata request naming more than {MAX_NAMED} topics")
        names = list(dict.fromkeys((t.name, _topic_id(t)) for t in listed))  # null name: by id
    topics = [
        topic_error(response_class, name, codes.TOPIC_AUTHORIZATION_FAILED)
        if name is not None and not ctx.allows(*who, Operation.DESCRIBE, name)
        else await _topic(
            ctx, request, response_class, name=name, topic_id=tid, catalog=catalog, by_id=by_id
        )
        if catalog or unknown == codes.UNKNOWN_TOPIC_OR_PARTITION
        else topic_error(response_class, name, unknown)
        for name, tid in names
    ]
    broker = response_class.MetadataResponseBroker(
        node_id=NODE_ID, host=ctx.host, port=ctx.port, rack=None
    )
    body = response_class(
        throttle_time_ms=0,
        brokers=[broker],
        cluster_id=CLUSTER_ID,
        controller_id=NODE_ID,
        topics=topics,
        authorized_operations=set(),
        error_code=codes.NONE,
    )
    error = next((t.error_code for t in topics if t.error_code != codes.NONE), codes.NONE)
    return Reply([frame(body, request.correlation_id)], error=error)


def topic_error(response_class: Any, name: str | None, code: int) -> Any:
    """A topic of a Metadata answer with error ``code`` and no partitions."""
    return response_class.MetadataResponseTopic(
        error_code=code, name=name, topic_id=uuid.UUID(int=0), is_internal=False, partitions=[]
    )


def _topic_id(topic: Any) -> uuid.UUID | None:
    tid = getattr(topic, "topic_id", None)
    return tid if isinstance(tid, uuid.UUID) and tid.int != 0 else None


async def _topic(
    ctx: Context,
    request: Request,
    response_class: Any,
    *,
    name: str | None,
    topic_id: uuid.UUID | None,
    catalog: dict[str, list[uuid.UUID]],
    by_id: dict[uuid.UUID, str],
) -> Any:
    topic_class = response_class.MetadataResponseTopic
    if name is None and topic_id is not None:
        name = by_id.get(topic_id)
        if name is None or not ctx.allows(
            request.principal, request.host, Operation.DESCRIBE, name
        ):  # refused: as an id not known
            return topic_class(
                error_code=codes.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, partitions=[]
            )
    if name is None or name not in catalog:
        return topic_error(response_class, name, codes.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        infos = await ctx.service.partitions(name)
    except GatewayError as exc:
        code = codes.error_code(exc)
        log.info("metadata of %s: error %d: %s", name, code, exc)
        return topic_class(error_code=code, name=name, topic_id=catalog[name][0], partitions=[])
    partition_class = topic_class.MetadataResponsePartition
    present = {i.partition: i for i in infos}
    count = max(present) + 1 if present else 0
    partitions = [
        partition_class(
            error_code=codes.NONE,
            partition_index=p,
            leader_id=NODE_ID,
            leader_epoch=info.leader_epochs[-1][0] if info.leader_epochs else -1,
            replica_nodes=[NODE_ID],
            isr_nodes=[NODE_ID],
            offline_replicas=[],
        )
        if (info := present.get(p)) is not None
        else partition_class(  # no remote data: listed, so clients count every partition
            error_code=codes.LEADER_NOT_AVAILABLE,
            partition_index=p,
            leader_id=-1,
            leader_epoch=-1,
            replica_nodes=[],
            isr_nodes=[],
            offline_replicas=[],
        )
        for p in range(count)
    ]
    topic_id = infos[0].topic_id if infos else catalog[name][0]
    return topic_class(
        error_code=codes.NONE,
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=partitions,
        authorized_operations=set(),
    )


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
        # the remote log end (read_uncommitted: every offset in remote storage), its epoch
        end = await ctx.service.list_offsets(
            topic, partition, "latest", deadline, isolation=IsolationLevel.READ_UNCOMMITTED
        )
        epoch = -1 if end.leader_epoch is None else end.leader_epoch
        if timestamp == EARLIEST_LOCAL or (timestamp == EARLIEST_PENDING_UPLOAD and end.offset > 0):
            return end.offset, -1, epoch
        if timestamp == EARLIEST_PENDING_UPLOAD:  # nothing uploaded: as EARLIEST (§12.1)
            spec = "earliest"
        elif end.offset <= 0:  # LATEST_TIERED, nothing in remote storage
            return -1, -1, -1
        else:
            info = await ctx.service.partition(topic, partition)
            return end.offset - 1, -1, _epoch_of(info.leader_epochs, end.offset - 1)
    else:
        return None
    found = await ctx.service.list_offsets(topic, partition, spec, deadline, isolation=isolation)
    return found.offset, found.timestamp, -1 if found.leader_epoch is None else found.leader_epoch


def _epoch_of(lineage: Sequence[tuple[int, int]], offset: int) -> int:
    """The leader epoch of ``offset`` in an epoch lineage ((epoch, start offset), ascending):
    the last epoch starting at or before it; -1 when none does."""
    epoch = -1
    for e, start in lineage:
        if start <= offset:
            epoch = e
    return epoch


async def list_offsets(ctx: Context, request: Request) -> Reply:
    """Every partition answered (see the module docstring), at most :data:`READ_CONCURRENCY`
    read at a time; a partition of an allowed topic named twice answers ``INVALID_REQUEST`` at
    each occurrence, as Kafka's; an unexpected error is that partition's
    ``UNKNOWN_SERVER_ERROR``; the failures are logged on one line."""
    response_class = _response(request)
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
        except GatewayError as exc:
            answer.error_code = codes.error_code(exc)
            failures.add(f"{topic}-{p.partition_index} ({p.timestamp})", answer.error_code, exc)
            return answer
        except Exception as exc:  # a bug: this partition's answer says so, the others stand
            answer.error_code = codes.UNKNOWN_SERVER_ERROR
            failures.add(f"{topic}-{p.partition_index} ({p.timestamp})", answer.error_code,
                         repr(exc))  # fmt: skip
            failures.unexpected = failures.unexpected or exc
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


async def produce(ctx: Context, request: Request) -> Reply | None:
    body = request.body
    if body.acks == 0:  # no answer is sent: as Kafka, closing is how the producer learns
        return Reply([], error=codes.INVALID_REQUEST, close=True)
    response_class = _response(request)
    topic_class = response_class.TopicProduceResponse
    partition_class = topic_class.PartitionProduceResponse
    topics = [
        topic_class(
            name=name(t.name, "a topic name"),
            partition_responses=[
                partition_class(
                    index=p.index,
                    error_code=codes.INVALID_REQUEST,
                    base_offset=-1,
                    log_append_time_ms=-1,
                    log_start_offset=-1,
                    record_errors=[],
                    error_message=READ_ONLY,
                )
                for p in array(t.partition_data, "partition_data")
            ],
        )
        for t in array(body.topic_data, "topic_data")
    ]
    return Reply(
        [frame(response_class(throttle_time_ms=0, responses=topics), request.correlation_id)]
    )


HANDLERS: Final[dict[int, Handler]] = {
    API_VERSIONS: api_versions,
    METADATA: metadata,
    LIST_OFFSETS: list_offsets,
    FETCH: fetch,
    FIND_COORDINATOR: groups.find_coordinator,
    OFFSET_FETCH: groups.offset_fetch,
    OFFSET_COMMIT: groups.offset_commit,
    JOIN_GROUP: groups.join_group,
    SYNC_GROUP: groups.sync_group,
    HEARTBEAT: groups.heartbeat,
    LEAVE_GROUP: groups.leave_group,
    DESCRIBE_CONFIGS: groups.describe_configs,
    PRODUCE: produce,
}
