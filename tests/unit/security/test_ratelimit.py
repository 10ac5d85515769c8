"""Token buckets per principal, on an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.statuses import http_status
from gateway.errors import RateLimitedError
from gateway.security.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(2.0, 3, clock=clock)
    for _ in range(3):
        limiter.take("User:a")
    with pytest.raises(RateLimitedError) as caught:
        limiter.take("User:a")
    assert caught.value.retry_after_s == pytest.approx(0.5)
    assert http_status(caught.value) == 429
    limiter.take("User:b")  # another principal has its own bucket
    clock.now += 0.5
    limiter.take("User:a")
    with pytest.raises(RateLimitedError):
        limiter.take("User:a")


def test_the_default_burst_is_a_second_s_worth() -> None:
    clock = Clock()
    limiter = RateLimiter(5.0, clock=clock)
    for _ in range(5):
        limiter.take("User:a")
    with pytest.raises(RateLimitedError):
        limiter.take("User:a")


def test_the_table_is_bounded() -> None:
    clock = Clock()
    limiter = RateLimiter(1.0, 1, clock=clock, max_principals=3)
    for i in range(10):
        limiter.take(f"User:{i}")
    assert len(limiter) == 3


@settings(deadline=None, max_examples=200)
@given(
    rate=st.floats(0.5, 50),
    burst=st.integers(1, 20),
    gaps=st.lists(st.floats(0, 2), min_size=1, max_size=60),
)
def test_never_more_than_burst_plus_rate_times_time(
    rate: float, burst: int, gaps: list[float]
) -> None:
    clock = Clock()
    limiter = RateLimiter(rate, burst, clock=clock)
    start, allowed = clock.now, 0
    for gap in gaps:
        clock.now += gap
        try:
            limiter.take("User:a")
            allowed += 1
        except RateLimitedError as exc:
            assert exc.retry_after_s > 0
    assert allowed <= burst + rate * (clock.now - start) + 1e-9
