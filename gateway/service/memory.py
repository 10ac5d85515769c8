"""The C heap's freed memory given back to the system (glibc; elsewhere nothing is done).

Measured under load (docs/benchmarks.md, "Load test (issue 15)"): with glibc's defaults, 200
NDJSON streams left 3.0 GiB resident after they had all ended, which ``malloc_trim(0)`` brought
down to 322 MiB (the idle process, the caches and ~100 MiB more): freed, not live. glibc
raises its mmap threshold (up to 32 MiB) each time a block above it is freed, after which the
megabyte-sized buffers of a response (pages, rendered lines, the server's copies of them) come
from the arenas of the ~40 threads that render and read, and a freed block inside an arena
stays resident. The levers:

* :meth:`Glibc.fix_mmap_threshold` (``mallopt(M_MMAP_THRESHOLD, n)``, once at start, when
  the ``malloc_mmap_threshold`` setting asks): a block of at least ``n`` bytes is always its
  own mapping, unmapped when freed, so the resident size follows the bytes in flight. It costs
  CPU (each such block is mapped, faulted in page by page and unmapped, and a fixed threshold
  also fixes glibc's trim threshold, so the heap's top is given back and faulted in again):
  at 256 KiB, 200 streams served ~100-115 MB of NDJSON per server CPU-second against ~170-210
  without (peak RSS ~400 MiB against ~650-700 at 16 MiB in flight), and the HTTP benchmark's
  JSON pages fell from ~750-800 k to ~370-490 k records per CPU-second. Off by default: the
  trimmer below bounds what the heap keeps.
* :meth:`Glibc.hold_freed` (the default, ``malloc_mmap_threshold`` 0): both thresholds fixed
  at start, blocks under 8 MiB from the heap and its free top kept up to 32 MiB. Sliding, they
  rise only as far as the largest block freed so far, and a page's few-MiB buffers were still
  mapped, or the heap's top given back, and faulted in again: ~120-470 minor faults per 1 MiB
  JSON page (issue 30, ``bench_http``'s warm JSON), ~30-50 held. ``make load`` (Mix, 200
  users, 2 workers, one run each): server CPU 37.5 CPU-s sliding, 32.1 held at 8/32 MiB,
  29.6 at glibc's ceiling (32/64 MiB); peak summed PSS 765, 799 and 867 MiB; 5 s after 491,
  511 and 571. ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment
  leave glibc as it read them.
* :func:`limit_arenas` (``mallopt(M_ARENA_MAX, n)``, the ``malloc_arenas`` setting, 2 by
  default, before ``serve`` starts a thread): glibc's default is 8 arenas per core, one made
  whenever threads contend, and each keeps what it freed. Measured (issue 30, ``make load``,
  Mix, 200 users, 2 workers): 5 s after the load, 701-730 MiB summed PSS with the default
  against 502-518 with 2 (the workers' private memory 184-210 MiB each against 100-109), for
  the same server CPU (50-55 CPU-s for the same requests either way).
* :class:`Trimmer`: ``malloc_trim(0)`` in a worker thread (it holds each arena's lock in turn,
  never the GIL), at most every ``interval_s``, once ``min_released`` bytes of responses were
  given back to the byte budget since the last trim or once the budget has drained: what is
  left in the arenas.

And the collector: :func:`collector_settled` moves what is alive once the catalog is loaded
(the code, the catalog, the store client's models: ~230 k objects) out of the collector's
sight (``gc.freeze``). Before it, each full collection walked them all, 100-160 ms with the
event loop stopped, and the first burst of cold reads after a start set off one or two
(docs/benchmarks.md, issue 30).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Final

from gateway.service.admission import ByteBudget
from gateway.service.protocol import Service

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD: Final = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD: Final = -3
M_ARENA_MAX: Final = -8
MMAP_THRESHOLD: Final = 256 * 1024
"""Blocks of at least this size are mapped on their own (glibc's initial default is 128 KiB;
it then grows with every freed block above it, which fixing it turns off)."""
HELD_MMAP_THRESHOLD: Final = 8 * 1024 * 1024
"""Above a page's buffers (a 1 MiB page of ~200 B records: ~2 MiB of JSON text), a quarter of
what glibc's sliding threshold may reach (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on 64 bits)."""
HELD_TRIM_THRESHOLD: Final = 4 * HELD_MMAP_THRESHOLD
"""The heap's free top kept up to this (glibc keeps twice its threshold beside a sliding one)."""
GLIBC_ENV: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
TRIM_INTERVAL_S: Final = 2.0
TRIM_AFTER_BYTES: Final = 64 * 1024 * 1024


