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
* ListOffsets (1-11): :mod:`gateway.listener.offsets`;
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

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

from gateway.errors import GatewayError
from gateway.listener import codes, groups
from gateway.listener.context import NODE_ID, Context
from gateway.listener.fetch import fetch
from gateway.listener.framing import (
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    MAX_NAMED,
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
    response_for,
)
from gateway.listener.offsets import list_offsets
from gateway.security.acl import Operation

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
Handler = Callable[[Context, Request], Awaitable[Reply | None]]


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
    response_class = response_for(request)
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
    response_class = response_for(request)
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


async def produce(ctx: Context, request: Request) -> Reply | None:
    body = request.body
    if body.acks == 0:  # no answer is sent: as Kafka, closing is how the producer learns
        return Reply([], error=codes.INVALID_REQUEST, close=True)
    response_class = response_for(request)
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
