"""The listener over real sockets: garbage, an oversized frame, a client vanishing mid-fetch,
the connection limit, the idle timeout, an acks=0 Produce each end one connection while others
are served; a client that stops reading gives back its share of ``inflight_bytes``; a group
consumer (kafka-python's, with ``subscribe()``) fails at once."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import GroupAuthorizationFailedError
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest

from gateway.listener.framing import Reply
from gateway.listener.server import KafkaListener
from tests.fakes.service import FakeService
from tests.unit.listener.support import END, TOPIC, context, fake_service, fetches, request


@asynccontextmanager
async def _listener(
    service: FakeService, *, max_connections: int = 10, idle_timeout_s: float = 600
) -> AsyncIterator[KafkaListener]:
    listener = KafkaListener(
        context(service, port=0), "127.0.0.1", max_connections, idle_timeout_s=idle_timeout_s
    )
    await listener.start()
    try:
        yield listener
    finally:
        await listener.close()


async def _connect(listener: KafkaListener) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", listener.port)


async def _call(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], payload: bytes) -> bytes:
    reader, writer = conn
    writer.write(struct.pack(">i", len(payload)) + payload)
    await writer.drain()
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def _api_versions_work(listener: KafkaListener) -> None:
    conn = await _connect(listener)
    message = ApiVersionsRequest[3](client_software_name="x", client_software_version="1")
    reply = await _call(conn, request(message))
    assert ApiVersionsResponse[3].decode(reply, version=3, header=True).error_code == 0
    conn[1].close()


async def _closed(reader: asyncio.StreamReader) -> bool:
    """The server closed the connection (end of stream, or reset)."""
    try:
        return await reader.read(1) == b""
    except ConnectionError:
        return True


def _fetch(partition: int) -> bytes:
    f = FetchRequest[12]
    message = f(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=[f.FetchTopic(topic=TOPIC, partitions=[
                    f.FetchTopic.FetchPartition(partition=partition, fetch_offset=0,
                                                partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id="")  # fmt: skip
    return request(message)


def test_garbage_and_oversized_frames_close_only_their_connection() -> None:
    async def run() -> None:
        async with _listener(fake_service()) as listener:
            for junk in (b"\x00\x00\x00\x0chello world!", struct.pack(">i", 1 << 30), b"\xff" * 8,
                         struct.pack(">ihhih", 8, 99, 0, 1, 0)):  # fmt: skip
                reader, writer = await _connect(listener)
                writer.write(junk)
                await writer.drain()
                assert await _closed(reader)
                writer.close()
                await _api_versions_work(listener)

    asyncio.run(run())


def test_a_client_vanishing_mid_fetch_leaves_the_others_served() -> None:
    async def run() -> None:
        service = fake_service(gates={1: asyncio.Event()})
        async with _listener(service) as listener:
            _, writer = await _connect(listener)
            writer.write(struct.pack(">i", len(_fetch(1))) + _fetch(1))
            await writer.drain()
            while not any(p == 1 for p, _, _ in fetches(service)):
                await asyncio.sleep(0)
            writer.close()  # gone while its fetch is still reading
            other = await _connect(listener)
            reply = await _call(other, _fetch(0))
            response = FetchResponse[12].decode(reply, version=12, header=True)
            assert response.responses[0].partitions[0].records
            service.gates[1].set()  # the vanished client's answer has nowhere to go
            reply = await _call(other, _fetch(1))
            assert FetchResponse[12].decode(reply, version=12, header=True).error_code == 0
            other[1].close()
            await _api_versions_work(listener)
            while listener.connections:  # the vanished one's answer went nowhere
                await asyncio.sleep(0.01)
            assert listener.ctx.budget.in_use == 0  # every fetch gave its share back

    asyncio.run(run())


def test_a_connection_beyond_the_limit_is_closed_at_once() -> None:
    async def run() -> None:
        async with _listener(fake_service(), max_connections=1) as listener:
            first = await _connect(listener)
            await _call(first, request(ApiVersionsRequest[0]()))
            reader, writer = await _connect(listener)
            assert await asyncio.wait_for(_closed(reader), 10)  # no idle timeout involved
            writer.close()
            await _call(first, request(ApiVersionsRequest[0]()))  # the first is still served
            first[1].close()
            while listener.connections:
                await asyncio.sleep(0.01)
            await _api_versions_work(listener)  # a new client is served again

    asyncio.run(run())


def test_an_idle_connection_is_closed() -> None:
    async def run() -> None:
        async with _listener(fake_service(), idle_timeout_s=0.2) as listener:
            reader, writer = await _connect(listener)
            await _call((reader, writer), request(ApiVersionsRequest[0]()))
            assert await _closed(reader)
            writer.close()
            await _api_versions_work(listener)

    asyncio.run(run())


def test_an_acks_0_produce_closes_its_connection() -> None:
    async def run() -> None:
        async with _listener(fake_service()) as listener:
            r = ProduceRequest[9]
            data = r.TopicProduceData(name=TOPIC, partition_data=[
                r.TopicProduceData.PartitionProduceData(index=0, records=None)])  # fmt: skip
            payload = request(r(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[data]))
            reader, writer = await _connect(listener)
            writer.write(struct.pack(">i", len(payload)) + payload)
            await writer.drain()
            assert await asyncio.wait_for(_closed(reader), 10)
            writer.close()
            await _api_versions_work(listener)

    asyncio.run(run())


class _StuckWriter:
    """A connection whose client takes no bytes: every drain waits for ever."""

    def write(self, data: object) -> None:
        pass

    async def drain(self) -> None:
        await asyncio.Event().wait()


def test_a_client_that_stops_reading_gives_back_its_share_and_is_closed() -> None:
    async def run() -> float:
        listener = KafkaListener(
            context(fake_service(), port=0, request_timeout_ms=200), "127.0.0.1", 10
        )
        held = await listener.ctx.budget.acquire(1000, listener.ctx.deadline())
        reply = Reply([b"x" * 300_000, b"y"], lambda: listener.ctx.budget.release(held))
        start = time.monotonic()
        with pytest.raises(TimeoutError):  # the connection closes on it
            async with asyncio.timeout(20):
                try:
                    await listener._send(_StuckWriter(), reply)  # type: ignore[arg-type]
                finally:
                    elapsed = time.monotonic() - start
        assert listener.ctx.budget.in_use == 0
        return elapsed

    assert asyncio.run(run()) < 10  # the write timeout, not the test's 20 s


def test_a_group_consumer_fails_at_once_with_the_reason() -> None:
    """kafka-python with group_id and subscribe(): the coordinator is found (the gateway), and
    JoinGroup's refusal is fatal, so poll() raises instead of waiting quietly for ever."""

    async def run() -> None:
        async with _listener(fake_service()) as listener:
            listener.ctx = dataclasses.replace(listener.ctx, port=listener.port)  # advertised

            def consume() -> float:
                consumer = KafkaConsumer(
                    bootstrap_servers=f"127.0.0.1:{listener.port}",
                    group_id="g",
                    enable_auto_commit=False,
                    request_timeout_ms=10_000,
                )
                start = time.monotonic()
                try:
                    consumer.subscribe([TOPIC])
                    with pytest.raises(GroupAuthorizationFailedError):
                        consumer.poll(timeout_ms=15_000)
                    return time.monotonic() - start
                finally:
                    consumer.close(autocommit=False)

            assert await asyncio.wait_for(asyncio.to_thread(consume), 60) < 10

    asyncio.run(run())


