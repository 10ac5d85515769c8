"""ApiVersions (and its v0 fallback), Metadata, ListOffsets, Produce, each answer decoded with
kafka-python's response classes; framing limits; the start checks. The group APIs:
``test_groups.py``."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from typing import Any

import pytest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from gateway.config import parse_listener, settings_for
from gateway.errors import ConfigurationError, DeadlineExceededError
from gateway.listener import codes
from gateway.listener.framing import (
    LIST_OFFSETS,
    MAX_FRAME_BYTES,
    MalformedRequestError,
    frame_size,
)
from gateway.listener.handlers import VERSIONS, _epoch_of
from gateway.listener.server import answer, check_listener
from tests.unit.listener.support import (
    END,
    TOPIC,
    TOPIC_ID,
    FakeService,
    context,
    request,
    unframe,
)


def _ask(message: Any, response_class: Any, version: int) -> Any:
    payload = unframe(asyncio.run(answer(context(), request(message, correlation_id=9))))
    response = response_class.decode(payload, version=version, header=True)
    assert response.header.correlation_id == 9
    return response


@pytest.mark.parametrize("version", range(4))
def test_api_versions_lists_what_is_served(version: int) -> None:
    message = ApiVersionsRequest[version](client_software_name="unit", client_software_version="1")
    response = _ask(message, ApiVersionsResponse[version], version)
    assert response.error_code == 0
    table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert table == VERSIONS


def test_a_too_new_api_versions_gets_the_v0_answer_with_the_table() -> None:
    message = ApiVersionsRequest[4](client_software_name="unit", client_software_version="1")
    response = _ask(message, ApiVersionsResponse[0], 0)
    assert response.error_code == codes.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == VERSIONS


@pytest.mark.parametrize("version", [1, 4, 9, 10, 12])
def test_metadata_names_the_gateway_as_the_leader_and_unknown_topics(version: int) -> None:
    r = MetadataRequest[version]
    message = r(
        topics=[r.MetadataRequestTopic(name=TOPIC), r.MetadataRequestTopic(name="nope")],
        allow_auto_topic_creation=True,
    )
    response = _ask(message, MetadataResponse[version], version)
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", 9092)]
    known, unknown = response.topics
    assert (known.name, known.error_code) == (TOPIC, 0)
    assert [(p.partition_index, p.leader_id) for p in known.partitions] == [(0, 0), (1, 0)]
    if version >= 10:
        assert known.topic_id == TOPIC_ID
    if version >= 7:
        assert [p.leader_epoch for p in known.partitions] == [3, 3]
    assert (unknown.name, unknown.error_code) == ("nope", codes.UNKNOWN_TOPIC_OR_PARTITION)


def test_metadata_lists_every_partition_up_to_the_highest_with_remote_data() -> None:
    """Clients take the partition count from the list: a sparse [0, 1, 3] listed as such
    made librdkafka count 3 partitions and never read partition 3."""
    r = MetadataRequest[12]
    message = r(topics=[r.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False)
    payload = request(message)
    reply = asyncio.run(answer(context(FakeService(present=(0, 1, 3))), payload))
    response = MetadataResponse[12].decode(unframe(reply), version=12, header=True)
    (topic,) = response.topics
    got = [(p.partition_index, p.error_code, p.leader_id, p.replica_nodes, p.isr_nodes)
           for p in topic.partitions]  # fmt: skip
    assert got == [
        (0, 0, 0, [0], [0]),
        (1, 0, 0, [0], [0]),
        (2, codes.LEADER_NOT_AVAILABLE, -1, [], []),
        (3, 0, 0, [0], [0]),
    ]


def test_metadata_of_all_topics_and_by_topic_id() -> None:
    r = MetadataRequest[12]
    response = _ask(r(topics=None), MetadataResponse[12], 12)
    assert [t.name for t in response.topics] == [TOPIC]
    asked = [r.MetadataRequestTopic(topic_id=TOPIC_ID, name=None)]
    response = _ask(r(topics=asked), MetadataResponse[12], 12)
    assert [(t.name, t.error_code) for t in response.topics] == [(TOPIC, 0)]
    asked = [r.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)]
    response = _ask(r(topics=asked), MetadataResponse[12], 12)
    assert [t.error_code for t in response.topics] == [codes.UNKNOWN_TOPIC_ID]


def _list_offsets(
    version: int, specs: list[int], *, isolation: int = 1, timeout_ms: int = 0, **settings: Any
) -> Any:
    """ListOffsets ``version`` for ``specs`` on ``t``-0 and EARLIEST on a topic not in the
    bucket; the answer decoded."""
    r = ListOffsetsRequest[version]
    partitions = [
        r.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, timestamp=t, current_leader_epoch=-1
        )
        for t in specs
    ]
    topics = [
        r.ListOffsetsTopic(name=TOPIC, partitions=partitions),
        r.ListOffsetsTopic(name="nope", partitions=partitions[:1]),
    ]
    message = r(replica_id=-1, isolation_level=isolation, topics=topics, timeout_ms=timeout_ms)
    payload = request(message, correlation_id=9)
    reply = asyncio.run(answer(context(FakeService(stable=END - 6), **settings), payload))
    return ListOffsetsResponse[version].decode(unframe(reply), version=version, header=True)


LIST_OFFSETS_SERVED = range(VERSIONS[LIST_OFFSETS][0], VERSIONS[LIST_OFFSETS][1] + 1)


@pytest.mark.parametrize("isolation", [0, 1])
@pytest.mark.parametrize("version", LIST_OFFSETS_SERVED)
def test_list_offsets_specs(version: int, isolation: int) -> None:
    """Every special timestamp from its first version (``remote-read-semantics.md`` §12.1),
    UNSUPPORTED_VERSION below it: -1 LATEST (the last stable offset for read_committed), -2
    EARLIEST, -3 MAX_TIMESTAMP (v7), -4 EARLIEST_LOCAL (v8: the remote log end, where a log
    with no local part begins), -5 LATEST_TIERED (v9: the highest offset in remote storage,
    its epoch), -6 EARLIEST_PENDING_UPLOAD (v11: the remote log end); -4 to -6 whatever the
    isolation level; -7 is no timestamp."""
    assert (min(LIST_OFFSETS_SERVED), max(LIST_OFFSETS_SERVED)) == (1, 11)
    specs = [-2, -1, 1_700_000_000_005, 1_800_000_000_000, -3, -4, -5, -6, -7]
    response = _list_offsets(version, specs, isolation=isolation)
    known, unknown = response.topics
    got = [(p.error_code, p.offset, p.timestamp) for p in known.partitions]
    latest = END - 6 if isolation and version >= 2 else END
    unsupported = (codes.UNSUPPORTED_VERSION, -1, -1)
    want = [
        (0, 0, -1),
        (0, latest, -1),
        (0, 5, 1_700_000_000_005),
        (0, -1, -1),
        (0, END - 1, 1_700_000_000_000 + END - 1) if version >= 7 else unsupported,
        (0, END, -1) if version >= 8 else unsupported,
        (0, END - 1, -1) if version >= 9 else unsupported,
        (0, END, -1) if version >= 11 else unsupported,
        unsupported,
    ]
    assert got == want
    if version >= 4:  # the leader epoch of each answer: the fake's lineage (1 at 0, 3 at 5)
        epochs = [p.leader_epoch for p in known.partitions]
        assert epochs[5:8] == [3 if version >= v else -1 for v in (8, 9, 11)]
    assert [p.error_code for p in unknown.partitions] == [codes.UNKNOWN_TOPIC_OR_PARTITION]


def test_latest_tiered_is_the_epoch_of_the_highest_remote_offset() -> None:
    lineage = ((1, 0), (3, 5), (4, 9))
    assert [_epoch_of(lineage, o) for o in (0, 4, 5, 8, 9, 100)] == [1, 1, 3, 3, 4, 4]
    assert _epoch_of((), 5) == -1
    assert _epoch_of(((2, 10),), 5) == -1


class _Slow(FakeService):
    """``list_offsets`` that waits for its deadline and fails there, as the service's."""

    async def list_offsets(self, *args: Any, **kwargs: Any) -> Any:
        deadline = args[3]
        await asyncio.sleep(max(0.0, deadline.remaining()))
        raise DeadlineExceededError("list offsets: the deadline passed")


