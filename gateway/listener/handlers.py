"""Metadata (API key 3) and Produce (API key 0): the gateway as the only broker; and no
writes.

* Metadata (1-12): the gateway as the only broker (:data:`NODE_ID`, the listener's address),
  leader of every remote partition (leader epoch: the partition's latest); partitions 0 to
  the highest with remote data, those with none ``LEADER_NOT_AVAILABLE`` with no leader (-1)
  and no replicas, as clients take the partition count from the list; topic ids; a topic
  not in the bucket: ``UNKNOWN_TOPIC_OR_PARTITION`` (never created); no topics asked (null):
  every topic in the catalog. ACLs, as the HTTP API's (:meth:`Context.allows`): a topic
  the principal may not ``Describe`` is ``TOPIC_AUTHORIZATION_FAILED`` whether or not it
  exists (asked by id: ``UNKNOWN_TOPIC_ID``, as for an id not known); a request for every
  topic lists only those the principal may describe;
* Produce (3-9): every partition ``INVALID_REQUEST`` with the message that this is a read-only
  history listener; acks=0 (no answer expected): the connection is closed, as Kafka does
  when such a produce fails.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Final

from gateway.errors import GatewayError
from gateway.listener import codes
from gateway.listener.context import NODE_ID, Context
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

log = logging.getLogger(__name__)

CLUSTER_ID: Final = "tiered-gateway"
READ_ONLY: Final = (
    "this is a read-only Kafka listener over tiered history: Produce is not supported"
)


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
