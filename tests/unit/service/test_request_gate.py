"""The request gate (issue 30): at most ``active`` turns at once, the others in arrival
order within their wait; a refusal at once while the event loop stays late. No verdict here
waits on a clock: turns are handed over by releases, lateness is recorded ticks."""

from __future__ import annotations

import asyncio

import pytest

from gateway.api.statuses import http_status
from gateway.deadline import Deadline
from gateway.errors import OverloadedError
from gateway.service.admission import LoopLag, RequestGate


def _later() -> Deadline:
    return Deadline.after(600)


async def _settle() -> None:
    """Let the woken tasks run (loop turns, no clock)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_turns_go_in_arrival_order() -> None:
    gate = RequestGate(2, max_wait_s=600)
    await gate.acquire(_later())
    await gate.acquire(_later())
    order: list[int] = []

    async def wait(i: int) -> None:
        await gate.acquire(_later())
        order.append(i)

    waiters = [asyncio.create_task(wait(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert gate.running == 2 and gate.waiting == 3 and order == []
    gate.release()
    await _settle()
    assert order == [0]
    gate.release()
    gate.release()
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2] and gate.running == 2
    assert (gate.stats.admitted, gate.stats.waited, gate.stats.refused) == (2, 3, 0)


async def test_no_wait_allowed_refuses_when_every_turn_is_taken() -> None:
    gate = RequestGate(1, max_wait_s=0)
    await gate.acquire(_later())
    with pytest.raises(OverloadedError, match="no turn"):
        await gate.acquire(_later())
    gate.release()
    await gate.acquire(_later())  # a free turn is taken at once
    assert gate.running == 1


async def test_a_waiter_that_goes_away_gives_its_place_up() -> None:
    gate = RequestGate(1, max_wait_s=600)
    await gate.acquire(_later())
    gone = asyncio.create_task(gate.acquire(_later()))
    await asyncio.sleep(0)
    stays = asyncio.create_task(gate.acquire(_later()))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    gate.release()
    await stays
    assert gate.running == 1 and gate.waiting == 0


async def test_overloaded_is_a_retriable_503() -> None:
    assert (http_status(OverloadedError), OverloadedError.code, OverloadedError.retriable) == (
        503,
        "overloaded",
        True,
    )


def test_a_late_event_loop_refuses_new_requests_at_once() -> None:
    lag = LoopLag(0.1)
    gate = RequestGate(4, max_wait_s=1, lag=lag)
    gate.admit()  # no tick measured yet
    for late in (0.25, 0.3, 0.4, 0.5, 0.6):
        lag.record(late)
    assert not lag.over  # not six ticks yet
    lag.record(0.7)
    assert lag.over  # every one of the last six late: it stays late
    with pytest.raises(OverloadedError, match="250 ms late"):
        gate.admit()
    lag.record(0.01)  # one tick on time: a burst, not a loop that stays late
    gate.admit()
    assert (gate.stats.refused, gate.stats.refused_late) == (1, 1)
    assert not LoopLag(0).over  # 0: never
