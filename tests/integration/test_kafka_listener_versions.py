"""The Fetch and ListOffsets versions real clients negotiate with ``serve --kafka-listener``.

The listener serves Fetch 4-18 (topics by id from v13) and ListOffsets 1-11; a client takes
the highest version both sides know. Each client reads whole partitions of the end-to-end
bucket (:mod:`tests.integration.test_kafka_listener`'s, its ``serve`` start) in both
isolation levels, exactly as written, and the versions of its requests are read from the
listener's own ``/metrics`` (requests per API and version): confluent-kafka (librdkafka 2.x)
must fetch by topic id (v13+). A raw exchange with kafka-python's request classes reads a
partition at the newest version by its id, shows an id not served answering
``UNKNOWN_TOPIC_ID``, and asks the tiered-storage ListOffsets specs (-4, -5, -6).
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any, Final

import httpx
import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.record import MemoryRecords

from gateway.listener.dispatch import VERSIONS
from tests.fixtures.ports import listening_ports
from tests.integration.independent_bucket import IndependentBucket, WrittenPartition
from tests.integration.kafka_clients import client_record, guard
from tests.integration.serve import stop
from tests.integration.test_kafka_listener import (
    ISOLATION,
    RD_SIZES,
    SIZES,
    _aiokafka_read,
    _confluent_read,
    _expected,
    _read_frame,
    _start,
    bucket,
)

__all__ = ["bucket"]  # the module fixture, shared with test_kafka_listener.py

FETCH: Final = 1
LIST_OFFSETS: Final = 2
_REQUESTS: Final = re.compile(r"^tiered_gateway_kafka_requests_total\{([^}]*)\} (\S+)$", re.M)
_LABEL: Final = re.compile(r'(\w+)="([^"]*)"')


class Served:
    """A ``serve`` process with the Kafka listener: its ports, and its requests by version."""

    def __init__(self, kafka_port: int, http_port: int) -> None:
        self.port = kafka_port
        self.http_port = http_port

    def requests(self) -> Counter[tuple[str, int]]:
        """Requests answered so far, by (API name, version), from ``/metrics``."""
        text = httpx.get(f"http://127.0.0.1:{self.http_port}/metrics", timeout=30).text
        counts: Counter[tuple[str, int]] = Counter()
        for labels, value in _REQUESTS.findall(text):
            found = dict(_LABEL.findall(labels))
            counts[found["api"], int(found["version"])] += int(float(value))
        return counts

    def versions_of(self, before: Counter[tuple[str, int]], api: str) -> dict[int, int]:
        """The requests of ``api`` answered since ``before``, by version."""
        now = self.requests()
        return {v: n - before[a, v] for (a, v), n in now.items() if a == api and n > before[a, v]}


@pytest.fixture(scope="module")
def served(bucket: IndependentBucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    log_path = tmp_path_factory.mktemp("kafka-listener-versions") / "serve.log"
    proc, port = _start(bucket, log_path)
    try:
        http = [p for p in listening_ports(proc.pid) if p != port]
        assert len(http) == 1, http
        yield Served(port, http[0])
    finally:
        stop(proc)


def _largest(bucket: IndependentBucket) -> WrittenPartition:
    """The partition with the most records (several batches, segments, transactions)."""
    return max(bucket.partitions.values(), key=lambda w: len(w.records))


# --- real clients ---------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ISOLATION)
def test_confluent_kafka_fetches_by_topic_id_and_reads_exactly_what_was_written(
    served: Served, bucket: IndependentBucket, isolation: str
) -> None:
    """librdkafka 2.x assigns each partition and reads it to the remote end with Fetch v13+
    (topics by id): the records are exactly those written."""
    pytest.importorskip("confluent_kafka")
    before = served.requests()
    for written in bucket.partitions.values():
        got = _confluent_read(served.port, written, isolation, RD_SIZES[1])
        assert got == _expected(written, isolation), (written.topic, written.partition)
    fetches = served.versions_of(before, "Fetch")
    print(f"confluent-kafka {isolation}: Fetch {fetches}, "
          f"ListOffsets {served.versions_of(before, 'ListOffsets')}")  # fmt: skip
    assert fetches, "no Fetch counted"
    assert min(fetches) >= 13, fetches  # every Fetch named its topic by id
    assert max(fetches) <= VERSIONS[FETCH][1]


def test_kafka_python_and_aiokafka_read_exactly_at_the_versions_they_negotiate(
    served: Served, bucket: IndependentBucket
) -> None:
    """kafka-python 3 and aiokafka read the largest partition exactly; the versions they
    negotiate are printed (aiokafka knows Fetch to v11: by name) and must be served ones."""
    written = _largest(bucket)
    for isolation in ISOLATION:
        before = served.requests()
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{served.port}", group_id=None,
                                 enable_auto_commit=False, isolation_level=isolation,
                                 fetch_max_bytes=SIZES[1][0],
                                 max_partition_fetch_bytes=SIZES[1][1])  # fmt: skip
        try:
            tp = KTopicPartition(written.topic, written.partition)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got: list[tuple[Any, ...]] = []
            start = time.monotonic()
            while consumer.position(tp) < written.next_offset:
                guard(start, "kafka-python")
                got += [client_record(r) for r in consumer.poll(timeout_ms=500).get(tp, [])]
        finally:
            consumer.close()
        assert got == _expected(written, isolation)
        kafka_python = served.versions_of(before, "Fetch")
        before = served.requests()
        got = asyncio.run(_aiokafka_read(served.port, written, isolation, SIZES[1]))
        assert got == _expected(written, isolation)
        aiokafka = served.versions_of(before, "Fetch")
        print(f"{isolation}: kafka-python Fetch {kafka_python}, aiokafka Fetch {aiokafka}")
        for seen in (kafka_python, aiokafka):
            assert seen and all(VERSIONS[FETCH][0] <= v <= VERSIONS[FETCH][1] for v in seen)


# --- the wire: kafka-python's request classes over a socket ---------------------------------


class _Wire:
    """One connection; each request encoded and each answer decoded with kafka-python's
    message classes at the version asked."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

    def ask(self, message: Any, response_class: Any, version: int) -> Any:
        self.correlation += 1
        message.with_header(correlation_id=self.correlation, client_id="versions-test")
        payload = bytes(message.encode(header=True))
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        response = response_class.decode(_read_frame(self.sock), version=version, header=True)
        assert response.header.correlation_id == self.correlation
        return response

    def close(self) -> None:
        self.sock.close()


