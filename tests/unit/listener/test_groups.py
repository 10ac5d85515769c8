"""FindCoordinator, OffsetFetch, OffsetCommit, JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
DescribeConfigs (:mod:`gateway.listener.groups`) at every version advertised: requests encoded
by kafka-python's request classes, answers decoded by its response classes; the same answer
whatever the client; the ACLs of OffsetFetch and DescribeConfigs."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from gateway.listener import codes, framing
from gateway.listener.context import NODE_ID, Context
from gateway.listener.dispatch import HANDLERS, VERSIONS, answer, open_session
from gateway.listener.framing import MalformedRequestError
from gateway.listener.groups import NO_CONFIGS, NO_TRANSACTIONS
from gateway.listener.sasl import Session
from tests.unit.listener.secure import secured
from tests.unit.listener.support import TOPIC, context, fake_service, request, unframe

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


def _versions(key: int) -> list[int]:
    low, high = VERSIONS[key]
    return list(range(low, high + 1))


def _ask(
    message: Any,
    response_class: Any,
    version: int,
    *,
    ctx: Context | None = None,
    session: Session | None = None,
) -> Any:
    reply = asyncio.run(answer(ctx or context(port=9093), request(message, 7), session))
    response = response_class[version].decode(unframe(reply), version=version, header=True)
    assert response.header.correlation_id == 7
    return response


def _secured(folder: Path) -> Context:
    sec = asyncio.run(secured(folder))
    return replace(context(fake_service(), **sec.settings_args), access=sec.access)


def test_the_group_apis_are_advertised_and_consumer_group_heartbeat_is_not() -> None:
    message = ApiVersionsRequest[3](client_software_name="unit", client_software_version="1")
    response = _ask(message, ApiVersionsResponse, 3)
    table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert {key: table[key] for key in (8, 9, 10, 11, 12, 13, 14, 32)} == {
        framing.OFFSET_COMMIT: (2, 9),
        framing.OFFSET_FETCH: (1, 9),
        framing.FIND_COORDINATOR: (0, 4),
        framing.JOIN_GROUP: (0, 9),
        framing.HEARTBEAT: (0, 4),
        framing.LEAVE_GROUP: (0, 5),
        framing.SYNC_GROUP: (0, 5),
        framing.DESCRIBE_CONFIGS: (1, 4),
    }
    assert 68 not in table  # ConsumerGroupHeartbeat (KIP-848)
    sasl = {framing.SASL_HANDSHAKE, framing.SASL_AUTHENTICATE}  # answered by the server
    assert set(HANDLERS) | sasl == set(VERSIONS) == set(framing.API_NAMES) == set(framing.MESSAGES)


# --- FindCoordinator ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", _versions(framing.FIND_COORDINATOR))
def test_find_coordinator_names_the_gateway_for_a_group(version: int) -> None:
    message = FindCoordinatorRequest[version](key="g", key_type=0, coordinator_keys=["g", "h"])
    response = _ask(message, FindCoordinatorResponse, version)
    if version >= 4:  # batched: each key answered
        got = [(c.key, c.node_id, c.host, c.port, c.error_code) for c in response.coordinators]
        assert got == [("g", NODE_ID, "127.0.0.1", 9093, 0), ("h", NODE_ID, "127.0.0.1", 9093, 0)]
    else:
        one = (response.node_id, response.host, response.port, response.error_code)
        assert one == (NODE_ID, "127.0.0.1", 9093, codes.NONE)


@pytest.mark.parametrize("version", _versions(framing.FIND_COORDINATOR)[1:])
@pytest.mark.parametrize(
    ("key_type", "code"),
    [(1, codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), (2, codes.INVALID_REQUEST)],
)
def test_find_coordinator_has_no_transaction_coordinator(
    version: int, key_type: int, code: int
) -> None:
    message = FindCoordinatorRequest[version](key="tx", key_type=key_type, coordinator_keys=["tx"])
    response = _ask(message, FindCoordinatorResponse, version)
    (c,) = response.coordinators if version >= 4 else [response]
    assert (c.error_code, c.error_message, c.node_id) == (code, NO_TRANSACTIONS, -1)


def test_find_coordinator_answers_librdkafka_as_every_other_client() -> None:
    """No client-specific answer any more: librdkafka (named by its ApiVersions) gets the
    gateway as the coordinator, as kafka-python does."""

    async def run(software: tuple[str, str]) -> Any:
        ctx = context()
        session = open_session(ctx.access)
        hello = ApiVersionsRequest[3](client_software_name=software[0],
                                      client_software_version=software[1])  # fmt: skip
        await answer(ctx, request(hello), session)
        message = FindCoordinatorRequest[3](key="g", key_type=0)
        reply = await answer(ctx, request(message), session)
        response = FindCoordinatorResponse[3].decode(unframe(reply), version=3, header=True)
        return (response.error_code, response.node_id, response.port)

    rdkafka = asyncio.run(run(("confluent-kafka-python", "2.16.1-rdkafka-2.16.0")))
    assert rdkafka == asyncio.run(run(("kafka-python", "3.0.12"))) == (codes.NONE, NODE_ID, 9092)


# --- OffsetFetch -------------------------------------------------------------------------------


def _offset_fetch(version: int, topics: dict[str, list[int]] | None, group: str = "g") -> Any:
    r = OffsetFetchRequest[version]
    if version >= 8:
        g = r.OffsetFetchRequestGroup
        asked = None if topics is None else [
            g.OffsetFetchRequestTopics(name=n, partition_indexes=p) for n, p in topics.items()
        ]  # fmt: skip
        groups = [g(group_id=group, member_id=None, member_epoch=-1, topics=asked)]
        return r(groups=groups, require_stable=True)
    asked = None if topics is None else [
        r.OffsetFetchRequestTopic(name=n, partition_indexes=p) for n, p in topics.items()
    ]  # fmt: skip
    return r(group_id=group, topics=asked, require_stable=True)


def _fetched(response: Any, version: int) -> list[tuple[str, list[tuple[int, int, Any, int]]]]:
    if version >= 8:
        (group,) = response.groups
        assert (group.group_id, group.error_code) == ("g", codes.NONE)
        topics = group.topics
    else:
        topics = response.topics
        if version >= 2:
            assert response.error_code == codes.NONE
    return [
        (t.name, [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
                  for p in t.partitions])
        for t in topics
    ]  # fmt: skip


@pytest.mark.parametrize("version", _versions(framing.OFFSET_FETCH))
def test_offset_fetch_answers_no_committed_offset(version: int) -> None:
    """-1 (none) for every partition asked, known topic or not, no error: the client applies
    ``auto.offset.reset``, as for a new group on a broker."""
    message = _offset_fetch(version, {TOPIC: [0, 1], "nope": [3]})
    got = _fetched(_ask(message, OffsetFetchResponse, version), version)
    assert got == [(TOPIC, [(0, -1, "", 0), (1, -1, "", 0)]), ("nope", [(3, -1, "", 0)])]
    if version >= 5:
        response = _ask(message, OffsetFetchResponse, version)
        partitions = response.groups[0].topics if version >= 8 else response.topics
        assert {p.committed_leader_epoch for t in partitions for p in t.partitions} == {-1}


@pytest.mark.parametrize("version", [v for v in _versions(framing.OFFSET_FETCH) if v >= 2])
def test_offset_fetch_of_every_topic_answers_none(version: int) -> None:
    assert _fetched(_ask(_offset_fetch(version, None), OffsetFetchResponse, version), version) == []


@pytest.mark.parametrize("version", [8, 9])
def test_offset_fetch_answers_each_group_of_a_batched_request(version: int) -> None:
    r = OffsetFetchRequest[version]
    g = r.OffsetFetchRequestGroup
    message = r(groups=[
        g(group_id="a", topics=[g.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[1])]),
        g(group_id="b", topics=None),
    ], require_stable=False)  # fmt: skip
    response = _ask(message, OffsetFetchResponse, version)
    got = [
        (gr.group_id, gr.error_code,
         [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
          for t in gr.topics])
        for gr in response.groups
    ]  # fmt: skip
    assert got == [("a", 0, [(TOPIC, [(1, -1)])]), ("b", 0, [])]


@pytest.mark.parametrize("version", [1, 7, 9])
@pytest.mark.parametrize(
    ("who", "code"),
    [("User:bob", codes.NONE), ("User:alice", codes.NONE), ("User:ci", 29)],
)
def test_offset_fetch_needs_describe_on_the_topic(
    tmp_path: Path, version: int, who: str, code: int
) -> None:
    """bob may describe ``t``, alice read it (which implies describe), ci nothing; nobody may
    describe ``u``."""
    ctx = _secured(tmp_path)
    message = _offset_fetch(version, {TOPIC: [0], "u": [0]})
    response = _ask(message, OffsetFetchResponse, version, ctx=ctx,
                    session=Session("127.0.0.1", who))  # fmt: skip
    got = _fetched(response, version)
    refused = codes.TOPIC_AUTHORIZATION_FAILED
    assert got == [(TOPIC, [(0, -1, "", code)]), ("u", [(0, -1, "", refused)])]


# --- OffsetCommit ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", _versions(framing.OFFSET_COMMIT))
def test_offset_commit_refuses_every_partition(version: int) -> None:
    r = OffsetCommitRequest[version]
    t = r.OffsetCommitRequestTopic
    p = t.OffsetCommitRequestPartition
    message = r(group_id="g", generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, retention_time_ms=-1, topics=[
                    t(name=TOPIC, partitions=[
                        p(partition_index=i, committed_offset=5, committed_leader_epoch=-1,
                          committed_metadata=None) for i in (0, 1)]),
                    t(name="u", partitions=[p(partition_index=2, committed_offset=0,
                                              committed_metadata="m")]),
                ])  # fmt: skip
    response = _ask(message, OffsetCommitResponse, version)
    got = [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
           for t in response.topics]  # fmt: skip
    refused = codes.GROUP_AUTHORIZATION_FAILED
    assert got == [(TOPIC, [(0, refused), (1, refused)]), ("u", [(2, refused)])]


# --- group membership --------------------------------------------------------------------------


@pytest.mark.parametrize("version", _versions(framing.JOIN_GROUP))
def test_join_group_is_refused(version: int) -> None:
    r = JoinGroupRequest[version]
    message = r(group_id="g", session_timeout_ms=45_000, rebalance_timeout_ms=300_000,
                member_id="", group_instance_id=None, protocol_type="consumer",
                protocols=[r.JoinGroupRequestProtocol(name="range", metadata=b"\x00")],
                reason=None)  # fmt: skip
    response = _ask(message, JoinGroupResponse, version)
    assert response.error_code == codes.GROUP_AUTHORIZATION_FAILED
    assert (response.generation_id, response.members) == (-1, [])


@pytest.mark.parametrize("version", _versions(framing.SYNC_GROUP))
def test_sync_group_is_refused(version: int) -> None:
    message = SyncGroupRequest[version](group_id="g", generation_id=1, member_id="m",
                                        group_instance_id=None, protocol_type="consumer",
                                        protocol_name="range", assignments=[])  # fmt: skip
    response = _ask(message, SyncGroupResponse, version)
    assert (response.error_code, response.assignment) == (codes.GROUP_AUTHORIZATION_FAILED, b"")


@pytest.mark.parametrize("version", _versions(framing.HEARTBEAT))
def test_heartbeat_is_refused(version: int) -> None:
    message = HeartbeatRequest[version](group_id="g", generation_id=1, member_id="m",
                                        group_instance_id=None)  # fmt: skip
    response = _ask(message, HeartbeatResponse, version)
    assert response.error_code == codes.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize("version", _versions(framing.LEAVE_GROUP))
def test_leave_group_answers_no_error(version: int) -> None:
    """Nothing was joined; a consumer's close() stays clean."""
    r = LeaveGroupRequest[version]
    members = [r.MemberIdentity(member_id=m, group_instance_id=None, reason=None)
               for m in ("m1", "m2")]  # fmt: skip
    message = r(group_id="g", member_id="m1", members=members)
    response = _ask(message, LeaveGroupResponse, version)
    assert response.error_code == codes.NONE
    if version >= 3:
        assert [(m.member_id, m.error_code) for m in response.members] == [("m1", 0), ("m2", 0)]


