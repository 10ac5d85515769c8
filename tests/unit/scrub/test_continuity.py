"""Gaps, overlaps and displaced re-uploads across a partition's segments."""

from __future__ import annotations

from gateway.scrub import SegmentRange, check_continuity
from gateway.scrub.findings import DUPLICATE, GAP, OVERLAP


def seg(
    sid: str, start: int, end: int, event: int = 0, topic_id: str = "T", p: int = 0
) -> SegmentRange:
    return SegmentRange("t", topic_id, p, sid, f"k/{sid}", start, end, event)


def summary(segments: list[SegmentRange]) -> list[tuple[str, str, str]]:
    return [(f.check, f.severity, f.segment_id) for f in check_continuity(segments)]


def test_contiguous_segments_in_any_order_are_clean() -> None:
    assert summary([seg("b", 100, 199), seg("a", 0, 99), seg("c", 200, 200)]) == []


def test_a_gap_names_the_missing_offsets_and_the_segment_after_it() -> None:
    [finding] = check_continuity([seg("a", 0, 99), seg("c", 150, 199)])
    assert (finding.check, finding.severity, finding.segment_id) == (GAP, "error", "c")
    assert "offsets 100..149 are in no segment" in finding.message


def test_a_later_reupload_of_the_same_range_displaces_the_first() -> None:
    segments = [seg("a", 0, 99, event=1), seg("a2", 0, 99, event=2), seg("b", 100, 199)]
    assert summary(segments) == [(DUPLICATE, "info", "a")]


def test_a_later_upload_that_covers_an_earlier_one_displaces_it() -> None:
    segments = [seg("a", 0, 99, event=1), seg("b", 100, 149, event=1), seg("ab", 0, 149, event=5)]
    assert sorted(summary(segments)) == [(DUPLICATE, "info", "a"), (DUPLICATE, "info", "b")]


def test_an_earlier_upload_never_displaces_a_later_one() -> None:
    # the covering segment is older: the newer, smaller one overlaps it
    segments = [seg("big", 0, 199, event=9), seg("small", 50, 99, event=1)]
    assert summary(segments) == [(DUPLICATE, "info", "small")]
    segments = [seg("big", 0, 199, event=1), seg("small", 50, 99, event=9)]
    assert summary(segments) == [(OVERLAP, "error", "small")]


def test_a_partial_overlap_is_an_error() -> None:
    [finding] = check_continuity([seg("a", 0, 99, event=1), seg("b", 90, 199, event=2)])
    assert (finding.check, finding.severity, finding.segment_id) == (OVERLAP, "error", "b")
    assert "offsets 90..99 are in two segments" in finding.message


def test_partitions_and_topic_incarnations_are_separate_lineages() -> None:
    segments = [seg("a", 0, 99), seg("b", 500, 599, p=1), seg("c", 900, 999, topic_id="U")]
    assert summary(segments) == []
