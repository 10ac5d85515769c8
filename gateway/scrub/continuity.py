"""Offsets contiguous across a partition's segments: gaps, overlaps and re-uploads.

Input: each manifest's ``remoteLogSegmentMetadata`` range (inclusive start and end offsets,
event time). Per partition (topic id + partition: a re-created topic is another lineage):

1. A segment whose range lies inside the range of a segment uploaded later (a greater event
   time) is displaced, as Kafka's metadata cache displaces it (remote-read-semantics.md §5.2):
   the same range uploaded twice by the next leader is the common case. Reads never reach the
   displaced copy; it is reported as ``info`` (it still costs storage until retention).
2. The remaining segments, by start offset, must tile the offsets: a start beyond the previous
   end + 1 is a ``gap`` (those offsets are lost to remote reads: error); a start at or before
   the previous end is an ``overlap`` that no displacement explains (error: which copy a read
   gets depends on the leader epoch, and the two may disagree).

Nothing is said before the first segment: retention deletes from the start.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.scrub.findings import DUPLICATE, GAP, OVERLAP, Finding, Where


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """One manifest's offsets, as the continuity check needs them."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    manifest_key: str
    start_offset: int
    end_offset: int
    event_timestamp_ms: int

    def where(self) -> Where:
        return Where(self.topic, self.partition, self.segment_id, self.manifest_key)

    def label(self) -> str:
        return f"{self.segment_id} [{self.start_offset}..{self.end_offset}]"


def _covers(new: SegmentRange, old: SegmentRange) -> bool:
    return (
        new.event_timestamp_ms > old.event_timestamp_ms
        and new.start_offset <= old.start_offset
        and old.end_offset <= new.end_offset
    )


def _displaced(ranges: list[SegmentRange]) -> dict[str, SegmentRange]:
    """segment id -> a later upload that covers it. One sweep by start offset, comparing each
    segment only with those still open at its start (a healthy partition has one or two)."""
    out: dict[str, SegmentRange] = {}
    active: list[SegmentRange] = []
    for seg in sorted(ranges, key=lambda r: (r.start_offset, -r.end_offset, r.segment_id)):
        active = [a for a in active if a.end_offset >= seg.start_offset]
        for other in active:
            if _covers(other, seg):
                out.setdefault(seg.segment_id, other)
            elif _covers(seg, other):
                out.setdefault(other.segment_id, seg)
        active.append(seg)
    return out


def _partition(ranges: list[SegmentRange]) -> list[Finding]:
    findings: list[Finding] = []
    displaced = _displaced(ranges)
    for seg in sorted(ranges, key=lambda r: (r.start_offset, r.end_offset, r.segment_id)):
        by = displaced.get(seg.segment_id)
        if by is not None:
            same = (by.start_offset, by.end_offset) == (seg.start_offset, seg.end_offset)
            findings.append(
                seg.where().finding(
                    DUPLICATE,
                    "info",
                    f"{'re-uploaded' if same else 'covered'} by the later upload {by.label()}, "
                    "which displaces it (reads never reach this copy; retention removes it)",
                )
            )
    live = sorted(
        (r for r in ranges if r.segment_id not in displaced),
        key=lambda r: (r.start_offset, r.end_offset, r.segment_id),
    )
    for prev, cur in itertools.pairwise(live):
        if cur.start_offset > prev.end_offset + 1:
            findings.append(
                cur.where().finding(
                    GAP,
                    "error",
                    f"offsets {prev.end_offset + 1}..{cur.start_offset - 1} are in no segment: "
                    f"{prev.label()} is followed by {cur.label()}",
                )
            )
        elif cur.start_offset <= prev.end_offset:
            findings.append(
                cur.where().finding(
                    OVERLAP,
                    "error",
                    f"offsets {cur.start_offset}..{min(prev.end_offset, cur.end_offset)} are "
                    f"in two segments, {prev.label()} and {cur.label()}, and neither upload "
                    "displaces the other",
                )
            )
    return findings


def check_continuity(segments: Iterable[SegmentRange]) -> list[Finding]:
    """Gap, overlap and duplicate findings of every partition in ``segments``."""
    groups: dict[tuple[str, str, int], list[SegmentRange]] = defaultdict(list)
    for seg in segments:
        groups[seg.topic, seg.topic_id, seg.partition].append(seg)
    findings: list[Finding] = []
    for key in sorted(groups):
        findings += _partition(groups[key])
    return findings
