"""Request-rate limits per principal: a token bucket each, in a bounded table.

Each principal has ``burst`` tokens that refill at ``rate`` per second; a request takes one, and
one that finds none is refused with the time until a token is back (the ``Retry-After`` of the
429). The table keeps the principals seen most recently, at most ``max_principals`` of them: a
client that invents principals (unauthenticated requests are all ``User:ANONYMOUS``, so only a
valid credential makes a new one) cannot grow it. A principal dropped from the table comes
back with a full bucket, which only ever lets through what a fresh principal may send.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from gateway.errors import RateLimitedError

MAX_PRINCIPALS: Final = 10_000


class RateLimiter:
    """Token buckets per principal; :meth:`take` raises :class:`RateLimitedError` when empty."""

    __slots__ = ("_buckets", "_clock", "_max", "burst", "rate")

    def __init__(
        self,
        rate: float,
        burst: int = 0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_principals: int = MAX_PRINCIPALS,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = float(burst) if burst > 0 else max(1.0, rate)  # default: a second's worth
        self._clock = clock
        self._max = max_principals
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, when

    def take(self, principal: str) -> None:
        now = self._clock()
        tokens, then = self._buckets.pop(principal, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self._buckets[principal] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
            raise RateLimitedError(
                f"{principal} is over its {self.rate:g} requests per second; retry in {wait:.2f} s",
                wait,
            )
        self._buckets[principal] = (tokens - 1.0, now)
        if len(self._buckets) > self._max:
            self._buckets.popitem(last=False)  # the one least recently seen

    def __len__(self) -> int:
        return len(self._buckets)
