"""Admission: a process-wide budget of response bytes in flight, turns for the pages decoded
at once, and a refusal while the event loop stays late.

**Bytes** (:class:`ByteBudget`).

Every data request reserves the most its answer may hold in memory at once (a JSON or raw
page: its ``max_bytes``; an NDJSON stream: one page) before it reads anything, and gives it back
when its response is sent. Beyond the budget requests wait in arrival order within their own
deadline, for at most ``wait_share`` (default half) of the time it had left when it came and at
most ``max_wait_s`` (``queue_wait_ms``: a request that cannot start soon is refused rather
than queued until it is late), so an admitted request keeps the rest to produce its answer
(an 8 MiB NDJSON stream admitted one second before its deadline would only end with
``deadline_exceeded``). One still waiting then gets :class:`OverloadedError` (503
``overloaded``, retriable, with ``Retry-After``) rather than pushing the process past its
memory bound. Grants go in arrival order and only while the budget has room, so the waiting
requests start a few at a time as others end, never all at once to share the cores and the
memory. A reservation larger than the whole budget is cut to
the budget, so any single request can always run alone; Kafka's "at least one whole batch" may
still exceed a page by one batch, which the budget's headroom covers.

**Time** (:class:`RequestGate`, issue 30). Bytes do not bound latency: 200 clients asking for
small warm pages all fit the byte budget and share the cores, so each page takes as long as
all of them (p99 7.3 s at 200 users). The gate hands out turns for the CPU part of a request:
at most ``active`` pages are decoded and written at once (the read before, which may wait on
the store, takes no turn; this bounds the decoded pages held at once); the others wait in
arrival order within ``wait_share`` of their deadline. A stream's later pages wait their turn
within the deadline. (A refusal by a wait predicted from the recent rate of turns was tried
and dropped: on a busy loop a burst's turns run slow, and the rate refused a storm of 100
small requests that the server answered in time.)

The CPU a request spends outside its turns (parsing, the read, the send) shows as the event
loop running late: :class:`LoopLag` measures how late a timer fires, and while every one of
the last :data:`LAG_WINDOW` ticks was later than its bound every new data request is refused
at once, raw ones included: a loop that stays late makes every request on it late. A burst
(100 connections at once) makes a tick or two late, not six: it is not refused.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from gateway.deadline import Deadline
from gateway.errors import OverloadedError

RAW_SHARE = 4
"""A raw answer (record batches as stored) reserves ``1 / RAW_SHARE`` of its bytes: they are
slices of verified memory, the caches' and bounded by them, against a decoded JSON/NDJSON page
that holds 9-12 times its bytes while it is written, for which the default budget is sized.
Reserving raw pages whole, 100 concurrent 1 MiB cold raw reads at the defaults (2 workers,
8 MiB each) waited out ``queue_wait_ms`` and got 503; reserving a quarter, all were answered and
the summed PSS stayed within 10 MiB of idle + the caches' budgets (docs/benchmarks.md,
issue 30)."""


def raw_reservation(nbytes: int) -> int:
    """What a raw answer of at most ``nbytes`` reserves of the byte budget."""
    return max(-(-nbytes // RAW_SHARE), 1)


@dataclass(slots=True)
class BudgetStats:
    """What the budget has seen: admitted at once, admitted after waiting, refused; and the
    bytes given back in all (:class:`gateway.service.memory.Trimmer` trims after enough)."""

    admitted: int = 0
    waited: int = 0
    refused: int = 0
    released_bytes: int = 0


class ByteBudget:
    """A FIFO-fair counting budget of bytes (one per process, shared by every request)."""

    def __init__(
        self, capacity: int, *, wait_share: float = 0.5, max_wait_s: float | None = None
    ) -> None:
        """``max_wait_s``: the longest any request waits, whatever its deadline (issue 30: a
        request that cannot start soon is refused rather than queued until it is late)."""
        if capacity <= 0:
            raise ValueError(f"a byte budget needs a positive capacity, not {capacity}")
        if not 0 <= wait_share <= 1:
            raise ValueError(f"wait_share is a share of the deadline, not {wait_share}")
        self.capacity = capacity
        self.wait_share = wait_share
        self.max_wait_s = max_wait_s
        self.in_use = 0
        self.stats = BudgetStats()
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for _, fut in self._waiters if not fut.done())

    @asynccontextmanager
    async def hold(self, nbytes: int, deadline: Deadline) -> AsyncIterator[int]:
        """Hold ``nbytes`` (cut to ``[1, capacity]``) for the block; yields what is held."""
        held = await self.acquire(nbytes, deadline)
        try:
            yield held
        finally:
            self.release(held)

    def wait_limit(self, deadline: Deadline) -> float:
        """The longest a request arriving now with ``deadline`` waits: ``wait_share`` of what is
        left of it (0 when it has passed), at most ``max_wait_s``."""
        limit = max(deadline.remaining(), 0.0) * self.wait_share
        return limit if self.max_wait_s is None else min(limit, self.max_wait_s)

    async def acquire(self, nbytes: int, deadline: Deadline) -> int:
        """Reserve ``nbytes`` (cut to ``[1, capacity]``), waiting in arrival order for at most
        :meth:`wait_limit`; returns what was reserved, to give back with :meth:`release`."""
        n = min(max(nbytes, 1), self.capacity)
        if not self._waiters and self.in_use + n <= self.capacity:
            self.in_use += n
            self.stats.admitted += 1
            return n
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        limit = self.wait_limit(deadline)
        try:
            if limit > 0:
                await asyncio.wait({fut}, timeout=limit)
        except BaseException:  # cancelled while waiting (the client went away)
            self._give_up(entry)
            raise
        if fut.done():
            self.stats.waited += 1
            return n
        self._give_up(entry)
        self.stats.refused += 1
        raise OverloadedError(
            f"{self.in_use} of {self.capacity} response bytes in flight; {n} more did not free "
            f"up within {limit:.2f} s"
        )

    def release(self, n: int) -> None:
        self.in_use -= n
        self.stats.released_bytes += n
        self._grant()

    def _give_up(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        n, fut = entry
        if fut.done():  # granted just as its waiter gave up: hand the bytes back
            self.release(n)
            return
        fut.cancel()
        with suppress(ValueError):
            self._waiters.remove(entry)
        self._grant()  # the head may have been the one blocking smaller requests behind it

    def _grant(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if self.in_use + n > self.capacity:
                return
            self._waiters.popleft()
            self.in_use += n
            fut.set_result(None)


LAG_TICK_S = 0.05
LAG_WINDOW = 6  # ticks: the lag is the least of the last six (0.3 s and more)


class LoopLag:
    """How late the event loop runs: a timer every :data:`LAG_TICK_S`, the least it fired late
    over the last :data:`LAG_WINDOW` ticks, i.e. how late it stays (:meth:`run` is the task
    that measures)."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._late: deque[float] = deque(maxlen=LAG_WINDOW)

    @property
    def lag_s(self) -> float:
        if len(self._late) < LAG_WINDOW:
            return 0.0
        return min(self._late)

    @property
    def over(self) -> bool:
        return self.bound_s > 0 and self.lag_s > self.bound_s

    def record(self, late_s: float) -> None:
        self._late.append(max(late_s, 0.0))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(LAG_TICK_S)
            self.record(loop.time() - start - LAG_TICK_S)