def test_list_offsets_v10_timeout_ms_is_the_deadline_within_request_timeout_ms() -> None:
    r = ListOffsetsRequest[10]
    asked = [r.ListOffsetsTopic(name=TOPIC, partitions=[r.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=1_700_000_000_005, current_leader_epoch=-1)])]  # fmt: skip

    def ask(timeout_ms: int, request_timeout_ms: int) -> tuple[float, int]:
        message = r(replica_id=-1, isolation_level=0, topics=asked, timeout_ms=timeout_ms)
        ctx = context(_Slow(), request_timeout_ms=request_timeout_ms)
        start = time.monotonic()
        reply = asyncio.run(answer(ctx, request(message)))
        took = time.monotonic() - start
        response = ListOffsetsResponse[10].decode(unframe(reply), version=10, header=True)
        return took, response.topics[0].partitions[0].error_code

    took, error = ask(200, 20_000)  # the request's own timeout, shorter
    assert 0.2 <= took < 10 and error == codes.KAFKA_STORAGE_ERROR
    took, error = ask(20_000, 300)  # within request_timeout_ms
    assert 0.3 <= took < 10 and error == codes.KAFKA_STORAGE_ERROR
    took, error = ask(0, 250)  # none given: request_timeout_ms
    assert 0.25 <= took < 10 and error == codes.KAFKA_STORAGE_ERROR


