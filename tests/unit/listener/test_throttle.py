"""``rate_limit_per_s`` on the Kafka listener: the HTTP API's per-principal limiter counts
Kafka requests too (one budget per principal for both), and a request over it is held back,
its connection muted (KIP-219), then answered; ApiVersions and SASL are not counted.

The limiter's clock advances a fixed step at each reading, so how many requests wait depends
only on the token arithmetic, never on how fast this machine runs the test."""

from __future__ import annotations

import asyncio
import dataclasses
import struct

from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from gateway.errors import RateLimitedError
from gateway.listener.server import KafkaListener, within_rate
from gateway.security.access import Access
from gateway.security.ratelimit import RateLimiter
from tests.unit.listener.support import context, request

RATE = 20.0  # requests per second
STEP = 0.01  # seconds the clock moves at each reading: 0.2 of a token


class SteppingClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += STEP
        return self.now


def _limited() -> Access:
    return Access(limiter=RateLimiter(RATE, 1, clock=SteppingClock()))


def test_within_rate_waits_until_a_token_is_back_and_takes_it() -> None:
    async def run() -> None:
        access = _limited()
        assert await within_rate(access, "User:a") == 0.0  # the burst
        waited = await within_rate(access, "User:a")
        assert waited > 0  # 0.2 token per reading: refused until the fifth
        assert await within_rate(access, "User:b") == 0.0  # each principal its own bucket
        try:
            access.limit("User:a")
        except RateLimitedError:
            pass
        else:
            raise AssertionError("the token of the wait was not taken")

    asyncio.run(run())


async def _call(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], payload: bytes) -> bytes:
    reader, writer = conn
    writer.write(struct.pack(">i", len(payload)) + payload)
    await writer.drain()
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def test_kafka_requests_over_the_rate_are_held_then_answered() -> None:
    async def run() -> None:
        ctx = dataclasses.replace(context(port=0), access=_limited())
        listener = KafkaListener(ctx, "127.0.0.1", 10)
        await listener.start()
        try:
            conn = await asyncio.open_connection("127.0.0.1", listener.port)
            for n in range(3):  # not counted: ApiVersions
                await _call(conn, request(ApiVersionsRequest[0](), correlation_id=n))
            for n in range(3):  # the first takes the burst, the next two wait
                reply = await _call(conn, request(MetadataRequest[1](topics=None), 10 + n))
                assert struct.unpack_from(">i", reply)[0] == 10 + n  # answered, in order
            conn[1].close()
        finally:
            await listener.close()
        metrics = listener.metrics
        assert metrics.throttled.labels("Metadata")._value.get() == 2
        assert metrics.throttled.labels("ApiVersions")._value.get() == 0
        assert metrics.throttle_seconds._value.get() > 0

    asyncio.run(run())
