"""ApiVersions (and its v0 fallback), Metadata, ListOffsets, Produce, each answer decoded with
kafka-python's response classes; framing limits; the start checks. The group APIs:
``test_groups.py``."""

from __future__ import annotations

import asyncio
import logging
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
from gateway.errors import ConfigurationError
from gateway.listener import codes
from gateway.listener.dispatch import VERSIONS, answer
from gateway.listener.fetch import READ_CONCURRENCY
from gateway.listener.framing import (
    LIST_OFFSETS,
    MAX_FRAME_BYTES,
    MAX_NAMED,
    MalformedRequestError,
    frame_size,
)
from gateway.listener.startup import check_listener
from gateway.service.types import PartitionInfo
from tests.fakes.service import FakePartition, FakeService
from tests.unit.listener.support import (
    END,
    EPOCHS,
    TOPIC,
    TOPIC_ID,
    catalog,
    context,
    fake_service,
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
    reply = asyncio.run(answer(context(fake_service(present=(0, 1, 3))), payload))
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


def _list_offsets_request(
    version: int,
    topics: list[tuple[str, list[tuple[int, int]]]],
    *,
    isolation: int = 1,
    timeout_ms: int = 0,
) -> bytes:
    """A ListOffsets ``version`` request for ``topics``: (name, [(partition, timestamp)])."""
    r = ListOffsetsRequest[version]
    asked = [
        r.ListOffsetsTopic(name=topic, partitions=[
            r.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=p, timestamp=t, current_leader_epoch=-1
            )
            for p, t in partitions
        ])
        for topic, partitions in topics
    ]  # fmt: skip
    message = r(replica_id=-1, isolation_level=isolation, topics=asked, timeout_ms=timeout_ms)
    return request(message, correlation_id=9)


def _list_offsets(
    version: int, specs: list[int], *, isolation: int = 1, service: Any = None
) -> tuple[list[Any], list[Any]]:
    """ListOffsets ``version`` for each of ``specs`` on ``t``-0 (one request each: a partition
    named twice in one request is INVALID_REQUEST), with EARLIEST on a topic not in the
    bucket: the answers for ``t``-0, and for the unknown topic."""
    known, unknown = [], []
    for spec in specs:
        payload = _list_offsets_request(
            version, [(TOPIC, [(0, spec)]), ("nope", [(0, -2)])], isolation=isolation
        )
        ctx = context(service or fake_service(stable=END - 6))
        reply = asyncio.run(answer(ctx, payload))
        response = ListOffsetsResponse[version].decode(unframe(reply), version=version,
                                                       header=True)  # fmt: skip
        t, u = response.topics
        known += t.partitions
        unknown += u.partitions
    return known, unknown


LIST_OFFSETS_SERVED = range(VERSIONS[LIST_OFFSETS][0], VERSIONS[LIST_OFFSETS][1] + 1)


@pytest.mark.parametrize("isolation", [0, 1])
@pytest.mark.parametrize("version", LIST_OFFSETS_SERVED)
def test_list_offsets_specs(version: int, isolation: int) -> None:
    """Every special timestamp from its first version (``remote-read-semantics.md`` §12.1),
    UNSUPPORTED_VERSION below it: -1 LATEST (the last stable offset for read_committed), -2
    EARLIEST, -3 MAX_TIMESTAMP (v7), -4 EARLIEST_LOCAL (v8: the remote log end, where a log
    with no local part begins), -5 LATEST_TIERED (v9: the highest offset in remote storage,
    its epoch), -6 EARLIEST_PENDING_UPLOAD (v11: the remote log end); -4 to -6 whatever the
    isolation level; -7 is no timestamp. read_committed: a match at or past the last stable
    offset is none (-3 here)."""
    assert (min(LIST_OFFSETS_SERVED), max(LIST_OFFSETS_SERVED)) == (1, 11)
    specs = [-2, -1, 1_700_000_000_005, 1_800_000_000_000, -3, -4, -5, -6, -7]
    known, unknown = _list_offsets(version, specs, isolation=isolation)
    got = [(p.error_code, p.offset, p.timestamp) for p in known]
    latest = END - 6 if isolation and version >= 2 else END
    unsupported = (codes.UNSUPPORTED_VERSION, -1, -1)
    # read_committed: the record with the max timestamp lies past the last stable offset
    max_timestamp = (0, -1, -1) if isolation else (0, END - 1, 1_700_000_000_000 + END - 1)
    want = [
        (0, 0, -1),
        (0, latest, -1),
        (0, 5, 1_700_000_000_005),
        (0, -1, -1),
        unsupported if version < 7 else max_timestamp,
        (0, END, -1) if version >= 8 else unsupported,
        (0, END - 1, -1) if version >= 9 else unsupported,
        (0, END, -1) if version >= 11 else unsupported,
        unsupported,
    ]
    assert got == want
    if version >= 4:  # the leader epoch of each answer: the fake's lineage (1 at 0, 3 at 5)
        epochs = [p.leader_epoch for p in known]
        assert epochs[5:8] == [3 if version >= v else -1 for v in (8, 9, 11)]
    assert {p.error_code for p in unknown} == {codes.UNKNOWN_TOPIC_OR_PARTITION}


