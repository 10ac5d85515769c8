"""Which remote segment holds an offset: the RLMM reads of a fetch.

:func:`held` uses point lookups and index seeks only (the log's bounds, the epoch for an
offset, the segment floor): a few µs in memory, tens of µs on SQLite with a warm page cache
(``tests/bench/bench_raw.py`` measures them), less than a thread hand-off costs, so the
service calls it on the event loop. :func:`locate` also lists the partition's segments to
explain an offset no readable segment holds (a hole, an unreadable manifest, outside the log):
that scales with the partition, so callers run it in a thread, and only when :func:`held`
found nothing.

The rule :func:`read_inline` applies, measured by ``tests/bench/bench_raw.py`` (2 cores):

* the in-memory backend (the default, no ``--state-dir``): a fetch's point reads are pure
  Python, ~100 µs for :func:`held` (the epoch lineage is rebuilt per call), and a thread gives
  them no parallelism (the GIL) while a hand-off costs ~80 µs of CPU more: inline;
* SQLite (``--state-dir``): :func:`held` takes ~235 µs with a warm page cache, above the
  ~50 µs an event-loop turn may spend on storage reads: in a thread, as before;
* either way, a writer (a bucket scan registering segments) holds the RLMM's lock for a whole
  batch of events, seconds on a large first scan: a read runs inline only when that lock is
  free at once, else in a thread, so the loop never blocks behind a writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from gateway.errors import CorruptManifestError, OffsetOutOfRangeError, RemoteGapError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicIdPartition


class Claim(Protocol):
    """What a segment whose manifest the scan could not read still tells: its start offset
    and its manifest key (``gateway.metadata.manifests.UnreadableSegment``)."""

    @property
    def start_offset(self) -> int: ...
    @property
    def key(self) -> str: ...
    @property
    def reason(self) -> str: ...


Claims = Callable[[TopicIdPartition], Sequence[Claim]]
T = TypeVar("T")


async def read_inline(rlmm: RemoteLogMetadataManager, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``, RLMM point reads: on the event loop for the in-memory backend when the
    RLMM's lock is free at once, else in a thread (see the module docstring)."""
    with rlmm.inline_reads() as inline:
        if inline:
            return fn(*args)
    return await asyncio.to_thread(fn, *args)


def resolve(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, offset: int
) -> RemoteLogSegmentMetadata | None:
    """The finished segment for ``offset``: through the epoch lineage as the broker does, else
    the first finished segment that ends at or after it (which starts after ``offset`` when
    the offset lies in a hole: the caller checks)."""
    epoch = rlmm.epoch_for_offset(tp, offset)
    if epoch is not None:
        found = rlmm.remote_log_segment_metadata(tp, epoch, offset)
        if found is not None:
            return found
    for meta in rlmm.list_remote_log_segments(tp):
        if meta.state is SegmentState.COPY_SEGMENT_FINISHED and meta.end_offset >= offset:
            return meta
    return None


def remote_bounds(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> tuple[int, int]:
    """(log start offset, log end offset = one past the highest remote offset). The start is
    the broker's log start as far as the bucket reveals it
    (:meth:`~gateway.metadata.views.MetadataViews.log_start_offset`): no surface serves a
    record below it."""
    start = rlmm.log_start_offset(tp)
    end = rlmm.remote_log_end_offset(tp)
    if start is None or end is None:
        return 0, 0
    return start, end + 1


def held(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, offset: int
) -> RemoteLogSegmentMetadata | None:
    """The segment holding ``offset`` by two point reads (the epoch of ``offset``, the segment
    floor in that epoch): what :func:`locate` returns when it finds one; ``None`` when only
    its listing path can answer. No bounds check is needed: a segment the epoch map finds is
    finished and holds ``offset``, so ``offset`` lies inside the remote log."""
    epoch = rlmm.epoch_for_offset(tp, offset)
    if epoch is None:
        return None
    found = rlmm.remote_log_segment_metadata(tp, epoch, offset)
    return found if found is not None and found.start_offset <= offset else None


def locate(
    rlmm: RemoteLogMetadataManager, claims: Claims, tp: TopicIdPartition, offset: int
) -> RemoteLogSegmentMetadata:
    """The segment holding ``offset`` (may list the partition: call it off the event loop).

    Outside the remote log: :class:`OffsetOutOfRangeError`. A hole in the metadata inside
    it: :class:`RemoteGapError`. Offsets a segment whose manifest cannot be read would
    hold (from its key's start offset to the next readable segment), inside the remote log,
    before its start or after its end: :class:`CorruptManifestError` naming the manifest.
    """
    start, end = remote_bounds(rlmm, tp)
    where = f"{tp.topic}-{tp.partition}"
    meta = resolve(rlmm, tp, offset) if start <= offset < end else None
    if meta is not None and meta.start_offset <= offset:
        return meta
    # Not held by a readable segment. What starts before ``offset`` and covers least?
    readable_end = max(
        (m.end_offset for m in rlmm.list_remote_log_segments(tp) if m.end_offset < offset),
        default=-1,
    )
    covering = [c for c in claims(tp) if readable_end < c.start_offset <= offset]
    if covering:
        claim = covering[-1]
        raise CorruptManifestError(
            f"offset {offset} of {where} is in the segment from offset {claim.start_offset} "
            f"whose manifest {claim.key} cannot be read ({claim.reason})"
        )
    if meta is None and start <= offset < end:
        end = readable_end + 1  # the tail was deleted: nothing readable holds offsets here
    if start <= offset < end and meta is not None:
        hole_end = meta.start_offset - 1
        raise RemoteGapError(
            f"no remote segment of {where} holds offsets {offset}..{hole_end}, inside the "
            f"remote log [{start}, {end}): the metadata has a hole",
            offset,
            hole_end,
        )
    claimed = [c.start_offset for c in claims(tp)]
    log_start = min([start, *claimed]) if end else min(claimed, default=0)
    raise OffsetOutOfRangeError(
        f"offset {offset} is outside the remote log of {where} [{log_start}, {end})",
        log_start,
        end,
        topic_id=tp.topic_id,
    )
