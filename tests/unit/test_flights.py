"""Single flight: callers that miss while a load of the key runs join it; a load leaves as it
ends, so a failure is never handed to a caller that comes later."""

from __future__ import annotations

import asyncio

import pytest

from gateway.flights import Flights


async def test_callers_join_the_load_in_flight_and_a_failure_is_not_kept() -> None:
    flights: Flights[str, int] = Flights()
    started = 0
    gate = asyncio.Event()

    async def load() -> int:
        nonlocal started
        started += 1
        await gate.wait()
        if started == 1:
            raise ValueError("the store failed")
        return 7

    first, second = flights.join("k", load), flights.join("k", load)
    assert first is second and "k" in flights and flights.tasks() == [first]
    gate.set()
    with pytest.raises(ValueError):
        await asyncio.shield(first)
    assert "k" not in flights  # gone with its end: the next caller loads again
    assert await flights.join("k", load) == 7
    assert started == 2
