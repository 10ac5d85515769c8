"""Runs published to the workers' shared ring in the background, at the lowest CPU priority.

A cold read waited for its runs to be copied into the ring
(:meth:`~gateway.cache.shared_runs.SharedRunArena.publish`) before it answered: the copy and the
first touch of the ring's pages (shared memory, faulted in page by page) were the largest item
of a cold read's CPU (issue 30: ~17 % of the server's samples over 100 concurrent 1 MiB reads
through the slow-S3 stand-in). The answer does not need the copy: a sibling that misses reads
the bucket, as it does for any run not shared. So a read hands its runs to one thread per
process, which publishes them in order at nice 19 (on a busy machine the answers go first), and
answers at once. At most ``max_pending`` bytes of runs wait; a run beyond that is not shared
(counted in :attr:`Publisher.dropped`), so a burst holds no more memory than that for sharing.

Nice 19 against nice 0, measured (three runs each of that scenario): p99 261-282 ms against
286-331. The thread holds the GIL only between its copies (numpy releases it for them), for
microseconds; preempted in such a moment by other processes' work, it would hold up this
worker's event loop until the scheduler runs it again (a scheduling period, milliseconds).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable, Sequence

from gateway.cache.verified import VerifiedRun

log = logging.getLogger(__name__)

LOWEST_PRIORITY = 19

Publish = Callable[[uuid.UUID, VerifiedRun], bool]


class Publisher:
    """One process's queue of runs to publish, and the thread that publishes them."""

    def __init__(self, publish: Publish, max_pending: int) -> None:
        self._publish = publish
        self.max_pending = max_pending
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when nothing is pending
        self._queue: queue.SimpleQueue[tuple[uuid.UUID, VerifiedRun]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.pending = self.pending_bytes = self.dropped = 0

    def forked(self) -> None:
        """In a process just forked (the arena's :meth:`forked`, which every worker calls
        before it serves): a queue and thread of its own (the parent's are not)."""
        self._reset()

    def submit(self, segment: uuid.UUID, runs: Sequence[VerifiedRun]) -> None:
        """Queue ``runs`` of ``segment`` to be published; never waits."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="shared-runs-publisher", daemon=True
                )
                self._thread.start()
            for run in runs:
                size = len(run.data)
                if self.pending_bytes + size > self.max_pending:
                    self.dropped += 1
                    continue
                self.pending += 1
                self.pending_bytes += size
                self._queue.put((segment, run))

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every submitted run is published (or dropped by the arena); False when
        ``timeout_s`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self.pending == 0, timeout_s)

    def _run(self) -> None:
        # This thread only (Linux: a thread id names one thread); elsewhere, normal priority.
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
        while True:
            segment, run = self._queue.get()
            try:
                self._publish(segment, run)
            except Exception:  # sharing is an optimisation: never the reader's failure
                log.exception("publishing a run of segment %s failed", segment)
            finally:
                with self._lock:
                    self.pending -= 1
                    self.pending_bytes -= len(run.data)
                    if not self.pending:
                        self._idle.notify_all()
