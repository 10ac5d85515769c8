"""Deadlines: one point on the monotonic clock per request, and waiting for shared work within one.

A request carries one :class:`Deadline` from the HTTP edge to the store; every wait below it
(retries, single-flight loads, the thread pool) gives up at that point with
:class:`~gateway.errors.DeadlineExceededError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.errors import DeadlineExceededError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point on the monotonic clock by which an operation must be done."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()


_abandoned: set[asyncio.Future[Any]] = set()
"""Work whose waiters all gave up (see :func:`wait_within`), held until it is done: the event
loop keeps only weak references to tasks."""


def _abandon(future: asyncio.Future[Any]) -> None:
    """Let ``future`` run on with no waiter: kept alive, its outcome retrieved when done (so a
    failure is not logged as never retrieved; whoever asks next gets it anew)."""

    def settle(done: asyncio.Future[Any]) -> None:
        _abandoned.discard(done)
        if not done.cancelled():
            done.exception()

    if future.done():
        settle(future)
    else:
        _abandoned.add(future)
        future.add_done_callback(settle)


async def wait_within(aw: Awaitable[T], deadline: Deadline, what: str) -> T:
    """Wait for a shared result without cancelling it: the waiter gives up at its own deadline
    (``DeadlineExceededError``), the work goes on for whoever else waits.

    That holds when the deadline has already passed too: ``aw`` (typically a coroutine that
    joins or starts a single-flight load) is still started, never dropped unawaited, and left
    to finish. A cold load begun by a request with a tiny timeout thus warms the cache for the
    next request instead of never happening; nothing is cancelled, so a load other requests
    share is not poisoned. And an answer that needs no waiting (a cache hit, done in the
    coroutine's first step) is still given after the deadline, rather than a 504."""
    future = asyncio.ensure_future(aw)
    try:
        remaining = deadline.remaining()
        if remaining <= 0:
            if not future.done():
                await asyncio.sleep(0)  # one step: a cache hit completes in it, a load does not
            if future.done() and not future.cancelled():
                return future.result()
            raise DeadlineExceededError(f"{what}: deadline passed")
        try:
            return await asyncio.wait_for(asyncio.shield(future), remaining)
        except TimeoutError as exc:
            raise DeadlineExceededError(f"{what}: deadline passed while waiting") from exc
    finally:
        if not future.done():  # given up (deadline, or the waiter was cancelled): runs on
            _abandon(future)
