"""Retries inside a deadline: exponential backoff with full jitter, a per-attempt timeout.

Whether an error is worth retrying is decided by its type alone (``GatewayError.retriable``,
set where the store's structured error codes are translated), never by message text. A caller
passes one :class:`Deadline` for the whole request; when it passes, the caller gets a
:class:`~gateway.errors.DeadlineExceededError` chained to the last failure.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gateway.deadline import Deadline
from gateway.errors import DeadlineExceededError, GatewayError, StorageUnavailableError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay: float = 0.05  # seconds; attempt n waits uniform(0, min(cap, base * 2^(n-1)))
    max_delay: float = 2.0
    attempt_timeout: float = 10.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full jitter (the AWS architecture blog's recommendation) after failed ``attempt``."""
        return rng.uniform(0.0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))


@dataclass(slots=True)
class RetryCounters:
    attempts: int = 0
    retries: int = 0
    timeouts: int = 0
    deadline_exceeded: int = 0
    failures: int = 0


@dataclass(slots=True)
class Retrier:
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    counters: RetryCounters = field(default_factory=RetryCounters)
    rng: random.Random = field(default_factory=random.Random)

    async def run(self, what: str, op: Callable[[], Awaitable[T]], deadline: Deadline) -> T:
        """Run ``op`` until it succeeds, fails for good, or the deadline passes."""
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline.remaining()
            if remaining <= 0:
                self.counters.deadline_exceeded += 1
                raise DeadlineExceededError(f"{what}: deadline passed before attempt {attempt}")
            self.counters.attempts += 1
            try:
                return await asyncio.wait_for(op(), min(self.policy.attempt_timeout, remaining))
            except TimeoutError as exc:
                self.counters.timeouts += 1
                if deadline.remaining() <= 0:
                    self.counters.deadline_exceeded += 1
                    raise DeadlineExceededError(
                        f"{what}: deadline passed during attempt {attempt}"
                    ) from exc
                error: GatewayError = StorageUnavailableError(
                    f"{what}: attempt {attempt} timed out after {self.policy.attempt_timeout}s"
                )
                error.__cause__ = exc
            except GatewayError as exc:
                error = exc
            await asyncio.sleep(self._delay_before_retry(what, attempt, error, deadline))

    def run_blocking(self, what: str, op: Callable[[], T], deadline: Deadline) -> T:
        """:meth:`run` for blocking callers (Spark executors, batch jobs): the same attempts,
        backoff and deadline; an attempt is bounded by the client's own socket timeouts."""
        attempt = 0
        while True:
            attempt += 1
            if deadline.remaining() <= 0:
                self.counters.deadline_exceeded += 1
                raise DeadlineExceededError(f"{what}: deadline passed before attempt {attempt}")
            self.counters.attempts += 1
            try:
                return op()
            except GatewayError as exc:
                delay = self._delay_before_retry(what, attempt, exc, deadline)
            time.sleep(delay)

    def _delay_before_retry(
        self, what: str, attempt: int, error: GatewayError, deadline: Deadline
    ) -> float:
        """After failed ``attempt``: the backoff before the next one, or the error to raise
        (not retriable, attempts used up, or the deadline passes before the retry)."""
        if not error.retriable or attempt >= self.policy.max_attempts:
            self.counters.failures += 1
            raise error
        delay = self.policy.backoff(attempt, self.rng)
        if delay >= deadline.remaining():
            self.counters.deadline_exceeded += 1
            raise DeadlineExceededError(
                f"{what}: deadline passes before retry {attempt} could start"
            ) from error
        self.counters.retries += 1
        return delay
