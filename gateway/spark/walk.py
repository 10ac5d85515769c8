"""The lineage walk of one partition on the driver: the segments that hold a range of offsets,
each with the offsets only it contributes. The next segment must start at or before the
previous one's ``endOffset + 1``: a hole is never hopped silently (``failOnDataLoss``,
:mod:`gateway.spark.dataloss`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
from gateway.service.locate import Claim, resolve
from gateway.spark.dataloss import hole


@dataclass(frozen=True, slots=True)
class Walk:
    """A lineage walk: each finished segment with the offsets ``[lo, hi)`` only it
    contributes; ``gap``: the hole (inclusive) after the read's range where it stopped."""

    segments: list[tuple[RemoteLogSegmentMetadata, int, int]] = field(default_factory=list)
    gap: tuple[int, int] | None = None


def walk_segments(
    rlmm: RemoteLogMetadataManager,
    tp: TopicIdPartition,
    start: int,
    until: int,
    *,
    to_end: bool = False,
    fail_on_data_loss: bool = True,
    claims: Sequence[Claim] = (),
) -> Walk:
    """The lineage walk from ``start`` (a consumer's fetch path) up to the segment holding
    ``until - 1``, or to the end of the remote log when ``to_end``.

    The next segment must start at or before the previous one's ``endOffset + 1``. A hole
    before ``until`` raises :class:`RemoteGapError` (``fail_on_data_loss``) or is logged and
    skipped; one after it ends the walk (``Walk.gap``) or is skipped the same way."""
    walk = Walk()
    target = query = start
    meta = resolve(rlmm, tp, start)
    while meta is not None and (to_end or target < until):
        if meta.start_offset > target:
            if target >= until and fail_on_data_loss:
                return Walk(walk.segments, (target, meta.start_offset - 1))
            hole(tp, target, meta.start_offset - 1, claims, fail=fail_on_data_loss)
        hi = meta.end_offset + 1
        if hi > target:
            walk.segments.append((meta, max(target, meta.start_offset), hi))
            target = hi
        query = max(query, meta.end_offset) + 1  # always forward
        meta = resolve(rlmm, tp, query)
    if target < until:  # the segments end before the remote log's end
        hole(tp, target, until - 1, claims, fail=fail_on_data_loss)
    return walk
