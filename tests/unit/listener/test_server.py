"""The listener over real sockets: garbage, an oversized frame, a client vanishing mid-fetch,
the connection limit and the idle timeout each end one connection while others are served."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from gateway.listener.server import KafkaListener
from tests.unit.listener.support import TOPIC, FakeService, context, request


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
        async with _listener(FakeService()) as listener:
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
        service = FakeService(gates={1: asyncio.Event()})
        async with _listener(service) as listener:
            _, writer = await _connect(listener)
            writer.write(struct.pack(">i", len(_fetch(1))) + _fetch(1))
            await writer.drain()
            while not any(p == 1 for p, _, _ in service.calls):
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
        async with _listener(FakeService(), max_connections=1) as listener:
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
        async with _listener(FakeService(), idle_timeout_s=0.2) as listener:
            reader, writer = await _connect(listener)
            await _call((reader, writer), request(ApiVersionsRequest[0]()))
            assert await _closed(reader)
            writer.close()
            await _api_versions_work(listener)

    asyncio.run(run())
