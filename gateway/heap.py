"""A long-lived task process's heap, kept out of the cycle collector's way.

PySpark's worker daemon runs :func:`gc.collect` after every task a reused worker runs
(``pyspark/daemon.py``). A worker that has read a split holds what reading loaded and keeps for
the rest of its life: the compiled record loops (numba and llvmlite, their types and
dispatchers), Arrow, the key and schema decoders. That is about 155,000 objects the collector
tracks, and every full collection walks all of them: about 60 ms on the machines of
``docs/benchmarks.md``, longer than a small split takes to read. In the real-Kafka checks' batch
reads (227 tasks), those collections took 13.1 CPU-seconds, of the ~16-18 the workers used.

:func:`task_started`, called as each Spark task of this package begins (a split read, written,
or a scrub partition audited), moves what the process holds to the collector's permanent
generation (:func:`gc.freeze`) once, as its second task begins: by then the first task has
loaded everything a read loads, and, being over, has left nothing of its own behind (a
collection runs first). What the process allocates later is collected as before; the frozen
objects are freed by reference counting as ever, only a cycle among them is never collected
(the modules, functions and types frozen live as long as the process anyway).
"""

from __future__ import annotations

import gc
import itertools
from typing import Final

_STARTS: Final = itertools.count()  # next() is atomic: tasks of one process may run in threads
_FREEZE_AT: Final = 1  # the second task


def task_started() -> None:
    """Count a task of this process; as the second begins, collect, then freeze the heap."""
    if next(_STARTS) == _FREEZE_AT:
        gc.collect()
        gc.freeze()
