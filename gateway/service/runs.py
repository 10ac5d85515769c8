"""Framing a segment window in place: batches as views of the bytes read, never copied.

:class:`SegmentFramer` frames the bytes it is fed in place, except when a batch began in the
previous window: then it copies what it holds plus everything fed after it. :func:`frame_window`
feeds only the rest of that one batch first (one batch copied), then the rest of the window
as a view, so every later batch is a slice of the window's own buffer and consecutive batches
form one :class:`Run` (one buffer, one send for the raw response).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.cache.verified import VerifiedRun, VerifiedRuns
from gateway.kafka.batch import LOG_OVERHEAD, PEEK, RecordBatch
from gateway.metadata.model import RemoteLogSegmentMetadata
from gateway.read.framing import SegmentBounds, SegmentFramer
from gateway.service.types import FetchedBatches


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive whole batches that are slices of one buffer; ``base`` is the segment
    position of ``buffer[0]``."""

    buffer: memoryview
    base: int
    batches: list[RecordBatch]


@dataclass(slots=True)
class Window:
    """The batches one read completed, as runs; ``boundary`` is the segment position where the
    framer's unframed bytes begin (the end of the last whole batch)."""

    runs: list[Run]
    boundary: int


def frame_window(
    framer: SegmentFramer, data: bytes | bytearray | memoryview, boundary: int
) -> Window:
    """Feed ``data`` (the segment's bytes from ``framer.cursor``) to ``framer``. ``boundary``:
    where the batch the framer holds a beginning of starts (``framer.cursor`` when it holds
    none; a new framer holds none)."""
    view = memoryview(data)
    runs: list[Run] = []
    taken = 0
    while framer.cursor > boundary and taken < len(view):  # finish the batch begun before
        step = min(framer.need, len(view) - taken)
        for batch in framer.feed(view[taken : taken + step]):
            runs.append(Run(batch.view, batch.position, [batch]))
            boundary = batch.position + batch.size_in_bytes
        taken += step
    rest = view[taken:] if taken else view
    base = framer.cursor
    batches = framer.feed(rest)
    if batches:
        runs.append(Run(rest, base, batches))
        last = batches[-1]
        boundary = last.position + last.size_in_bytes
    return Window(runs, boundary)


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """Whole batches read from one segment, verified: ``parts`` are views of verified runs (one
    per run), never copied into one; ``positions`` says where each part begins in the
    segment."""

    meta: RemoteLogSegmentMetadata
    parts: tuple[FetchedBatches, ...]
    positions: tuple[int, ...]

    @property
    def position(self) -> int:
        """Byte position of the first batch in the segment."""
        return self.positions[0]

    @property
    def end_position(self) -> int:
        return self.positions[-1] + len(self.parts[-1].data)

    @property
    def first_offset(self) -> int:
        return self.parts[0].first_offset

    @property
    def last_offset(self) -> int:
        return self.parts[-1].last_offset

    @property
    def batches(self) -> tuple[RecordBatch, ...]:
        """The batches of :attr:`parts` (verified when they were read: only their headers are
        parsed here; for the paths that look at batches one by one, e.g. read_committed)."""
        out: list[RecordBatch] = []
        for part, position in zip(self.parts, self.positions, strict=True):
            view = memoryview(part.data)
            at = 0
            while at < len(view):
                end = at + LOG_OVERHEAD + PEEK.unpack_from(view, at)[1]
                out.append(RecordBatch(view[at:end], position + at))
                at = end
        return tuple(out)


WindowReader = Callable[[SegmentFramer, int, int], Awaitable[Window]]
"""Feeds the next window to a framer: ``(framer, boundary, size)``; every batch it completes
has had its CRC checked (``Fetcher.window(..., verify=True)``)."""


class ColdRead:
    """One segment read from a batch boundary: each window framed and verified, its runs kept
    in ``held`` and queued for the read."""

    __slots__ = ("boundary", "framer", "held", "meta", "queued", "read")

    def __init__(
        self,
        meta: RemoteLogSegmentMetadata,
        framer: SegmentFramer,
        held: VerifiedRuns,
        read: WindowReader,
    ) -> None:
        self.meta = meta
        self.framer = framer
        self.held = held
        self.read = read
        self.boundary = framer.cursor
        self.queued: deque[VerifiedRun] = deque()

    def take(self, offset: int) -> VerifiedRun | None:
        """The queued run holding ``offset`` (the runs before it are done with)."""
        while self.queued and self.queued[0].last_offset < offset:
            self.queued.popleft()
        return self.queued[0] if self.queued else None

    async def load(self, offset: int, size: int) -> VerifiedRun | None:
        """Read the next window (``size`` bytes at least) and queue its runs; the one holding
        ``offset``, if the window completed it. A window that reaches the segment's last
        offset with bytes after it reads on to the end, where the end checks fail."""
        meta, framer = self.meta, self.framer
        while True:
            framed = await self.read(framer, self.boundary, size)
            self.boundary = framed.boundary
            runs = [VerifiedRun.of(run.buffer, run.base, run.batches) for run in framed.runs]
            for verified in runs:
                self.held.add(meta.segment_id.id, verified)
            self.queued.extend(runs)
            self.held.share(meta.segment_id.id, runs)
            if framer.last_offset != meta.end_offset or framer.at_end:
                return self.take(offset)


def segment_bounds(meta: RemoteLogSegmentMetadata, key: str) -> SegmentBounds:
    """What the segment's metadata promises about its bytes, for the framer (``key``: its
    object, for messages)."""
    return SegmentBounds(
        key,
        meta.start_offset,
        meta.end_offset,
        meta.segment_size_in_bytes,
        tuple(sorted(meta.segment_leader_epochs, key=lambda e: e[1])),
    )


def to_batches(reads: list[SegmentRead]) -> tuple[FetchedBatches, ...]:
    """The parts of ``reads``, in order: the answer's batches (one view per run piece)."""
    return tuple(part for r in reads for part in r.parts)
