"""Hedged requests: the threshold, the budget, and the first answer kept."""

from __future__ import annotations

import asyncio

import pytest

from gateway.storage.hedge import MIN_SAMPLES, HedgePolicy, Hedger, first_of


def test_the_adaptive_threshold_is_the_p95_of_the_size_class() -> None:
    hedger = Hedger(HedgePolicy(quantile=0.95, min_after_s=0.001))
    assert hedger.threshold(1 << 20) is None  # nothing seen yet: no hedging
    for i in range(100):
        hedger.observe(1 << 20, 0.010 + i / 1000)  # 10 ms .. 109 ms
    assert hedger.threshold(1 << 20) == pytest.approx(0.105)
    assert hedger.threshold(1 << 10) is None  # another size class has its own
    for _ in range(MIN_SAMPLES):
        hedger.observe(1 << 10, 0.0001)
    assert hedger.threshold(1 << 10) == 0.001  # never below the floor
    assert Hedger(HedgePolicy(after_s=0.2)).threshold(5) == 0.2
    assert Hedger(HedgePolicy(after_s=0.2, max_fraction=0)).threshold(5) is None


def test_the_budget_bounds_the_share_of_hedged_requests() -> None:
    hedger = Hedger(HedgePolicy(after_s=0.1, max_fraction=0.1))
    for _ in range(100):
        hedger.threshold(10)
    allowed = sum(hedger.allow() for _ in range(100))
    assert allowed == hedger.hedges == 14  # 4 to start with, then 10 % of 100


async def test_the_hedge_answers_and_the_straggler_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def straggler() -> bytes:
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return b"late"

    async def fast() -> bytes:
        return b"data"

    assert await first_of(straggler(), 0.001, fast) == (b"data", True)
    assert cancelled.is_set()


async def test_a_failure_waits_for_the_other_request() -> None:
    hedged = asyncio.Event()

    async def fails_after_the_hedge_started() -> bytes:
        await hedged.wait()
        raise OSError("reset")

    async def answers() -> bytes:
        hedged.set()
        await asyncio.sleep(0)
        return b"data"

    assert await first_of(fails_after_the_hedge_started(), 0.001, answers) == (b"data", True)

    async def fails_too() -> bytes:
        hedged.set()
        raise ValueError("second")

    hedged.clear()
    with pytest.raises(OSError, match="reset"):  # both failed: the first failure
        await first_of(fails_after_the_hedge_started(), 0.001, fails_too)


async def test_no_hedge_when_none_is_allowed_or_the_answer_is_in_time() -> None:
    async def answer() -> bytes:
        return b"data"

    def never() -> None:
        raise AssertionError("hedged")

    assert await first_of(answer(), None, never) == (b"data", False)
    assert await first_of(answer(), 30.0, never) == (b"data", False)
    release = asyncio.Event()

    async def slow() -> bytes:
        await release.wait()
        return b"slow"

    task = asyncio.ensure_future(first_of(slow(), 0.001, lambda: None))
    await asyncio.sleep(0.01)
    release.set()
    assert await task == (b"slow", False)
