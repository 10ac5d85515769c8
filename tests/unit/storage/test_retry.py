"""Retry policy: attempts are counted, only retriable errors retry, the deadline wins."""

from __future__ import annotations

import asyncio
import gc
import random
import warnings

import pytest

from gateway.deadline import Deadline, wait_within
from gateway.errors import (
    DeadlineExceededError,
    ObjectNotFoundError,
    StorageUnavailableError,
)
from gateway.storage.retry import Retrier, RetryPolicy

FAST = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.004, attempt_timeout=0.5)


class Flaky:
    """Fails ``failures`` times with ``error`` (or stalls), then returns ``b"ok"``."""

    def __init__(self, failures: int, error: Exception | None = None, stall: float = 0.0) -> None:
        self.failures, self.error, self.stall, self.calls = failures, error, stall, 0

    async def __call__(self) -> bytes:
        self.calls += 1
        if self.calls <= self.failures:
            if self.stall:
                await asyncio.sleep(self.stall)
            if self.error is not None:
                raise self.error
        return b"ok"


async def test_retriable_errors_are_retried_until_success() -> None:
    op = Flaky(3, StorageUnavailableError("503 SlowDown"))
    r = Retrier(FAST)
    assert await r.run("get k", op, Deadline.after(5)) == b"ok"
    assert op.calls == 4 and r.counters.retries == 3 and r.counters.attempts == 4


async def test_attempts_are_capped() -> None:
    op = Flaky(10, StorageUnavailableError("503"))
    r = Retrier(FAST)
    with pytest.raises(StorageUnavailableError):
        await r.run("get k", op, Deadline.after(5))
    assert op.calls == 4 and r.counters.failures == 1


async def test_non_retriable_errors_fail_at_once() -> None:
    op = Flaky(1, ObjectNotFoundError("gone"))
    r = Retrier(FAST)
    with pytest.raises(ObjectNotFoundError):
        await r.run("get k", op, Deadline.after(5))
    assert op.calls == 1 and r.counters.retries == 0


async def test_stalled_attempts_time_out_and_retry() -> None:
    op = Flaky(2, stall=10)
    r = Retrier(RetryPolicy(max_attempts=4, base_delay=0.001, attempt_timeout=0.05))
    assert await r.run("get k", op, Deadline.after(5)) == b"ok"
    assert op.calls == 3 and r.counters.timeouts == 2


async def test_the_deadline_bounds_everything() -> None:
    op = Flaky(100, stall=10)
    r = Retrier(RetryPolicy(max_attempts=100, base_delay=0.001, attempt_timeout=0.05))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DeadlineExceededError):
        await r.run("get k", op, Deadline.after(0.2))
    assert loop.time() - started < 2  # a wide margin: the point is "not 100 x 50 ms"
    assert 2 <= op.calls <= 5 and r.counters.deadline_exceeded == 1


async def test_expired_deadline_makes_no_attempt() -> None:
    op = Flaky(0)
    with pytest.raises(DeadlineExceededError, match="before attempt 1"):
        await Retrier(FAST).run("get k", op, Deadline.after(-1))
    assert op.calls == 0


def test_full_jitter_backoff_stays_within_its_envelope() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    rng = random.Random(1)
    for attempt in range(1, 10):
        cap = min(1.0, 0.1 * 2 ** (attempt - 1))
        delays = [policy.backoff(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > cap * 0.8  # it does spread over the whole envelope


class SingleFlight:
    """A miniature single-flight cache: ``get`` joins the one load in flight (a shielded task,
    as the index cache does), which waits until the test releases it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.loads = 0
        self.value: bytes | None = None
        self._inflight: asyncio.Task[bytes] | None = None

    async def _load(self) -> bytes:
        self.loads += 1
        await self.release.wait()
        self.value = b"indexes"
        self._inflight = None
        return self.value

    async def get(self) -> bytes:
        if self.value is not None:
            return self.value  # a hit: no suspension
        if self._inflight is None:
            self._inflight = asyncio.create_task(self._load())
        return await asyncio.shield(self._inflight)


def _never_awaited(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


async def test_a_passed_deadline_still_starts_the_work_and_leaves_nothing_unawaited() -> None:
    cache = SingleFlight()
    passed = Deadline.after(-1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DeadlineExceededError, match="deadline passed"):
            await wait_within(cache.get(), passed, "indexes of k")
        gc.collect()
    assert _never_awaited(caught) == []
    await asyncio.sleep(0)
    assert cache.loads == 1  # the load a waiter with no time left asked for is under way
    cache.release.set()
    for _ in range(100):  # a few loop turns; no clock involved
        if cache.value is not None:
            break
        await asyncio.sleep(0)
    # the cold partition warmed up: even a request whose deadline has passed gets the hit
    assert await wait_within(cache.get(), passed, "indexes of k") == b"indexes"
    assert cache.loads == 1


async def test_waiters_that_give_up_do_not_poison_the_shared_load() -> None:
    cache = SingleFlight()
    patient = asyncio.ensure_future(wait_within(cache.get(), Deadline.after(60), "k"))
    await asyncio.sleep(0)
    with pytest.raises(DeadlineExceededError):  # no time at all
        await wait_within(cache.get(), Deadline.after(-1), "k")
    with pytest.raises(DeadlineExceededError, match="while waiting"):  # gives up while waiting
        await wait_within(cache.get(), Deadline.after(0.01), "k")
    assert not patient.done() and cache.loads == 1
    cache.release.set()
    assert await asyncio.wait_for(patient, 60) == b"indexes"  # the shared load was not cancelled
    assert await wait_within(cache.get(), Deadline.after(60), "k") == b"indexes"
    assert cache.loads == 1


async def test_a_failure_after_every_waiter_gave_up_is_retrieved_not_logged() -> None:
    failed = asyncio.Event()

    async def load() -> bytes:
        await asyncio.sleep(0)
        failed.set()
        raise StorageUnavailableError("503")

    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, ctx: unhandled.append(ctx))
    try:
        with pytest.raises(DeadlineExceededError):
            await wait_within(load(), Deadline.after(-1), "k")
        await asyncio.wait_for(failed.wait(), 60)
        for _ in range(10):
            await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unhandled == []