def test_produce_is_refused_with_a_clear_message() -> None:
    r = ProduceRequest[9]
    data = r.TopicProduceData(name=TOPIC, partition_data=[
        r.TopicProduceData.PartitionProduceData(index=0, records=None)])  # fmt: skip
    message = r(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[data])
    response = _ask(message, ProduceResponse[9], 9)
    (p,) = response.responses[0].partition_responses
    assert p.error_code == codes.INVALID_REQUEST
    assert "read-only" in p.error_message
    quiet = r(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[data])
    reply = asyncio.run(answer(context(), request(quiet)))  # no answer: the connection closes
    assert reply is not None and (reply.buffers, reply.close) == ([], True)


def test_unknown_api_keys_and_versions_are_malformed() -> None:
    with pytest.raises(MalformedRequestError, match="API key 11"):
        asyncio.run(answer(context(), struct.pack(">hhih", 11, 0, 1, -1)))
    with pytest.raises(MalformedRequestError, match="version 19"):
        asyncio.run(answer(context(), struct.pack(">hhih", 1, 19, 1, -1)))
    with pytest.raises(MalformedRequestError, match="version 12"):
        asyncio.run(answer(context(), struct.pack(">hhih", 2, 12, 1, -1)))
    with pytest.raises(MalformedRequestError, match="does not decode"):
        asyncio.run(answer(context(), struct.pack(">hhih", 3, 1, 1, -1) + b"\x00"))


def test_frame_sizes() -> None:
    assert MAX_FRAME_BYTES <= 1 << 20  # read whole before decoding: consumer requests are small
    assert frame_size(struct.pack(">i", 100)) == 100
    for bad in (-1, 0, 7, MAX_FRAME_BYTES + 1):
        with pytest.raises(MalformedRequestError):
            frame_size(struct.pack(">i", bad))


def test_the_listener_address_and_the_start_checks() -> None:
    assert parse_listener("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_listener("[::1]:0") == ("::1", 0)
    for bad in ("9092", "host:", ":9092", "h:99999", "h:x"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_listener(bad)
    with pytest.raises(ConfigurationError, match="kafka_listener"):
        settings_for(store="file:///", kafka_listener="nope")
    check_listener(settings_for(store="file:///", workers=1, kafka_listener="localhost:9092"))
    with pytest.raises(ConfigurationError, match="loopback"):
        check_listener(settings_for(store="file:///", workers=1, kafka_listener="0.0.0.0:9092"))
    # several workers share the listener's sockets (server.bind_listener): not refused
    check_listener(settings_for(store="file:///", workers=2, kafka_listener="[::1]:9092"))