def test_real_clients_read_the_partitions_of_a_sparse_topic() -> None:
    """Partitions 0, 1 and 3 have remote data, 2 none (listed LEADER_NOT_AVAILABLE): librdkafka
    and kafka-python consumers assigned 0 and 3 read both to the end."""
    confluent_kafka = pytest.importorskip("confluent_kafka")

    async def run() -> None:
        async with _listener(fake_service(present=(0, 1, 3))) as listener:
            listener.ctx = dataclasses.replace(listener.ctx, port=listener.port)  # advertised
            servers = f"127.0.0.1:{listener.port}"

            def rdkafka() -> dict[int, list[int]]:
                consumer = confluent_kafka.Consumer({"bootstrap.servers": servers,
                                                     "group.id": "g", "enable.auto.commit": False,
                                                     "enable.partition.eof": True})  # fmt: skip
                got: dict[int, list[int]] = {0: [], 3: []}
                try:
                    consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in got])
                    at_end: set[int] = set()
                    start = time.monotonic()
                    while at_end != set(got) and time.monotonic() - start < 30:
                        message = consumer.poll(0.5)
                        if message is None:
                            continue
                        error = message.error()
                        if error is not None:
                            assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                            at_end.add(message.partition())
                            continue
                        got[message.partition()].append(message.offset())
                finally:
                    consumer.close()
                return got

            def kafka_python() -> dict[int, list[int]]:
                consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
                tps = [KafkaTopicPartition(TOPIC, p) for p in (0, 3)]
                got: dict[int, list[int]] = {0: [], 3: []}
                try:
                    consumer.assign(tps)
                    consumer.seek_to_beginning(*tps)
                    start = time.monotonic()
                    while any(consumer.position(tp) < END for tp in tps):
                        assert time.monotonic() - start < 30
                        for tp, records in consumer.poll(timeout_ms=500).items():
                            got[tp.partition] += [r.offset for r in records]
                    assert len(consumer.partitions_for_topic(TOPIC) or ()) == 4
                finally:
                    consumer.close(autocommit=False)
                return got

            want = {0: list(range(END)), 3: list(range(END))}
            assert await asyncio.wait_for(asyncio.to_thread(rdkafka), 60) == want
            assert await asyncio.wait_for(asyncio.to_thread(kafka_python), 60) == want

    asyncio.run(run())
