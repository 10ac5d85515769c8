"""Verified runs: batches framed and CRC-checked once, when their bytes enter the process.

A *run* is consecutive whole batches of one segment in one buffer, with the table a warm answer
needs: where each batch ends and which offsets it holds (``array('q')``, 8 bytes a column per
batch). The framer proved what the segment metadata promises about them (offsets contiguous
inside the run, leader epochs, the index entry a read started from, the segment's end at its
``endOffset``) and every batch's CRC-32C was checked before the run was kept. From then on an
answer is a lookup in that table (two bisections) and slices of the run's memory: no batch is
walked or checked again (``../shared/design.md``, "Verified once, served from memory").

:class:`VerifiedRuns` is the process's byte-bounded LRU of runs, one for every reader of the
process (HTTP, the Kafka listener). A run's charge is its buffer, or the buffer it is a view of
(so memory kept alive by a view is counted), plus its table. Keys are (segment uuid, first
offset); a per-segment sorted list of first offsets finds the run that holds an offset. Runs
of one segment may overlap (two readers that began at different index entries): any of them
answers with the same verified bytes. Where two runs meet, the one after must start one past
the one before (:meth:`VerifiedRun.check_follows`): contiguity across runs is checked per
answer, one comparison per run.
"""

from __future__ import annotations

import asyncio
import bisect
import uuid
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cachetools import Cache

from gateway.errors import CorruptRecordError
from gateway.kafka.batch import RecordBatch
from gateway.lru import ByteLRU

RunKey = tuple[uuid.UUID, int, int]  # (segment, first offset, RUN): never a unit's key
RUN = 0
RUN_KEY_LEN = 3  # a unit's key has 2 parts
OVERHEAD = 512  # the run object, its arrays' headers, the LRU's entry
_COPY_SLACK = 64 << 10  # a view pinning more than this beyond itself is copied out


@dataclass(frozen=True, slots=True, eq=False)
class VerifiedRun:
    """``data`` holds whole batches, each framed and CRC-checked; batch ``i`` is
    ``data[start(i):ends[i]]`` and holds offsets ``bases[i]..lasts[i]``; ``position`` is the
    segment position of ``data[0]``."""

    position: int
    data: memoryview
    ends: array[int]
    bases: array[int]
    lasts: array[int]
    charge: int

    @classmethod
    def of(cls, buffer: memoryview, base: int, batches: Sequence[RecordBatch]) -> VerifiedRun:
        """The run of ``batches`` (consecutive, framed from ``buffer`` whose first byte is at
        segment position ``base``; their CRCs already checked)."""
        first, last = batches[0], batches[-1]
        lo = first.position - base
        data = buffer[lo : last.position + last.size_in_bytes - base]
        owner = data.obj
        pinned = len(owner) if isinstance(owner, bytes | bytearray) else len(data)
        if pinned > len(data) + _COPY_SLACK:  # do not keep a large chunk alive for a slice
            data, pinned = memoryview(bytes(data)), len(data)
        start = first.position
        ends = array("q", [b.position + b.size_in_bytes - start for b in batches])
        bases = array("q", [b.base_offset for b in batches])
        lasts = array("q", [b.last_offset for b in batches])
        return cls(start, data, ends, bases, lasts, pinned + 24 * len(batches) + OVERHEAD)

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def first_offset(self) -> int:
        return self.bases[0]

    @property
    def last_offset(self) -> int:
        return self.lasts[-1]

    @property
    def end_position(self) -> int:
        return self.position + len(self.data)

    def start(self, i: int) -> int:
        """Where batch ``i`` begins in :attr:`data`."""
        return self.ends[i - 1] if i else 0

    def index_of(self, offset: int) -> int:
        """The first batch whose last offset is at or after ``offset`` (``len(self)``: none)."""
        return bisect.bisect_left(self.lasts, offset)

    def fit(self, i: int, room: int) -> int:
        """One past the last batch from ``i`` on that ends within ``room`` bytes of batch
        ``i``'s start (``i``: not even batch ``i`` fits)."""
        return max(bisect.bisect_right(self.ends, self.start(i) + room), i)

    def check_follows(self, offset: int, i: int, key: str) -> None:
        """Batch ``i`` continues a read whose last batch ended at ``offset - 1``: it must start
        at ``offset`` (runs framed apart meet here; inside a run the framer checked it)."""
        if self.bases[i] != offset:
            raise CorruptRecordError(
                f"{key}: record batch at byte {self.position + self.start(i)} has offsets "
                f"{self.bases[i]}..{self.lasts[i]}; the previous batch ended at {offset - 1} "
                "(offsets in a segment are contiguous)"
            )


@dataclass(frozen=True, slots=True)
class VerifiedRunStats:
    hits: int
    misses: int
    entries: int
    bytes_held: int
    max_bytes: int
    evictions: int


class RunShare(Protocol):
    """Runs shared with other processes (:class:`~gateway.cache.shared_runs.SharedRunArena`)."""

    def holds(self, segment: uuid.UUID, offset: int, *, counting: bool = False) -> bool: ...

    def find(self, segment: uuid.UUID, offset: int) -> VerifiedRun | None: ...

    def submit(self, segment: uuid.UUID, runs: Sequence[VerifiedRun]) -> None: ...


def _weight(entry: bytes | VerifiedRun) -> int:
    return entry.charge if isinstance(entry, VerifiedRun) else len(entry)