def _empty() -> FakeService:
    """Partition 0 with nothing in remote storage (its epochs still known), as the service
    answers it: the end 0 with the latest epoch (3) for LATEST and EARLIEST_LOCAL, no offset for
    EARLIEST, LATEST_TIERED and EARLIEST_PENDING_UPLOAD (which is EARLIEST when nothing is
    uploaded); ``tests/unit/test_fake_contract.py`` holds the fake to the service's answers."""
    service = fake_service()
    service.catalog[TOPIC].partitions[0] = FakePartition(epochs=EPOCHS)
    return service


def test_with_nothing_in_remote_storage_the_answers_say_none_not_zero_epochs() -> None:
    """The service's answers for an empty remote log go out as Kafka says none: offset -1,
    epoch -1 where there is none."""
    known, _ = _list_offsets(11, [-2, -6, -5, -4], service=_empty())
    got = [(p.error_code, p.offset, p.timestamp, p.leader_epoch) for p in known]
    assert got == [(0, -1, -1, -1), (0, -1, -1, -1), (0, -1, -1, -1), (0, 0, -1, 3)]


class _Counting(FakeService):
    """``list_offsets`` counted: the calls, and the most at once (each held for a few loop
    steps, so concurrent ones overlap); partitions 0 to 39."""

    def __init__(self) -> None:
        super().__init__(catalog(present=tuple(range(40))))
        self.asked: list[tuple[str, int]] = []
        self.now = 0
        self.most = 0

    async def list_offsets(self, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        self.asked.append((topic, partition))
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            return await super().list_offsets(topic, partition, *args, **kwargs)
        finally:
            self.now -= 1


def test_list_offsets_a_partition_named_twice_is_invalid_at_each_occurrence() -> None:
    """As Kafka (duplicatePartitions): every occurrence of a partition named twice answers
    INVALID_REQUEST and is not read; the others are answered as usual."""
    service = _Counting()
    payload = _list_offsets_request(
        11, [(TOPIC, [(0, -2), (1, -1)]), (TOPIC, [(0, -1)]), ("nope", [(0, -2), (0, -1)])]
    )
    reply = asyncio.run(answer(context(service), payload))
    response = ListOffsetsResponse[11].decode(unframe(reply), version=11, header=True)
    got = [(t.name, p.partition_index, p.error_code, p.offset)
           for t in response.topics for p in t.partitions]  # fmt: skip
    invalid = codes.INVALID_REQUEST
    assert got == [(TOPIC, 0, invalid, -1), (TOPIC, 1, 0, END), (TOPIC, 0, invalid, -1),
                   ("nope", 0, invalid, -1), ("nope", 0, invalid, -1)]  # fmt: skip
    assert service.asked == [(TOPIC, 1)]


def test_list_offsets_reads_a_few_partitions_at_a_time_and_logs_failures_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = _Counting()
    payload = _list_offsets_request(
        11, [(TOPIC, [(p, -2) for p in range(40)]), ("nope", [(p, -2) for p in range(200)])]
    )
    with caplog.at_level(logging.INFO, logger="gateway.listener.offsets"):
        reply = asyncio.run(answer(context(service), payload))
    response = ListOffsetsResponse[11].decode(unframe(reply), version=11, header=True)
    known, unknown = response.topics
    assert [(p.partition_index, p.error_code, p.offset) for p in known.partitions] == [
        (p, 0, 0) for p in range(40)
    ]
    assert {p.error_code for p in unknown.partitions} == {codes.UNKNOWN_TOPIC_OR_PARTITION}
    assert len(service.asked) == 240
    assert 1 < service.most <= READ_CONCURRENCY
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.listener.offsets"]
    assert len(lines) == 1 and "list offsets: 200 partition(s) failed" in lines[0]


class _Bug(_Counting):
    """``list_offsets`` of partition 0 fails with an exception that is not a GatewayError."""

    async def list_offsets(self, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        if partition == 0:
            raise RuntimeError("a bug in the service")
        return await super().list_offsets(topic, partition, *args, **kwargs)


def test_an_unexpected_error_is_its_partitions_answer_and_the_others_are_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in one partition's lookup answers UNKNOWN_SERVER_ERROR for it, logged as a
    warning with its traceback, while every other partition is answered (before, the whole
    request failed and the connection closed, the other lookups left running)."""
    service = _Bug()
    payload = _list_offsets_request(11, [(TOPIC, [(p, -2) for p in range(20)])])
    with caplog.at_level(logging.INFO, logger="gateway.listener.offsets"):
        reply = asyncio.run(answer(context(service), payload))
    response = ListOffsetsResponse[11].decode(unframe(reply), version=11, header=True)
    got = [(p.partition_index, p.error_code) for p in response.topics[0].partitions]
    assert got == [(0, codes.UNKNOWN_SERVER_ERROR)] + [(p, 0) for p in range(1, 20)]
    assert sorted(p for _, p in service.asked) == list(range(1, 20))
    (line,) = [r for r in caplog.records if r.name == "gateway.listener.offsets"]
    assert line.levelno == logging.WARNING and line.exc_info is not None


def test_list_offsets_and_metadata_naming_too_many_are_malformed() -> None:
    """More than MAX_NAMED partitions (ListOffsets) or topics (Metadata) in one request,
    duplicates counted: a malformed request, the connection closes (before, a 1 MB Metadata
    naming one topic 100,000 times held the event loop for 5.3 s)."""
    service = _Counting()
    many = _list_offsets_request(11, [(TOPIC, [(p, -2) for p in range(MAX_NAMED + 1)])])
    with pytest.raises(MalformedRequestError, match="more than 10000 partitions"):
        asyncio.run(answer(context(service), many))
    assert service.asked == []
    r = MetadataRequest[12]
    copies = [r.MetadataRequestTopic(name=TOPIC)] * (MAX_NAMED + 1)
    message = r(topics=copies, allow_auto_topic_creation=False)
    with pytest.raises(MalformedRequestError, match="more than 10000 topics"):
        asyncio.run(answer(context(service), request(message)))


class _CountingPartitions(FakeService):
    def __init__(self) -> None:
        super().__init__(catalog())
        self.listed: list[str] = []

    async def partitions(self, topic: str) -> list[PartitionInfo]:
        self.listed.append(topic)
        return await super().partitions(topic)


def test_metadata_answers_each_topic_once() -> None:
    """A topic named several times (by name or by id) is answered once, at its first
    occurrence, as Kafka collects the names in a set; its partitions are listed once."""
    r = MetadataRequest[12]
    asked = ([r.MetadataRequestTopic(name=TOPIC, topic_id=None)] * 5000
             + [r.MetadataRequestTopic(name="nope", topic_id=None)] * 3
             + [r.MetadataRequestTopic(name=None, topic_id=TOPIC_ID)] * 2)  # fmt: skip
    service = _CountingPartitions()
    reply = asyncio.run(
        answer(context(service), request(r(topics=asked, allow_auto_topic_creation=False)))
    )
    response = MetadataResponse[12].decode(unframe(reply), version=12, header=True)
    got = [(t.name, t.error_code) for t in response.topics]
    assert got == [(TOPIC, 0), ("nope", codes.UNKNOWN_TOPIC_OR_PARTITION), (TOPIC, 0)]
    assert service.listed == [TOPIC, TOPIC]  # once by name, once by id


class _Slow(FakeService):
    """``list_offsets`` that never answers: the handler's own deadline must end the wait (a
    fake that raised the deadline error itself would test only the fake)."""

    async def list_offsets(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()


def test_list_offsets_v10_timeout_ms_is_the_deadline_within_request_timeout_ms() -> None:
    r = ListOffsetsRequest[10]
    asked = [r.ListOffsetsTopic(name=TOPIC, partitions=[r.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=1_700_000_000_005, current_leader_epoch=-1)])]  # fmt: skip

    def ask(timeout_ms: int, request_timeout_ms: int) -> tuple[float, int]:
        message = r(replica_id=-1, isolation_level=0, topics=asked, timeout_ms=timeout_ms)
        ctx = context(_Slow(catalog()), request_timeout_ms=request_timeout_ms)
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
    # several workers share the listener's sockets (startup.bind_listener): not refused
    check_listener(settings_for(store="file:///", workers=2, kafka_listener="[::1]:9092"))
