"""The byte budget of responses in flight: FIFO admission within deadlines, never leaking."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.statuses import http_status
from gateway.deadline import Deadline
from gateway.errors import OverloadedError
from gateway.service.admission import ByteBudget


async def test_admits_at_once_below_the_budget_and_gives_back() -> None:
    budget = ByteBudget(100)
    async with budget.hold(60, Deadline.after(1)) as held:
        assert held == 60
        assert budget.in_use == 60
    assert budget.in_use == 0
    assert budget.stats.admitted == 1


async def test_a_request_larger_than_the_budget_runs_alone() -> None:
    budget = ByteBudget(100)
    async with budget.hold(10_000, Deadline.after(1)) as held:
        assert held == 100


async def test_waits_in_arrival_order_and_is_granted_on_release() -> None:
    budget = ByteBudget(100)
    first = await budget.acquire(80, Deadline.after(10))
    order: list[str] = []

    async def take(name: str, n: int) -> None:
        got = await budget.acquire(n, Deadline.after(10))
        order.append(name)
        budget.release(got)

    big = asyncio.create_task(take("big", 50))
    await asyncio.sleep(0)  # big queues first
    small = asyncio.create_task(take("small", 10))  # would fit now, but waits its turn
    await asyncio.sleep(0)
    assert order == [] and budget.waiting == 2
    budget.release(first)
    await asyncio.gather(big, small)
    assert order == ["big", "small"]
    assert budget.in_use == 0
    assert budget.stats.waited == 2


async def test_past_the_deadline_is_overloaded_and_leaves_no_trace() -> None:
    budget = ByteBudget(100)
    held = await budget.acquire(100, Deadline.after(10))
    with pytest.raises(OverloadedError) as info:
        await budget.acquire(1, Deadline.after(-1))  # already past: refused without waiting
    assert http_status(info.value) == 503 and info.value.retriable
    assert info.value.code == "overloaded"
    assert budget.waiting == 0 and budget.stats.refused == 1
    budget.release(held)
    assert budget.in_use == 0


async def test_waits_at_most_its_share_of_the_deadline() -> None:
    deadline = Deadline.after(10)
    half, none = ByteBudget(100), ByteBudget(100, wait_share=0)
    assert 0 < half.wait_limit(deadline) <= 5 < deadline.remaining()
    assert none.wait_limit(deadline) == 0
    assert half.wait_limit(Deadline.after(-1)) == 0


async def test_with_no_share_to_wait_a_full_budget_refuses_at_once() -> None:
    budget = ByteBudget(100, wait_share=0)
    held = await budget.acquire(100, Deadline.after(60))
    with pytest.raises(OverloadedError, match=r"within 0\.00 s"):
        await budget.acquire(1, Deadline.after(60))  # 60 s left, none of it to wait
    assert budget.stats.refused == 1 and budget.waiting == 0
    budget.release(held)
    assert await budget.acquire(1, Deadline.after(60)) == 1  # room again: admitted


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        ByteBudget(100, wait_share=share)


async def test_counts_the_bytes_given_back() -> None:
    budget = ByteBudget(100)
    async with budget.hold(60, Deadline.after(1)):
        assert budget.stats.released_bytes == 0
    async with budget.hold(500, Deadline.after(1)):  # cut to the capacity
        pass
    assert budget.stats.released_bytes == 160


async def test_a_cancelled_waiter_neither_leaks_nor_blocks_those_behind() -> None:
    budget = ByteBudget(100)
    held = await budget.acquire(90, Deadline.after(10))
    blocked = asyncio.create_task(budget.acquire(50, Deadline.after(10)))
    await asyncio.sleep(0)
    behind = asyncio.create_task(budget.acquire(10, Deadline.after(10)))
    await asyncio.sleep(0)
    blocked.cancel()
    assert await behind == 10  # the head left: the smaller request fits and is granted
    with pytest.raises(asyncio.CancelledError):
        await blocked
    budget.release(held)
    budget.release(10)
    assert budget.in_use == 0 and budget.waiting == 0


@settings(max_examples=60)
@given(
    capacity=st.integers(1, 200),
    requests=st.lists(st.tuples(st.integers(0, 300), st.booleans()), min_size=1, max_size=25),
)
def test_property_never_over_capacity_and_all_given_back(
    capacity: int, requests: list[tuple[int, bool]]
) -> None:
    """Whatever mix of sizes and cancellations, in-use bytes never pass the capacity and end
    at zero."""

    async def scenario() -> None:
        budget = ByteBudget(capacity)
        peak = 0

        async def one(n: int) -> None:
            nonlocal peak
            async with budget.hold(n, Deadline.after(30)):
                peak = max(peak, budget.in_use)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(one(n)) for n, _ in requests]
        await asyncio.sleep(0)
        for task, (_, cancel) in zip(tasks, requests, strict=True):
            if cancel:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert peak <= capacity
        assert budget.in_use == 0 and budget.waiting == 0

    asyncio.run(scenario())


async def test_the_wait_is_capped_whatever_the_deadline() -> None:
    """Issue 30: a request that cannot start soon is refused, not queued until it is late."""
    capped = ByteBudget(100, max_wait_s=0.5)
    assert capped.wait_limit(Deadline.after(600)) == 0.5
    assert capped.wait_limit(Deadline.after(0.4)) <= 0.2
