"""Framing a segment window in place: batches as views of the bytes read, never copied.

:class:`SegmentFramer` frames the bytes it is fed in place, except when a batch began in the
previous window: then it copies what it holds plus everything fed after it. :func:`frame_window`
feeds only the rest of that one batch first (one batch copied), then the rest of the window
as a view, so every later batch is a slice of the window's own buffer and consecutive batches
form one :class:`Run` (one buffer, one send for the raw response).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.kafka.batch import RecordBatch
from gateway.read.framing import SegmentFramer


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