@dataclass(slots=True)
class GateStats:
    admitted: int = 0
    waited: int = 0
    refused: int = 0  # after waiting, or at once while the event loop runs late
    refused_late: int = 0


class RequestGate:
    """At most ``active`` turns at once; FIFO beyond, within ``wait_share`` of the deadline
    and ``max_wait_s`` (see the module docstring)."""

    def __init__(
        self,
        active: int,
        max_wait_s: float | None = None,
        *,
        wait_share: float = 0.5,
        lag: LoopLag | None = None,
    ) -> None:
        if active <= 0:
            raise ValueError(f"a request gate needs a positive size, not {active}")
        self.lag = lag if lag is not None else LoopLag(0.0)
        self.active = active
        self.max_wait_s = max_wait_s
        self.wait_share = wait_share
        self.running = 0
        self.stats = GateStats()
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for fut in self._waiters if not fut.done())

    def admit(self) -> None:
        """A new data request may start: :class:`OverloadedError` while the event loop runs
        later than its bound."""
        if self.lag.over:
            self.stats.refused += 1
            self.stats.refused_late += 1
            raise self._overloaded(f"the event loop runs {self.lag.lag_s * 1e3:.0f} ms late")

    @asynccontextmanager
    async def turn(self, deadline: Deadline, *, admitted: bool = False) -> AsyncIterator[None]:
        """:meth:`acquire` for the block, :meth:`release` after it."""
        await self.acquire(deadline, admitted=admitted)
        try:
            yield
        finally:
            self.release()

    async def acquire(self, deadline: Deadline, *, admitted: bool = False) -> None:
        """Take a turn, waiting in arrival order; :class:`OverloadedError` when it did not
        come within the wait allowed. ``admitted``: the work of a request already under way
        (a stream's later page): it waits its turn within its whole deadline."""
        if self.running < self.active and not self.waiting:
            self.running += 1
            self.stats.admitted += 1
            return
        remaining = max(deadline.remaining(), 0.0)
        limit = remaining if admitted else remaining * self.wait_share
        if self.max_wait_s is not None and not admitted:
            limit = min(limit, self.max_wait_s)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            if limit > 0:
                await asyncio.wait({fut}, timeout=limit)
        except BaseException:
            self._give_up(fut)
            raise
        if fut.done() and not fut.cancelled():
            self.stats.waited += 1
            return
        self._give_up(fut)
        self.stats.refused += 1
        raise self._overloaded(f"no turn within {limit:.2f} s")

    def release(self) -> None:
        self.running -= 1
        self._grant()

    def _overloaded(self, why: str) -> OverloadedError:
        return OverloadedError(
            f"{self.running} data requests running (at most {self.active}), "
            f"{self.waiting} waiting: {why}; try again later"
        )

    def _give_up(self, fut: asyncio.Future[None]) -> None:
        if fut.done() and not fut.cancelled():  # granted just as its waiter gave up
            self.running -= 1
            self._grant()
            return
        fut.cancel()
        with suppress(ValueError):
            self._waiters.remove(fut)

    def _grant(self) -> None:
        while self._waiters and self.running < self.active:
            fut = self._waiters.popleft()
            if fut.done():
                continue
            self.running += 1
            fut.set_result(None)
