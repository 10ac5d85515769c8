"""The streaming log scan: chunk borders anywhere, the per-check cap."""

from __future__ import annotations

import random

import pytest

from gateway.demo import DemoBucket
from gateway.remote.tiering import read_segment_dir
from gateway.scrub.findings import MAX_PER_CHECK, FindingSink, Where
from gateway.scrub.logscan import IndexView, LogScanner
from indexcache import (
    LeaderEpochCache,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
    parse_leader_epoch_checkpoint,
)


def scan(demo: DemoBucket, pieces: int, *, flip: int | None = None, seed: int = 0) -> tuple:
    segment = next(read_segment_dir(demo.root / "segments" / "payments-1", include_active=True))
    base = segment.base_offset
    log = bytearray(segment.log)
    if flip is not None:
        log[flip] ^= 0xFF
    view = IndexView(
        list(OffsetIndex(segment.offset_index, base).entries()),
        list(TimeIndex(segment.time_index, base).entries()),
        TransactionIndex(segment.txn_index or b"", base).all_aborted_txns(),
        LeaderEpochCache(parse_leader_epoch_checkpoint(segment.leader_epoch_checkpoint)),
    )
    sink = FindingSink(Where("payments", 1, "s", "k"))
    scanner = LogScanner(view, sink, size=len(log), log_key="k.log", indexes_key="k.indexes")
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(log)), pieces - 1)) if pieces > 1 else []
    for lo, hi in zip([0, *cuts], [*cuts, len(log)], strict=True):
        scanner.feed(bytes(log[lo:hi]))
    scanner.finish()
    findings = [(f.check, f.severity, f.message) for f in sink.close()]
    return scanner.batches, scanner.records, scanner.last_offset, findings


@pytest.mark.parametrize("pieces", [2, 7, 100, 1000])
def test_batches_crossing_chunk_borders_give_the_same_answer(demo: DemoBucket, pieces: int) -> None:
    whole = scan(demo, 1)
    assert whole[0] > 10 and whole[3] == []
    assert scan(demo, pieces, seed=pieces) == whole


def test_a_corrupt_batch_is_found_whatever_the_borders(demo: DemoBucket) -> None:
    whole = scan(demo, 1, flip=500)
    assert [c for c, _, _ in whole[3]] == ["batch-crc"]
    for seed in range(5):
        assert scan(demo, 50, flip=500, seed=seed) == whole


def test_findings_per_check_are_capped_with_a_count_of_the_rest() -> None:
    sink = FindingSink(Where("t", 0, "s", "k"))
    for i in range(MAX_PER_CHECK + 7):
        sink.error("batch-crc", f"batch {i}")
    sink.warning("batch-crc", "other severity")
    out = sink.close()
    assert len(out) == MAX_PER_CHECK + 2
    assert out[-1].message.startswith("... and 7 more batch-crc findings")


def test_a_batch_length_past_the_end_stops_framing_at_once(demo: DemoBucket) -> None:
    # bytes 8..11 are the first batch's length: 0x00FF.... claims ~16 MiB, past the end
    batches, _, _, findings = scan(demo, 100, flip=9)
    assert batches == 0
    assert [(c, s) for c, s, _ in findings] == [
        ("batch-framing", "error"),
        ("batch-framing", "info"),
    ]
    assert "past the" in findings[0][2]
