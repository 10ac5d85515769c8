"""Runs published in the background (:mod:`gateway.cache.run_publisher`): in order, never making
the reader wait, bounded by the bytes pending, at the lowest CPU priority, a failure logged."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from array import array

import pytest

from gateway.cache.run_publisher import LOWEST_PRIORITY, Publisher
from gateway.cache.verified import VerifiedRun

SEGMENT = uuid.UUID(int=5)


def _run(first: int, size: int) -> VerifiedRun:
    return VerifiedRun(
        0,
        memoryview(bytes(size)),
        array("q", [size]),
        array("q", [first]),
        array("q", [first]),
        size,
    )


def test_runs_are_published_in_order_by_a_thread_at_the_lowest_priority() -> None:
    gate = threading.Event()
    seen: list[tuple[uuid.UUID, int, int]] = []

    def publish(segment: uuid.UUID, run: VerifiedRun) -> bool:
        gate.wait(30)
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        seen.append((segment, run.first_offset, nice))
        return True

    publisher = Publisher(publish, 1 << 20)
    publisher.submit(SEGMENT, [_run(0, 10), _run(10, 10)])  # returns while the thread waits
    assert (publisher.pending, publisher.pending_bytes) == (2, 20)
    assert not publisher.wait_idle(0.01)
    gate.set()
    assert publisher.wait_idle(30)
    assert seen == [(SEGMENT, 0, LOWEST_PRIORITY), (SEGMENT, 10, LOWEST_PRIORITY)]
    assert (publisher.pending, publisher.pending_bytes, publisher.dropped) == (0, 0, 0)


def test_runs_beyond_the_pending_bytes_are_not_shared() -> None:
    gate = threading.Event()
    published: list[int] = []

    def publish(segment: uuid.UUID, run: VerifiedRun) -> bool:
        gate.wait(30)
        published.append(run.first_offset)
        return True

    publisher = Publisher(publish, 100)
    publisher.submit(SEGMENT, [_run(0, 60), _run(1, 60), _run(2, 40)])
    assert (publisher.pending, publisher.pending_bytes, publisher.dropped) == (2, 100, 1)
    gate.set()
    assert publisher.wait_idle(30)
    assert published == [0, 2]
    publisher.submit(SEGMENT, [_run(3, 100)])  # room again once published
    assert publisher.wait_idle(30) and published == [0, 2, 3] and publisher.dropped == 1


def test_a_failed_publish_is_logged_and_the_next_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    published: list[int] = []

    def publish(segment: uuid.UUID, run: VerifiedRun) -> bool:
        if run.first_offset == 0:
            raise OSError("the ring is gone")
        published.append(run.first_offset)
        return True

    publisher = Publisher(publish, 1 << 20)
    with caplog.at_level(logging.ERROR, logger="gateway.cache.run_publisher"):
        publisher.submit(SEGMENT, [_run(0, 10), _run(1, 10)])
        assert publisher.wait_idle(30)
    assert published == [1] and "publishing a run" in caplog.text
    assert publisher.pending == 0
