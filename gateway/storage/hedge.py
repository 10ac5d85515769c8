"""Hedged requests: re-issue a straggling ranged GET once and keep the first answer.

AWS's guidance for S3 tail latency: track GET latencies, and when a GET takes longer than a
high percentile of recent ones, send the same request again and use whichever answers first.
:class:`Hedger` holds the threshold (a fixed one, or the ``quantile`` of recent GETs of the same
size class: powers of two of the byte count) and the budget (at most ``max_fraction`` of GETs
hedged, so a store that is slow for everyone is not asked twice as often). :func:`first_of`
runs one hedged request.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

T = TypeVar("T")

WINDOW: Final = 256  # recent latencies kept per size class
MIN_SAMPLES: Final = 20  # no adaptive hedging before a size class has this many
RECOMPUTE_EVERY: Final = 16  # observations between two threshold computations
HEDGE_BURST: Final = 4  # hedges allowed before any GET completed


@dataclass(frozen=True, slots=True)
class HedgePolicy:
    after_s: float = 0.0  # hedge after this long; 0: after the quantile of recent GETs
    quantile: float = 0.95
    max_fraction: float = 0.05  # hedges at most this share of GETs (0: never)
    min_after_s: float = 0.005  # an adaptive threshold is never shorter


class _Latencies:
    __slots__ = ("recent", "since", "threshold")

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=WINDOW)
        self.since = 0
        self.threshold: float | None = None


class Hedger:
    """When to hedge a GET, and whether the budget allows it; counts what it did."""

    def __init__(self, policy: HedgePolicy | None = None) -> None:
        self.policy = policy or HedgePolicy()
        self._classes: dict[int, _Latencies] = {}
        self.requests = 0
        self.hedges = 0  # second requests sent
        self.hedge_wins = 0  # of them, answered first

    def observe(self, size: int, seconds: float) -> None:
        """A GET of ``size`` bytes took ``seconds`` (or at least that long, when cut short)."""
        lat = self._classes.setdefault(size.bit_length(), _Latencies())
        lat.recent.append(seconds)
        lat.since += 1
        if lat.since >= RECOMPUTE_EVERY and len(lat.recent) >= MIN_SAMPLES:
            ordered = sorted(lat.recent)
            at = ordered[min(len(ordered) - 1, int(self.policy.quantile * len(ordered)))]
            lat.threshold = max(self.policy.min_after_s, at)
            lat.since = 0

    def threshold(self, size: int) -> float | None:
        """Seconds after which a GET of ``size`` bytes is hedged; ``None``: never."""
        self.requests += 1
        if self.policy.max_fraction <= 0:
            return None
        if self.policy.after_s > 0:
            return self.policy.after_s
        lat = self._classes.get(size.bit_length())
        return None if lat is None else lat.threshold

    def allow(self) -> bool:
        """Take one hedge from the budget, if any is left."""
        if self.hedges >= HEDGE_BURST + self.policy.max_fraction * self.requests:
            return False
        self.hedges += 1
        return True


async def first_of(
    primary: Awaitable[T], after: float | None, hedge: Callable[[], Awaitable[T] | None]
) -> tuple[T, bool]:
    """The answer of ``primary``, or, if it has none after ``after`` seconds and ``hedge()``
    gives a second request (``None``: not allowed now), of whichever answers first; the other
    is cancelled. A failure waits for the other request; when both fail, the first failure is
    raised. Returns the answer and whether the hedge gave it."""
    first = asyncio.ensure_future(primary)
    tasks = [first]
    try:
        if after is None:
            return await first, False
        done, _ = await asyncio.wait(tasks, timeout=after)
        second = None if done else hedge()
        if second is None:
            return await first, False
        tasks.append(asyncio.ensure_future(second))
        error: BaseException | None = None
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:  # in order: the primary's answer wins a tie
                if task in done:
                    exc = task.exception()
                    if exc is None:
                        return task.result(), task is not first
                    error = error or exc
        assert error is not None
        raise error
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
