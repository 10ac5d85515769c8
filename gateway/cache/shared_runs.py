"""Verified runs shared by the worker processes of one server (``serve --workers N``).

Each worker is a whole gateway with its own caches; without this, two workers that serve the
same history each read, frame and CRC-check it, and each holds it in half the budget (issue 30).
The :class:`SharedRunArena` is one ring of memory that the supervisor maps before it forks the
workers (anonymous, ``MAP_SHARED``: the workers' mappings are the same pages, counted once in
their summed PSS). A worker that verified a run *publishes* it there (its bytes and its table);
a worker whose own runs (:class:`~gateway.cache.verified.VerifiedRuns`) miss looks here before
it reads the bucket, and takes a *private copy* of the run it finds, which it then keeps and
serves like a run it verified itself.

The ring is written in order (FIFO: a writer reserves the bytes after the last reservation and
wraps at the end), so a run is overwritten once ``size`` bytes were reserved after it. Whether
that happened is one comparison with the ring's *head* (the bytes ever reserved), read after the
copy: a copy that a writer may have overwritten while it was taken is thrown away (a miss), so a
torn run is never served (a seqlock: writers move the head before they write). That check alone
would miss a writer that reserved its bytes, then stalled (a loaded machine) while the ring went
round once: its late bytes would land in a newer run the head says is intact. So every write in
flight holds a *slot* with where it began, and a reservation that would reach it a ring later is
refused (that run is not shared) until the write is announced and its slot freed (or its
process is found gone: a worker killed while it wrote). Runs are announced
in a *journal* (fixed-size entries, also a ring) only once their bytes are written; each worker
keeps its own index of the journal's entries, read on a miss. Only the head and the journal are
written under the lock (a semaphore in shared memory, taken for microseconds; it is also the
memory barrier the copy's check needs on weakly ordered CPUs). A worker that cannot take the lock
within :data:`LOCK_TIMEOUT_S` (a sibling killed while it held it) stops sharing, with an error
logged: its own runs still serve.

Bytes in the ring were framed and CRC-checked by the worker that published them, before it did,
so a copy is not walked again ("Verified once, served from memory").

Copies in and out of the ring are numpy assignments, which release the GIL: callers on an event
loop make them in a thread (:meth:`~gateway.cache.verified.VerifiedRuns.lookup`,
:meth:`~gateway.cache.verified.VerifiedRuns.share`), and this process's index of the journal is
guarded for that by a thread lock.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import multiprocessing
import os
import struct
import threading
import uuid
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from gateway.cache.run_publisher import Publisher
from gateway.cache.verified import OVERHEAD, VerifiedRun

log = logging.getLogger(__name__)

_HEAD: Final = struct.Struct("<qq")  # bytes ever reserved, journal entries ever written
_ENTRY: Final = struct.Struct("<16sqqqqqq")  # segment, first, last, position, at, length, batches
_TABLE: Final = 24  # bytes of table per batch: end, base, last offset
_SLOT: Final = struct.Struct("<qq")  # a write in flight: where it began (or -1), its pid
WRITERS: Final = 64  # writes in flight at once, all processes and threads; more are not shared
_SLOTS_AT: Final = _HEAD.size
_JOURNAL_AT: Final = _SLOTS_AT + WRITERS * _SLOT.size
LOCK_TIMEOUT_S: Final = 0.5
MAX_RUN_SHARE: Final = 8  # a run larger than 1/8 of the ring is not shared
ENTRY_BYTES: Final = 4 << 10  # journal entries: one per 4 KiB of ring


@dataclass(frozen=True, slots=True)
class _Entry:
    at: int  # where its bytes begin, counted in bytes ever reserved
    length: int  # data bytes (the table follows)
    position: int
    last: int
    batches: int


@dataclass(frozen=True, slots=True)
class SharedRunStats:
    hits: int
    misses: int
    torn: int
    published: int
    bytes_published: int
    max_bytes: int
    dropped: int = 0  # runs not shared: more were waiting to be published than allowed
    pending: int = 0  # runs waiting to be published


class SharedRunArena:
    """The ring and journal every worker maps (made before the fork), and this process's view
    of them: its journal cursor, its index of the announced runs, its counters."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.capacity = max(1024, size // ENTRY_BYTES)
        self._ring = mmap.mmap(-1, size)
        self._meta = mmap.mmap(-1, _JOURNAL_AT + self.capacity * _ENTRY.size)
        for i in range(WRITERS):
            _SLOT.pack_into(self._meta, _SLOTS_AT + i * _SLOT.size, -1, 0)
        self._view = np.frombuffer(self._ring, np.uint8)
        self._lock = multiprocessing.get_context("fork").Lock()
        self._local = threading.Lock()  # this process's index, between its threads
        self._seen = 0  # journal entries this process has indexed
        self._firsts: dict[uuid.UUID, list[int]] = {}
        self._entries: dict[tuple[uuid.UUID, int], _Entry] = {}
        self._broken = False
        self.hits = self.misses = self.torn = self.published = self.bytes_published = 0
        self.publisher = Publisher(self.publish, size // MAX_RUN_SHARE)

    def stats(self) -> SharedRunStats:
        p = self.publisher
        return SharedRunStats(
            self.hits,
            self.misses,
            self.torn,
            self.published,
            self.bytes_published,
            self.size,
            p.dropped,
            p.pending,
        )

    def submit(self, segment: uuid.UUID, runs: Sequence[VerifiedRun]) -> None:
        """:meth:`publish` ``runs`` in the background (:mod:`gateway.cache.run_publisher`)."""
        self.publisher.submit(segment, runs)

    def forked(self) -> None:
        """In a process just forked from the one that made the arena: start its own view (the
        index and counters it inherited describe its parent's)."""
        self._firsts, self._entries = {}, {}
        self._seen = 0
        self._broken = False
        self._local = threading.Lock()
        self.hits = self.misses = self.torn = self.published = self.bytes_published = 0
        self.publisher.forked()

    # --- publishing ---------------------------------------------------------------------------

    def publish(self, segment: uuid.UUID, run: VerifiedRun) -> bool:
        """Copy ``run`` (verified by this process) into the ring and announce it; False when
        it is not shared (too large, or sharing is off in this process)."""
        length = len(run.data)
        total = length + _TABLE * len(run)
        if self._broken or total > self.size // MAX_RUN_SHARE:
            return False
        reserved = self._reserve(total)
        if reserved is None:
            return False
        at, slot = reserved
        lo = at % self.size
        view = self._view
        view[lo : lo + length] = np.frombuffer(run.data, np.uint8)
        tables = lo + length
        for column in (run.ends, run.bases, run.lasts):
            step = 8 * len(column)
            view[tables : tables + step] = np.frombuffer(column, np.uint8)
            tables += step
        entry = _ENTRY.pack(
            segment.bytes, run.first_offset, run.last_offset, run.position, at, length, len(run)
        )
        if not self._locked():
            return False  # the slot stays taken: this process stops sharing (_locked)
        try:
            _SLOT.pack_into(self._meta, slot, -1, 0)
            head, count = self._counters()
            if head > at + self.size:  # overwritten already: writers wrapped past it
                return False
            where = _JOURNAL_AT + (count % self.capacity) * _ENTRY.size
            self._meta[where : where + _ENTRY.size] = entry
            _HEAD.pack_into(self._meta, 0, head, count + 1)
        finally:
            self._lock.release()
        self.published += 1
        self.bytes_published += length
        return True

    def _reserve(self, total: int) -> tuple[int, int] | None:
        """Where ``total`` bytes begin (counted in bytes ever reserved), contiguous in the
        ring, and the slot that holds it while they are written; the head moves past them
        before a byte is written. None when every slot is taken, or when the bytes would reach
        a write still in flight a ring later."""
        if not self._locked():
            return None
        try:
            head, count = self._counters()
            at = head
            if at % self.size + total > self.size:  # do not straddle the end: wrap
                at += self.size - at % self.size
            free, oldest = None, None
            for i in range(WRITERS):
                where = _SLOTS_AT + i * _SLOT.size
                began, pid = _SLOT.unpack_from(self._meta, where)
                in_the_way = at + total > began + self.size or free is None
                if began >= 0 and in_the_way and not _alive(pid):  # killed while it wrote
                    _SLOT.pack_into(self._meta, where, -1, 0)
                    began = -1
                if began < 0:
                    free = where if free is None else free
                elif oldest is None or began < oldest:
                    oldest = began
            if free is None or (oldest is not None and at + total > oldest + self.size):
                return None
            _SLOT.pack_into(self._meta, free, at, os.getpid())
            _HEAD.pack_into(self._meta, 0, at + total, count)
        finally:
            self._lock.release()
        return at, free

    # --- finding ------------------------------------------------------------------------------

    def holds(self, segment: uuid.UUID, offset: int, *, counting: bool = False) -> bool:
        """Whether an announced run of ``segment`` holds ``offset`` and is not overwritten yet
        (no copy: :meth:`find` may still miss, if a writer reaches it first); ``counting``:
        a miss is counted when none does (a look before :meth:`find`)."""
        held = bool(self._candidates(segment, offset))
        if counting and not held:
            self.misses += 1
        return held

    def find(self, segment: uuid.UUID, offset: int) -> VerifiedRun | None:
        """A private copy of an announced run of ``segment`` that holds ``offset``, checked
        not to have been overwritten while it was copied."""
        for first, entry in self._candidates(segment, offset):
            run = self._copy(entry)
            if run is not None:
                self.hits += 1
                return run
            self.torn += 1
            with self._local:
                if self._entries.get((segment, first)) is entry:
                    self._forget(segment, first)
        self.misses += 1
        return None

    def _candidates(self, segment: uuid.UUID, offset: int) -> list[tuple[int, _Entry]]:
        """The announced runs of ``segment`` that hold ``offset`` and are not overwritten, the
        nearest first (the overwritten ones met are forgotten)."""
        if self._broken:
            return []
        with self._local:
            head = self._catch_up()
            firsts = self._firsts.get(segment)
            if head is None or not firsts:
                return []
            i = bisect.bisect_right(firsts, offset) - 1
            found = []
            for first in firsts[max(i - 1, 0) : i + 1][::-1]:  # the nearest two
                entry = self._entries[segment, first]
                if entry.last < offset:
                    continue
                if head <= entry.at + self.size:
                    found.append((first, entry))
                else:
                    self._forget(segment, first)
            return found

    def _copy(self, entry: _Entry) -> VerifiedRun | None:
        lo = entry.at % self.size
        n = entry.batches
        data = np.empty(entry.length, np.uint8)  # not zeroed first: one pass over the bytes
        data[:] = self._view[lo : lo + entry.length]
        tables = lo + entry.length
        columns = []
        for _ in range(3):
            column = array("q")
            column.frombytes(self._ring[tables : tables + 8 * n])
            columns.append(column)
            tables += 8 * n
        if not self._locked():  # the barrier before the check
            return None
        try:
            head = self._counters()[0]
        finally:
            self._lock.release()
        if head > entry.at + self.size:
            return None
        ends, bases, lasts = columns
        charge = len(data) + _TABLE * n + OVERHEAD
        return VerifiedRun(entry.position, data.data.toreadonly(), ends, bases, lasts, charge)

    def _catch_up(self) -> int | None:
        """Index the journal's entries this process has not seen; the head (under
        ``_local``)."""
        if not self._locked():
            return None
        try:
            head, count = self._counters()
            start = max(self._seen, count - self.capacity)
            raw = [
                _ENTRY.unpack_from(self._meta, _JOURNAL_AT + (i % self.capacity) * _ENTRY.size)
                for i in range(start, count)
            ]
        finally:
            self._lock.release()
        self._seen = count
        for sid, first, last, position, at, length, batches in raw:
            self._index(uuid.UUID(bytes=sid), first, _Entry(at, length, position, last, batches))
        if len(self._entries) > 2 * self.capacity:
            self._prune(head)
        return head

    def _index(self, segment: uuid.UUID, first: int, entry: _Entry) -> None:
        held = self._entries.get((segment, first))
        if held is None:
            bisect.insort(self._firsts.setdefault(segment, []), first)
        elif held.last > entry.last:
            return
        self._entries[segment, first] = entry

    def _forget(self, segment: uuid.UUID, first: int) -> None:
        del self._entries[segment, first]
        firsts = self._firsts[segment]
        firsts.remove(first)
        if not firsts:
            del self._firsts[segment]

    def _prune(self, head: int) -> None:
        for (segment, first), entry in list(self._entries.items()):
            if head > entry.at + self.size:
                self._forget(segment, first)

    def _counters(self) -> tuple[int, int]:
        """The head and the journal's count (under the lock)."""
        head, count = _HEAD.unpack_from(self._meta, 0)
        return int(head), int(count)

    def _locked(self) -> bool:
        if self._lock.acquire(timeout=LOCK_TIMEOUT_S):
            return True
        self._broken = True
        log.error(
            "the shared run cache's lock was not released in %.1f s (a worker killed while it "
            "held it?): this worker stops sharing runs",
            LOCK_TIMEOUT_S,
        )
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_current: SharedRunArena | None = None


def set_current(arena: SharedRunArena | None) -> None:
    """The arena of this process (a worker, once, before it opens its service)."""
    global _current  # noqa: PLW0603 - one per process, like indexcache.share's
    if arena is not None:
        arena.forked()
    _current = arena


def current() -> SharedRunArena | None:
    return _current


__all__ = ["SharedRunArena", "SharedRunStats", "current", "set_current"]
