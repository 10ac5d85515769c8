"""A request-rate budget per key prefix: one token bucket per prefix.

S3 serves about 5,500 GET/s per partitioned prefix and answers ``SlowDown`` (503) beyond it;
asking slower than that costs less than retrying. The prefix of a key is everything up to its
last ``/`` (in the Aiven layout, one topic partition's folder). A caller *reserves* a token and
is told how long to wait for it, so waiters are served in order without polling; a bucket holds
at most one second of tokens (the burst).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from cachetools import LRUCache


def key_prefix(key: str) -> str:
    """The folder of ``key``: up to and including its last ``/`` (``""`` at the top)."""
    return key[: key.rfind("/") + 1]


class PrefixRateLimiter:
    """At most ``rate`` requests per second per key prefix, after a burst of ``rate``
    (``rate`` 0: no limit)."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_prefixes: int = 10_000,
    ) -> None:
        if rate < 0:
            raise ValueError("rate must be >= 0")
        self._rate = rate
        self._clock = clock
        # prefix -> (tokens, time of that count); a forgotten prefix starts with a full burst
        self._buckets: LRUCache[str, tuple[float, float]] = LRUCache(maxsize=max_prefixes)
        self.waits = 0

    def reserve(self, key: str) -> float:
        """Take a token of ``key``'s prefix; the seconds to wait before using it."""
        if self._rate == 0:
            return 0.0
        prefix, now = key_prefix(key), self._clock()
        tokens, then = self._buckets.get(prefix, (self._rate, now))
        tokens = min(self._rate, tokens + (now - then) * self._rate) - 1.0
        self._buckets[prefix] = (tokens, now)
        if tokens >= 0:
            return 0.0
        self.waits += 1
        return -tokens / self._rate

    async def acquire(self, key: str) -> None:
        """Wait for a token of ``key``'s prefix."""
        delay = self.reserve(key)
        if delay > 0:
            await asyncio.sleep(delay)