class CacheMemory(ByteLRU[Any, Any]):
    """The chunk cache's one memory budget: the units a read loads (blocks, decoded chunks;
    keyed ``(segment, unit id)``) and the verified runs made of them (keyed
    :data:`RunKey`) in one LRU, so that neither starves the other: read-ahead units are
    recent, runs no reader comes back to age out, whatever the mix."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max(max_bytes, 1), _weight)
        self.on_run_evicted: Callable[[RunKey], None] | None = None

    def popitem(self) -> tuple[Any, Any]:
        key, entry = super().popitem()
        if len(key) == RUN_KEY_LEN and self.on_run_evicted is not None:
            self.on_run_evicted(key)
        return key, entry


class VerifiedRuns:
    """The process's verified runs, kept in ``memory`` (shared with the loaded units), within
    its budget; none is kept without one."""

    def __init__(self, memory: CacheMemory | None = None, shared: RunShare | None = None) -> None:
        """``shared``: the runs of the server's other workers
        (:mod:`gateway.cache.shared_runs`), looked in on a miss, and where the runs added here
        are published."""
        self._keeps = memory is not None
        self.shared = shared
        self._lru = memory if memory is not None else CacheMemory(1)
        self._lru.on_run_evicted = self._unindex
        self._firsts: dict[uuid.UUID, list[int]] = {}
        self._hits = self._misses = 0

    @property
    def max_bytes(self) -> int:
        """The budget of the memory the runs are kept in (0: none is kept)."""
        return int(self._lru.maxsize) if self._keeps else 0

    def stats(self) -> VerifiedRunStats:
        """Hits and misses of :meth:`find`; the entries, bytes and evictions of the memory
        (shared with the loaded units when it is)."""
        return VerifiedRunStats(
            self._hits,
            self._misses,
            len(self._lru),
            int(self._lru.currsize),
            self.max_bytes,
            self._lru.evictions,
        )

    def find(self, segment: uuid.UUID, offset: int) -> VerifiedRun | None:
        """A run of ``segment`` this process holds that holds ``offset`` (its first batch
        starts at or before it, its last ends at or after it)."""
        key = self._key(segment, offset)
        if key is None:
            self._misses += 1
            return None
        self._hits += 1
        used: VerifiedRun = self._lru[key]  # the use
        return used

    async def lookup(self, segment: uuid.UUID, offset: int) -> VerifiedRun | None:
        """:meth:`find`, else a copy of a run the other workers shared (taken in a thread: the
        copy releases the GIL), kept here from then on."""
        run = self.find(segment, offset)
        if (
            run is not None
            or self.shared is None
            or not self.shared.holds(segment, offset, counting=True)
        ):
            return run
        copied = await asyncio.to_thread(self.shared.find, segment, offset)
        if copied is not None:
            self.add(segment, copied)
        return copied

    def holds(self, segment: uuid.UUID, offset: int) -> bool:
        """Whether a run here or in the other workers' share holds ``offset``; no copy, and
        no use counted."""
        if self._key(segment, offset) is not None:
            return True
        return self.shared is not None and self.shared.holds(segment, offset)

    def _key(self, segment: uuid.UUID, offset: int) -> RunKey | None:
        firsts = self._firsts.get(segment)
        if firsts:
            i = bisect.bisect_right(firsts, offset) - 1
            for first in firsts[max(i - 1, 0) : i + 1][::-1]:  # the nearest two
                key = (segment, first, RUN)
                if key not in self._lru:
                    continue
                run: VerifiedRun = Cache.__getitem__(self._lru, key)  # a look, not a use
                if run.last_offset >= offset:
                    return key
        return None

    def share(self, segment: uuid.UUID, runs: Sequence[VerifiedRun]) -> None:
        """Publish ``runs``, just verified here, to the other workers (in the background: the
        read does not wait, :mod:`gateway.cache.run_publisher`)."""
        if self.shared is not None and runs:
            self.shared.submit(segment, runs)

    def add(self, segment: uuid.UUID, run: VerifiedRun) -> None:
        """Keep ``run`` (unless it is larger than the budget, or a held run of the same first
        offset reaches as far); :meth:`share` publishes it."""
        if run.charge > self.max_bytes:
            return
        key = (segment, run.first_offset, RUN)
        held = self._lru.get(key)
        if held is not None and held.last_offset >= run.last_offset:
            return
        self._lru[key] = run  # may evict others, never this one (it fits the budget)
        if held is None:
            bisect.insort(self._firsts.setdefault(segment, []), run.first_offset)

    def drop(self, segment: uuid.UUID) -> int:
        """Forget every run of ``segment`` (it vanished); how many."""
        firsts = self._firsts.pop(segment, [])
        for first in firsts:
            self._lru.pop((segment, first, RUN), None)
        return len(firsts)

    def _unindex(self, key: RunKey) -> None:
        segment, first, _ = key
        firsts = self._firsts.get(segment)
        if firsts is None:
            return
        i = bisect.bisect_left(firsts, first)
        if i < len(firsts) and firsts[i] == first:
            del firsts[i]
        if not firsts:
            del self._firsts[segment]


__all__ = [
    "OVERHEAD",
    "RUN",
    "CacheMemory",
    "RunKey",
    "RunShare",
    "VerifiedRun",
    "VerifiedRunStats",
    "VerifiedRuns",
]