class Glibc:
    """``malloc_trim`` and ``mallopt`` of the process's C library, when it is glibc."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._trim: Callable[[int], int] = lib.malloc_trim
        self._mallopt: Callable[[int, int], int] = lib.mallopt

    @classmethod
    def load(cls) -> Glibc | None:
        """The C library of this process, or None when it has no ``malloc_trim`` (not glibc)."""
        try:
            lib = ctypes.CDLL(None)
        except OSError:
            return None
        if not all(hasattr(lib, name) for name in ("malloc_trim", "mallopt")):
            return None
        return cls(lib)

    def trim(self) -> bool:
        """``malloc_trim(0)``: True when some memory was given back. Blocking: not on the loop."""
        return bool(self._trim(0))

    def fix_mmap_threshold(self, nbytes: int = MMAP_THRESHOLD) -> bool:
        """Blocks of ``nbytes`` or more mapped on their own, for good; True when glibc took it."""
        return self._mallopt(M_MMAP_THRESHOLD, nbytes) == 1

    def hold_freed(self) -> bool:
        """Both thresholds fixed: blocks under :data:`HELD_MMAP_THRESHOLD` from the heap, its
        free top given back past :data:`HELD_TRIM_THRESHOLD`; True when glibc took them."""
        return (
            self._mallopt(M_MMAP_THRESHOLD, HELD_MMAP_THRESHOLD) == 1
            and self._mallopt(M_TRIM_THRESHOLD, HELD_TRIM_THRESHOLD) == 1
        )

    def limit_arenas(self, arenas: int) -> bool:
        """At most ``arenas`` heap arenas from now on; True when glibc took it."""
        return self._mallopt(M_ARENA_MAX, arenas) == 1


def limit_arenas(arenas: int, glibc: Glibc | None = None) -> bool:
    """``mallopt(M_ARENA_MAX, arenas)`` once at start, before the threads (an arena a thread
    made stays); nothing with ``arenas`` 0, without glibc, or when ``MALLOC_ARENA_MAX`` is in
    the environment (glibc read it itself). True when the limit was set."""
    if arenas <= 0 or "MALLOC_ARENA_MAX" in os.environ:
        return False
    glibc = glibc if glibc is not None else Glibc.load()
    if glibc is None:
        return False
    if not glibc.limit_arenas(arenas):
        log.warning("glibc did not take M_ARENA_MAX=%d", arenas)
        return False
    return True


@dataclass(slots=True)
class TrimStats:
    """The trims done, those that gave memory back, the wall-clock seconds they took."""

    trims: int = 0
    gave_back: int = 0
    seconds: float = 0.0
    longest_s: float = 0.0


class Trimmer:
    """Trims the heap after responses gave back ``min_released`` bytes to ``budget``."""

    def __init__(
        self,
        budget: ByteBudget,
        glibc: Glibc | None,
        *,
        interval_s: float = TRIM_INTERVAL_S,
        min_released: int = TRIM_AFTER_BYTES,
    ) -> None:
        self.budget, self.glibc = budget, glibc
        self.interval_s, self.min_released = interval_s, min_released
        self.stats = TrimStats()
        self._mark = budget.stats.released_bytes

    def due(self) -> bool:
        """After ``min_released`` bytes given back since the last trim, or any once the
        budget has drained (nothing in flight: what the load left behind)."""
        released = self.budget.stats.released_bytes - self._mark
        drained = self.budget.in_use == 0 and released > 0
        return self.glibc is not None and (released >= self.min_released or drained)

    async def trim_if_due(self) -> bool:
        """One ``malloc_trim(0)`` in a worker thread when :meth:`due`; True when it ran."""
        if self.glibc is None or not self.due():
            return False
        self._mark = self.budget.stats.released_bytes
        self.stats.trims += 1
        started = time.perf_counter()
        if await asyncio.to_thread(self.glibc.trim):
            self.stats.gave_back += 1
        took = time.perf_counter() - started
        self.stats.seconds += took
        self.stats.longest_s = max(self.stats.longest_s, took)
        return True

    async def run(self) -> None:
        """:meth:`trim_if_due` every ``interval_s``, until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.trim_if_due()


def _set_thresholds(glibc: Glibc, mmap_threshold: int | None) -> None:
    """See :func:`heap_returned`."""
    if mmap_threshold is not None:
        taken, what = glibc.fix_mmap_threshold(mmap_threshold), f"M_MMAP_THRESHOLD={mmap_threshold}"
    elif any(name in os.environ for name in GLIBC_ENV):
        return  # glibc read its thresholds from there
    else:
        taken, what = glibc.hold_freed(), "M_MMAP_THRESHOLD and M_TRIM_THRESHOLD"
    if not taken:
        log.warning("glibc did not take %s", what)


@asynccontextmanager
async def heap_returned(
    budget: ByteBudget,
    glibc: Glibc | None = None,
    *,
    mmap_threshold: int | None = MMAP_THRESHOLD,
    interval_s: float = TRIM_INTERVAL_S,
    min_released: int = TRIM_AFTER_BYTES,
) -> AsyncIterator[Trimmer]:
    """Fix the mmap threshold (None: :meth:`Glibc.hold_freed`, unless the environment set
    glibc's thresholds) and run a :class:`Trimmer` on ``budget`` for the block (the app's
    lifespan); ``glibc`` defaults to :meth:`Glibc.load`."""
    glibc = glibc if glibc is not None else Glibc.load()
    if glibc is not None:
        _set_thresholds(glibc, mmap_threshold)
    trims = Trimmer(budget, glibc, interval_s=interval_s, min_released=min_released)
    task = asyncio.create_task(trims.run(), name="heap-trimmer")
    try:
        yield trims
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        s = trims.stats
        log.info(
            "heap trims: %d (%d gave memory back), %.3f s in all, longest %.3f s",
            *(s.trims, s.gave_back, s.seconds, s.longest_s),
        )


async def collector_settled(service: Service) -> None:
    """Once ``service`` is ready, collect and freeze what is alive (see the module docstring):
    what lives from then on is all later collections walk."""
    await service.wait_ready()
    gc.collect()
    gc.freeze()
    log.debug("collector settled: %d objects frozen", gc.get_freeze_count())
