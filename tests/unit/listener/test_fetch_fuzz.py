"""Fetch's invariants under random shapes, budgets, delays, failures and cancellation (a
reviewer's fuzz, seeded): several concurrent Fetches over up to 16 partitions, each read
delayed at random and now and then failing with an unexpected error, a byte budget from one
batch to plenty, ``max_bytes`` and ``partition_max_bytes`` from 1 byte up, ``max_wait_ms``
0 to 100.

* a response whose partitions hold data is never empty: some partition has records or an
  error (the response waits for the first answer; the delays are far below that wait);
* every partition answers its real high watermark unless it answers an error;
* every share of ``inflight_bytes`` is given back, also when the Fetches are cancelled
  midway (the client went away).

The delays only vary the interleavings: no verdict depends on one elapsing first. They are
turns of the event loop, not time, and each read's delay and failure come from its own seeded
generator (named by the seed, the partition and the call), so a seed replays the same delays
and failures whatever the machine's load (the interleaving then differs only where a Fetch's
own ``max_wait_ms`` timer fires first)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchResponse

from gateway.listener import codes
from gateway.listener.fetch import fetch
from gateway.service.admission import ByteBudget
from tests.fakes.service import FakeService
from tests.unit.listener.support import BATCH_BYTES, END, catalog, context, decoded, unframe
from tests.unit.listener.test_fetch import _fetch_request

SIZE = len(BATCH_BYTES[0])
PARTITIONS = 16


class _Jitter(FakeService):
    def __init__(self, seed: int, failing: float) -> None:
        super().__init__(catalog(present=tuple(range(PARTITIONS))))
        self.seed = seed
        self.failing = failing
        self.asked: dict[tuple[str, int], int] = {}

    def _rng(self, what: str, partition: int) -> random.Random:
        """This call's own generator: the same for the same seed, partition and call."""
        n = self.asked[what, partition] = self.asked.get((what, partition), -1) + 1
        return random.Random(f"{self.seed}/{what}/{partition}/{n}")

    async def fetch(self, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        rng = self._rng("fetch", partition)
        await _turns(rng.randrange(40))
        if rng.random() < self.failing:
            raise ValueError("unexpected")
        return await super().fetch(topic, partition, *args, **kwargs)

    async def partition(self, topic: str, partition: int, deadline: Any = None) -> Any:
        await _turns(self._rng("partition", partition).randrange(10))
        return await super().partition(topic, partition)


async def _turns(n: int) -> None:
    """Let the event loop run ``n`` times (a delay in turns, not in time)."""
    for _ in range(n):
        await asyncio.sleep(0)


def _request(rng: random.Random, offsets: tuple[int, ...]) -> tuple[bytes, bool]:
    """A random Fetch v12, and whether a partition it names has data (below the end)."""
    n = rng.randint(1, PARTITIONS)
    parts = [(p, rng.choice(offsets), rng.choice([1, SIZE, 10 * SIZE, 1 << 20])) for p in range(n)]
    payload = _fetch_request(parts, max_bytes=rng.choice([1, SIZE, 3 * SIZE, 1 << 20]),
                             wait_ms=rng.choice([0, 1, 5, 100]))  # fmt: skip
    return payload, any(offset < END for _, offset, _ in parts)


def _budget(rng: random.Random) -> ByteBudget:
    return ByteBudget(rng.choice([SIZE, 2 * SIZE, 1 << 24]))


@pytest.mark.parametrize("seed", range(60))
def test_data_on_its_way_is_never_an_empty_response_and_nothing_leaks(seed: int) -> None:
    rng = random.Random(seed)
    payload, has_data = _request(rng, (0, 3, END, END))

    async def run() -> list[bytes]:
        ctx = dataclasses.replace(context(_Jitter(seed, 0.0)), budget=_budget(rng))

        async def one() -> bytes:
            reply = await fetch(ctx, decoded(payload))
            data = unframe(reply)
            reply.release()  # as the server does once it is sent
            return data

        replies = await asyncio.gather(*(one() for _ in range(3)))
        assert ctx.budget.in_use == 0
        return replies

    for data in asyncio.run(run()):
        partitions = FetchResponse[12].decode(data, version=12, header=True).responses[0].partitions
        if has_data:
            assert any(p.records or p.error_code for p in partitions), seed
        for p in partitions:
            assert p.error_code != codes.NONE or p.high_watermark == END, (seed, p)


@pytest.mark.parametrize("seed", range(40))
def test_cancelled_or_failing_fetches_give_every_share_back(seed: int) -> None:
    rng = random.Random(1000 + seed)
    payload, _ = _request(rng, (0, 3, 9, END, END + 1))

    async def run() -> None:
        ctx = dataclasses.replace(context(_Jitter(1000 + seed, 0.05)), budget=_budget(rng))
        tasks = [asyncio.ensure_future(fetch(ctx, decoded(payload))) for _ in range(4)]
        if rng.random() < 0.5:
            await _turns(rng.randrange(40))
            for task in tasks[: rng.randint(1, 4)]:
                task.cancel()
        for task in tasks:
            try:
                reply = await task
            except asyncio.CancelledError:
                continue
            reply.release()
        assert ctx.budget.in_use == 0

    asyncio.run(run())