def _fetch_by_id(
    wire: _Wire, version: int, topic_id: uuid.UUID, partition: int, offset: int, isolation: int
) -> Any:
    r = FetchRequest[version]
    entry = r.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                        partition_max_bytes=64 * 1024, current_leader_epoch=-1,
                                        last_fetched_epoch=-1, log_start_offset=-1)  # fmt: skip
    message = r(replica_id=-1, replica_state=r.ReplicaState(replica_id=-1, replica_epoch=-1),
                max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation,
                session_id=0, session_epoch=-1,
                topics=[r.FetchTopic(topic_id=topic_id, partitions=[entry])],
                forgotten_topics_data=[], rack_id="")  # fmt: skip
    return wire.ask(message, FetchResponse[version], version)


@pytest.mark.parametrize("isolation", [0, 1])
def test_a_raw_fetch_at_the_newest_version_reads_a_partition_by_its_id(
    served: Served, bucket: IndependentBucket, isolation: int
) -> None:
    """ApiVersions lists Fetch to 18; Metadata v12 gives the topic id; Fetch v18 by that id
    walks the partition to its end: every record offset once, in order, the last stable offset
    and the aborted transactions as read_committed needs; an id not served answers
    UNKNOWN_TOPIC_ID."""
    written = _largest(bucket)
    wire = _Wire(served.port)
    try:
        versions = wire.ask(ApiVersionsRequest[3](client_software_name="t",
                                                  client_software_version="1"),
                            ApiVersionsResponse[3], 3)  # fmt: skip
        table = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert (table[FETCH], table[LIST_OFFSETS]) == ((4, 18), (1, 11))
        newest = table[FETCH][1]
        r = MetadataRequest[12]
        meta = wire.ask(r(topics=[r.MetadataRequestTopic(name=written.topic)],
                          allow_auto_topic_creation=False), MetadataResponse[12], 12)  # fmt: skip
        (topic,) = meta.topics
        assert topic.error_code == 0 and topic.topic_id.int != 0
        offsets: list[int] = []
        offset = 0
        start = time.monotonic()
        while offset < written.next_offset:
            guard(start, "raw Fetch by id")
            response = _fetch_by_id(wire, newest, topic.topic_id, written.partition, offset,
                                    isolation)  # fmt: skip
            (t,) = response.responses
            (p,) = t.partitions
            assert (t.topic_id, p.error_code, p.high_watermark) == (
                topic.topic_id, 0, written.next_offset)  # fmt: skip
            if isolation:
                assert p.last_stable_offset == written.last_stable_offset
                assert p.aborted_transactions is not None
            batches = list(MemoryRecords(bytes(p.records))) if p.records else []
            if not batches and isolation and offset >= written.last_stable_offset:
                break  # read_committed ends at the last stable offset
            for b in batches:
                offsets += [rec.offset for rec in b if rec.offset >= offset]
                offset = max(offset, b.next_offset)
        assert offset == (written.last_stable_offset if isolation else written.next_offset)
        want = [w.offset for w in written.records if w.offset < offset]
        assert [o for o in offsets if o in set(want)] == want  # control records aside
        stranger = _fetch_by_id(wire, newest, uuid.uuid4(), written.partition, 0, isolation)
        (p,) = stranger.responses[0].partitions
        assert (p.error_code, p.records or b"") == (100, b"")  # UNKNOWN_TOPIC_ID
    finally:
        wire.close()


@pytest.mark.parametrize("version", [8, 9, 10, 11])
def test_list_offsets_answers_the_tiered_storage_specs(
    served: Served, bucket: IndependentBucket, version: int
) -> None:
    """On the bucket: -5 LATEST_TIERED = the highest offset in remote storage (the end - 1),
    -4 EARLIEST_LOCAL and -6 EARLIEST_PENDING_UPLOAD = the remote end (the gateway has no
    local log), each from its first version; a newer spec at an older version is
    UNSUPPORTED_VERSION (35). One request per spec: a partition named twice in one request
    is INVALID_REQUEST, as Kafka's."""
    r = ListOffsetsRequest[version]
    wire = _Wire(served.port)
    try:
        for written in bucket.partitions.values():
            got = []
            for spec in [-1, -2, -4, -5, -6]:
                asked = [r.ListOffsetsTopic(name=written.topic, partitions=[
                    r.ListOffsetsTopic.ListOffsetsPartition(partition_index=written.partition,
                                                            timestamp=spec, current_leader_epoch=-1)
                ])]  # fmt: skip
                message = r(replica_id=-1, isolation_level=1, topics=asked, timeout_ms=20_000)
                response = wire.ask(message, ListOffsetsResponse[version], version)
                got += [(p.error_code, p.offset) for p in response.topics[0].partitions]
            end = written.next_offset
            assert got == [
                (0, written.last_stable_offset),
                (0, 0),
                (0, end),
                (0, end - 1) if version >= 9 else (35, -1),
                (0, end) if version >= 11 else (35, -1),
            ], (written.topic, written.partition)
    finally:
        wire.close()