# --- DescribeConfigs ---------------------------------------------------------------------------


def _describe_configs(version: int) -> Any:
    r = DescribeConfigsRequest[version]
    resources = [
        r.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=TOPIC,
                                  configuration_keys=None),
        r.DescribeConfigsResource(resource_type=BROKER_RESOURCE, resource_name="0",
                                  configuration_keys=["log.retention.ms"]),
    ]  # fmt: skip
    return r(resources=resources, include_synonyms=True, include_documentation=True)


@pytest.mark.parametrize("version", _versions(framing.DESCRIBE_CONFIGS))
def test_describe_configs_says_configs_are_not_known(version: int) -> None:
    response = _ask(_describe_configs(version), DescribeConfigsResponse, version)
    got = [(r.resource_type, r.resource_name, r.error_code, r.error_message, r.configs)
           for r in response.results]  # fmt: skip
    assert got == [
        (TOPIC_RESOURCE, TOPIC, codes.INVALID_REQUEST, NO_CONFIGS, []),
        (BROKER_RESOURCE, "0", codes.INVALID_REQUEST, NO_CONFIGS, []),
    ]


def test_describe_configs_of_a_topic_needs_describe_configs(tmp_path: Path) -> None:
    """alice may read ``t``, which does not imply DescribeConfigs (as in Kafka)."""
    ctx = _secured(tmp_path)
    response = _ask(_describe_configs(4), DescribeConfigsResponse, 4, ctx=ctx,
                    session=Session("127.0.0.1", "User:alice"))  # fmt: skip
    got = [(r.error_code, r.error_message) for r in response.results]
    assert got == [(codes.TOPIC_AUTHORIZATION_FAILED, None), (codes.INVALID_REQUEST, NO_CONFIGS)]


# --- versions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "version"),
    [
        (OffsetFetchRequest[0](group_id="g", topics=[]), 0),
        (OffsetFetchRequest[10](groups=[], require_stable=False), 10),
        (OffsetCommitRequest[10](group_id="g", topics=[]), 10),
        (FindCoordinatorRequest[5](key_type=0, coordinator_keys=["g"]), 5),
    ],
)
def test_versions_not_advertised_close_the_connection(message: Any, version: int) -> None:
    with pytest.raises(MalformedRequestError, match=f"version {version} is not served"):
        asyncio.run(answer(context(), request(message)))
