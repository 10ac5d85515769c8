"""One progress line of a Spark job: the running stages' tasks done, the rate and an ETA.

Spark's own console bar is off in the sessions the commands start (:mod:`gateway.spark.logs`);
this line takes its place, on stderr: refreshed in place on a terminal (every 0.5 s), a new
line every 5 s otherwise (a log). Tasks are the unit Spark knows while the job runs (a task
reads one split of a segment); the summary at the end gives records and bytes.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


class Progress:
    """A daemon thread printing the running stages' task counts until stopped."""

    def __init__(self, spark: Any, label: str, out: TextIO | None = None) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._label = label
        self._out = out if out is not None else sys.stderr  # the stream of now, not of import
        self._tty = self._out.isatty()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._tty:
            self._out.write("\n")
            self._out.flush()

    def line(self) -> str | None:
        stages = [self._tracker.getStageInfo(s) for s in self._tracker.getActiveStageIds()]
        known = [s for s in stages if s is not None]
        if not known:
            return None
        done = sum(s.numCompletedTasks for s in known)
        total = sum(s.numTasks for s in known)
        running = sum(s.numActiveTasks for s in known)
        elapsed = time.monotonic() - self._started
        return progress_text(self._label, done, total, running, elapsed)

    def _run(self) -> None:
        every = 0.5 if self._tty else 5.0
        while not self._stop.wait(every):
            text = self.line()
            if text is None:
                continue
            self._out.write(f"\r{text}\x1b[K" if self._tty else f"{text}\n")
            self._out.flush()


def progress_text(label: str, done: int, total: int, running: int, elapsed: float) -> str:
    """``label: 12/40 tasks done, 2 running, 0.8 tasks/s, 14 s, ETA 35 s``."""
    text = f"{label}: {done}/{total} tasks done, {running} running"
    rate = done / elapsed if elapsed > 0 else 0.0
    text += f", {rate:.1f} tasks/s, {elapsed:.0f} s"
    if done and total > done:
        text += f", ETA {(total - done) / rate:.0f} s"
    return text
