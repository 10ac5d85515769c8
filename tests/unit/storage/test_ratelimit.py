"""The request-rate budget per key prefix: a token bucket per folder, served in order."""

from __future__ import annotations

import pytest

from gateway.storage.ratelimit import PrefixRateLimiter, key_prefix


def test_the_prefix_is_the_folder_of_the_key() -> None:
    assert key_prefix("p/topic-id/0/00000000000000000000-abc.log") == "p/topic-id/0/"
    assert key_prefix("top.log") == ""


def test_a_burst_of_one_second_then_the_rate_per_prefix() -> None:
    now = [100.0]
    limiter = PrefixRateLimiter(2.0, clock=lambda: now[0])
    assert [limiter.reserve("a/x") for _ in range(2)] == [0.0, 0.0]  # the burst
    assert limiter.reserve("a/y") == pytest.approx(0.5)  # same folder: queued
    assert limiter.reserve("a/z") == pytest.approx(1.0)  # behind it, in order
    assert limiter.reserve("b/x") == 0.0  # another folder has its own bucket
    now[0] += 1.5  # the two reserved tokens came, one more since
    assert limiter.reserve("a/x") == 0.0
    assert limiter.reserve("a/x") == pytest.approx(0.5)
    now[0] += 60  # idle: the bucket refills to one second's worth, no more
    assert [limiter.reserve("a/x") for _ in range(3)] == [0.0, 0.0, pytest.approx(0.5)]
    assert limiter.waits == 4


def test_rate_zero_is_no_limit() -> None:
    limiter = PrefixRateLimiter(0)
    assert all(limiter.reserve("a/x") == 0.0 for _ in range(10_000))
    with pytest.raises(ValueError):
        PrefixRateLimiter(-1)
