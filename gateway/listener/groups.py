"""Consumer groups, committed offsets and configs: what a read-only history listener answers.

The listener keeps no group state: there is no membership, no committed offset, no config.
Clients still send these requests (librdkafka looks up the coordinator of every consumer with
a ``group.id``, which confluent-kafka requires; a consumer that ``assign()``s partitions with
no explicit offset asks for the committed ones; auto-commit commits), so each is answered the
same for every client, in a way that keeps reading consumers reading and makes what cannot
work fail at once with a clear error:

* FindCoordinator (0-4): for a group (key type 0, and each key of the v4 batched form) the
  gateway itself (:data:`~gateway.listener.context.NODE_ID`, the address Metadata advertises),
  no error; for a transactional id (key type 1) ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``,
  any other key type ``INVALID_REQUEST``, both non-retriable, with :data:`NO_TRANSACTIONS` as
  the message (v1+): a transactional producer fails at once instead of retrying a lookup;
* OffsetFetch (1-9, v8+ with its groups array): no committed offset: every partition asked
  ``committed_offset`` -1, metadata ``""``, no error, as Kafka answers for a new group, so
  the client applies ``auto.offset.reset``; a topic the principal may not ``Describe``:
  ``TOPIC_AUTHORIZATION_FAILED`` on its partitions; every topic (null): none;
* OffsetCommit (2-9): every partition ``GROUP_AUTHORIZATION_FAILED`` (:data:`GROUP_CODE`;
  the response has no message field). Java, librdkafka, kafka-python and aiokafka all treat
  that code as permanent for a commit: an explicit commit raises it (kafka-python's and
  aiokafka's ``GroupAuthorizationFailedError``, confluent-kafka's ``KafkaException``), an
  auto-commit failure is logged as a warning and the poll loop goes on (librdkafka's
  ``COMMITFAIL`` log line, kafka-python's "Auto offset commit failed"), and none of them marks
  the coordinator dead or retries. A retriable code would make the clients retry the commit;
  ``UNKNOWN_MEMBER_ID`` / ``ILLEGAL_GENERATION`` would make them reset their membership;
* JoinGroup (0-9), SyncGroup (0-5), Heartbeat (0-4): ``GROUP_AUTHORIZATION_FAILED``: a
  ``subscribe()`` consumer fails at once (kafka-python's and aiokafka's ``poll()`` /
  ``getone()`` raise ``GroupAuthorizationFailedError``, librdkafka's ``poll()`` returns the
  error "JoinGroup failed: Broker: Group authorization failed", Java's raises
  ``GroupAuthorizationException``) instead of waiting for an assignment that never comes;
* LeaveGroup (0-5): no error (each member named, v3+, no error): nothing was joined, and a
  consumer's ``close()`` stays clean;
* DescribeConfigs (1-4): each resource ``INVALID_REQUEST`` with :data:`NO_CONFIGS` as its
  message (the request carries one per resource): the configs of the topics' brokers are not
  in the bucket, and a made-up answer (defaults, an empty list) would be read as the truth
  by tools that compare configs; no consumer asks for them. A topic the principal may not
  ``DescribeConfigs``: ``TOPIC_AUTHORIZATION_FAILED``, as Kafka checks that first.

ConsumerGroupHeartbeat (KIP-848) is not advertised: clients use the classic protocol.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from gateway.listener import codes
from gateway.listener.context import NODE_ID, Context
from gateway.listener.framing import Reply, Request, array, frame, name, response_for
from gateway.security.acl import Operation

log = logging.getLogger(__name__)

GROUP_CODE: Final = codes.GROUP_AUTHORIZATION_FAILED
"""The answer to group membership and commits: a code every client treats as permanent."""
GROUPS_UNSUPPORTED: Final = (
    "consumer groups are not supported by a read-only Kafka history listener (no group "
    "membership, no committed offsets): assign() partitions and seek() instead of subscribe()"
)
NO_TRANSACTIONS: Final = (
    "this read-only Kafka history listener has no transaction coordinator: transactions "
    "(and Produce) are not supported"
)
NO_CONFIGS: Final = (
    "configs are not known to a read-only Kafka history listener: it serves the tiered "
    "history from the bucket, not the topics' or brokers' configuration"
)
NO_METADATA: Final = ""
"""A partition's metadata when there is no committed offset (Kafka's ``NO_METADATA``)."""
_GROUP: Final = 0  # FindCoordinator key types
_TRANSACTION: Final = 1
_TOPIC_RESOURCE: Final = 2  # DescribeConfigs resource type


def _reply(body: Any, request: Request, error: int) -> Reply:
    return Reply([frame(body, request.correlation_id)], error=error)


async def find_coordinator(ctx: Context, request: Request) -> Reply:
    response_class = response_for(request)
    body = request.body
    key_type = body.key_type if request.api_version >= 1 else _GROUP
    if key_type == _GROUP:
        code, message, node, host, port = codes.NONE, None, NODE_ID, ctx.host, ctx.port
    else:
        failed = codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        code = failed if key_type == _TRANSACTION else codes.INVALID_REQUEST
        message, node, host, port = NO_TRANSACTIONS, -1, "", -1
    if request.api_version >= 4:
        keys = array(body.coordinator_keys, "coordinator_keys")
    else:
        keys = [name(body.key, "the key")]
    coordinators = [
        response_class.Coordinator(
            key=key, node_id=node, host=host, port=port, error_code=code, error_message=message
        )
        for key in keys
    ]
    response = response_class(
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        node_id=node,
        host=host,
        port=port,
        coordinators=coordinators,
    )
    return _reply(response, request, code)


async def offset_fetch(ctx: Context, request: Request) -> Reply:
    response_class = response_for(request)
    body = request.body
    error = codes.NONE
    if request.api_version >= 8:
        group_class = response_class.OffsetFetchResponseGroup
        topic_class = group_class.OffsetFetchResponseTopics
        classes = (topic_class, topic_class.OffsetFetchResponsePartitions)
        groups = []
        for g in array(body.groups, "groups"):
            group_id = name(g.group_id, "a group id")
            topics, code = _no_offsets(ctx, request, classes, g.topics)
            error = error or code
            groups.append(group_class(group_id=group_id, topics=topics, error_code=codes.NONE))
        response = response_class(throttle_time_ms=0, groups=groups)
    else:
        name(body.group_id, "the group id")
        topic_class = response_class.OffsetFetchResponseTopic
        classes = (topic_class, topic_class.OffsetFetchResponsePartition)
        topics, error = _no_offsets(ctx, request, classes, body.topics)
        response = response_class(throttle_time_ms=0, topics=topics, error_code=codes.NONE)
    return _reply(response, request, error)


def _no_offsets(
    ctx: Context, request: Request, classes: tuple[Any, Any], asked: list[Any] | None
) -> tuple[list[Any], int]:
    """The topics of an OffsetFetch answer to ``asked`` (null: every topic, of which none has
    a committed offset), and the first error code among them; ``classes``: the version's
    topic and partition classes."""
    if asked is None:
        return [], codes.NONE
    topic_class, partition_class = classes
    topics, error = [], codes.NONE
    for t in asked:
        topic = name(t.name, "a topic name")
        allowed = ctx.allows(request.principal, request.host, Operation.DESCRIBE, topic)
        code = codes.NONE if allowed else codes.TOPIC_AUTHORIZATION_FAILED
        error = error or code
        partitions = [
            partition_class(
                partition_index=index,
                committed_offset=-1,
                committed_leader_epoch=-1,
                metadata=NO_METADATA,
                error_code=code,
            )
            for index in array(t.partition_indexes, "partition_indexes")
        ]
        topics.append(topic_class(name=topic, partitions=partitions))
    return topics, error


async def offset_commit(ctx: Context, request: Request) -> Reply:
    response_class = response_for(request)
    topic_class = response_class.OffsetCommitResponseTopic
    partition_class = topic_class.OffsetCommitResponsePartition
    name(request.body.group_id, "the group id")
    topics = [
        topic_class(
            name=name(t.name, "a topic name"),
            partitions=[
                partition_class(partition_index=p.partition_index, error_code=GROUP_CODE)
                for p in array(t.partitions, "partitions")
            ],
        )
        for t in array(request.body.topics, "topics")
    ]
    return _reply(response_class(throttle_time_ms=0, topics=topics), request, GROUP_CODE)


async def join_group(ctx: Context, request: Request) -> Reply:
    """Refused; logged (a client retries a refused join every few seconds at most), so the
    operator sees why a consumer gets no partitions."""
    response_class = response_for(request)
    log.info("JoinGroup of group %r from %s (%s) refused: %s", request.body.group_id,
             request.principal, request.client_id, GROUPS_UNSUPPORTED)  # fmt: skip
    flexible_null = None if request.api_version >= 7 else ""  # nullable from v7
    response = response_class(
        throttle_time_ms=0,
        error_code=GROUP_CODE,
        generation_id=-1,
        protocol_type=None,
        protocol_name=flexible_null,
        leader="",
        skip_assignment=False,
        member_id=name(request.body.member_id, "the member id"),
        members=[],
    )
    return _reply(response, request, GROUP_CODE)


async def sync_group(ctx: Context, request: Request) -> Reply:
    response = response_for(request)(
        throttle_time_ms=0,
        error_code=GROUP_CODE,
        protocol_type=None,
        protocol_name=None,
        assignment=b"",
    )
    return _reply(response, request, GROUP_CODE)


async def heartbeat(ctx: Context, request: Request) -> Reply:
    response = response_for(request)(throttle_time_ms=0, error_code=GROUP_CODE)
    return _reply(response, request, GROUP_CODE)


async def leave_group(ctx: Context, request: Request) -> Reply:
    response_class = response_for(request)
    members = []
    if request.api_version >= 3:
        member_class = response_class.MemberResponse
        members = [
            member_class(
                member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=codes.NONE
            )
            for m in array(request.body.members, "members")
        ]
    response = response_class(throttle_time_ms=0, error_code=codes.NONE, members=members)
    return _reply(response, request, codes.NONE)


async def describe_configs(ctx: Context, request: Request) -> Reply:
    response_class = response_for(request)
    result_class = response_class.DescribeConfigsResult
    results = []
    error = codes.NONE
    for r in array(request.body.resources, "resources"):
        resource = name(r.resource_name, "a resource name")
        refused = r.resource_type == _TOPIC_RESOURCE and not ctx.allows(
            request.principal, request.host, Operation.DESCRIBE_CONFIGS, resource
        )
        code = codes.TOPIC_AUTHORIZATION_FAILED if refused else codes.INVALID_REQUEST
        message = None if refused else NO_CONFIGS
        error = error or code
        results.append(
            result_class(
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=resource,
                configs=[],
            )
        )
    return _reply(response_class(throttle_time_ms=0, results=results), request, error)
