"""Issue 13's corruption campaign through the bucket's other readers: the Spark source (its
driver and executor code, without a session) either gives the records as written or fails the
job with a typed error, with ``failOnDataLoss=false`` the rest of the records around a hole,
and scrub reports every flip that changes what a reader gets
(:mod:`tests.integration.campaign_readers` has the harness; ``python -m
tests.integration.campaign_readers`` prints the tables alone).

The sampled run takes the same flips through the service (:mod:`tests.integration.campaign`)
for the cross-check: ~50 s on a 2-core machine for 400 flips and three readers.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.metadata.model import TopicIdPartition
from gateway.service.types import IsolationLevel
from tests.fixtures.extras import require_spark

require_spark()

from gateway.spark import dataloss
from tests.integration.campaign import (
    KINDS,
    Fixture,
    build_fixture,
    control_flips,
    every_byte_flips,
    sample_flips,
    smallest_segment,
)
from tests.integration.campaign_readers import (
    ReadersRun,
    Row,
    bad,
    check_scrub,
    check_source,
    compare_rows,
    damaged_copy,
    driver_warnings,
    lossy_outcomes,
    make_flip,
    read_source,
    report,
    run_reader,
    run_readers,
    segment_objects,
    skipped_offsets,
    source_options,
)

SAMPLED_FLIPS = 400
SLOW_FLIPS = 2000
SEED = int(os.environ.get("CAMPAIGN_SEED", "13"))
WORKERS = min(4, os.cpu_count() or 2)


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return build_fixture(tmp_path_factory.mktemp("campaign-readers"))


def _assert_requirements(fixture: Fixture, run: ReadersRun) -> None:
    """0 wrong, 0 hang, 0 untyped for every reader and for the failOnDataLoss=false reads;
    no scrub miss (all checked, then reported together)."""
    text = report(fixture, run)
    print(text)
    failed = {
        f"{reader} (wrong, hang, untyped)": bad(outcomes)
        for reader, outcomes in run.outcomes.items()
    }
    failed["spark-source failOnDataLoss=false (wrong, hang, untyped)"] = bad(
        lossy_outcomes(run.outcomes["spark-source"])
    )
    failed = {k: v for k, v in failed.items() if v != (0, 0, 0)}
    misses = [audit.flip.index for audit, _ in run.check().misses]
    assert (failed, misses) == ({}, []), text


def test_an_undamaged_bucket_reads_as_written_and_scrubs_clean(
    fixture: Fixture, tmp_path: Path
) -> None:
    """The oracle's own check, in this process: nothing flipped (one run per topic, each with
    another maxBytesPerPartition), every read equals what was written and scrub finds no
    error (the displaced re-upload is an info finding, not kept)."""
    flips = control_flips(fixture)[::6]
    assert {f.topic for f in flips} == set(fixture.topics())
    for flip in flips:
        with damaged_copy(fixture, flip, tmp_path) as folder:
            spark = check_source(folder, fixture.key_pair_spec, flip, fixture.oracles[flip.topic])
            scrub = check_scrub(folder, fixture.key_pair_spec, flip)
        assert (spark.verdict, spark.problems, spark.lossy_verdict) == ("same", (), "")
        assert (scrub.verdict, scrub.findings) == ("same", ())


def test_the_comparison_notices_wrong_rows(fixture: Fixture, tmp_path: Path) -> None:
    topic = "plain.v1-raw"
    oracles = fixture.oracles[topic]
    flip = next(f for f in control_flips(fixture) if f.topic == topic)
    committed = IsolationLevel.READ_COMMITTED
    with damaged_copy(fixture, flip, tmp_path) as folder:
        options = source_options(folder, fixture.key_pair_spec, topic, isolation=committed)
        plan, rows = read_source(options)
        options = source_options(folder, fixture.key_pair_spec, topic)
        _, uncommitted = read_source(options)
    assert compare_rows(plan, rows, oracles, committed, "read") == []

    def record(row: Row, **change: Any) -> Row:
        return dataclasses.replace(row, record=dataclasses.replace(row.record, **change))

    cases: list[tuple[Sequence[Row], str]] = [
        (rows[:-1], "missing records"),
        ([*rows, rows[-1]], "repeated or reordered records"),
        ([rows[1], rows[0], *rows[2:]], "repeated or reordered records"),
        ([record(rows[0], value=b"changed"), *rows[1:]], "changed value"),
        ([record(rows[0], leader_epoch=9), *rows[1:]], "changed leader_epoch"),
        ([record(rows[0], timestamp=-1), *rows[1:]], "changed timestamp"),
        ([record(rows[0], headers=()), *rows[1:]], "changed headers"),
        ([dataclasses.replace(rows[0], timestamp_type=2), *rows[1:]], "wrong topic or"),
        ([*rows, dataclasses.replace(rows[0], partition=7)], "extra records"),
        (uncommitted, "aborted records under read_committed"),
    ]
    for changed, label in cases:
        found = compare_rows(plan, changed, oracles, committed, "read")
        assert found and found[0].verdict == "wrong", label
        assert found[0].label.startswith(label), (label, found)
    short = dataclasses.replace(
        plan, ranges=tuple(dataclasses.replace(r, end_offset=r.end_offset - 1) for r in plan.ranges)
    )
    [problem, *_] = compare_rows(short, rows, oracles, committed, "read")
    assert problem.label == "wrong partition range"
    # with failOnDataLoss=false, the skipped offsets are left out and the ranges not checked
    p = oracles[0].partition
    kept = [r for r in rows if not (r.partition == p and 10 <= r.record.offset <= 30)]
    assert compare_rows(short, kept, oracles, committed, "read", skipped={p: [(10, 30)]}) == []


def test_what_fail_on_data_loss_false_skipped_is_read_from_the_drivers_warnings() -> None:
    tp = TopicIdPartition(uuid.uuid4(), 3, "t.x-1")
    with driver_warnings() as messages:
        dataloss.hole(tp, 40, 59, (), fail=False)
        dataloss.lost(False, "partition 4 of t.x-1 has no readable segment", [])
    assert skipped_offsets(messages) == {3: [(40, 59)], 4: [(0, 1 << 62)]}


def test_a_hole_fails_by_default_and_fail_on_data_loss_false_reads_around_it(
    fixture: Fixture, tmp_path: Path
) -> None:
    """An unreadable manifest in the middle of a partition: RemoteGapError naming it; with
    failOnDataLoss=false, the written records outside the hole, or a typed error (for
    read_committed: a transaction whose marker is in the hole cannot be proven either way)."""
    segments = segment_objects(fixture, "plain.v1-raw", 1)
    manifest = segments[2][KINDS.index("rsm-manifest")]
    flip = make_flip(fixture, manifest, 0, 0x01)  # '{' -> 'z': not JSON
    oracles = fixture.oracles[flip.topic]
    with damaged_copy(fixture, flip, tmp_path) as folder:
        outcome = check_source(folder, fixture.key_pair_spec, flip, oracles)
        options = source_options(folder, fixture.key_pair_spec, flip.topic, fail_on_data_loss=False)
        with driver_warnings() as messages:
            plan, rows = read_source(options)
    assert outcome.verdict == "typed_error"
    assert {p.verdict for p in outcome.problems} == {"typed_error"}
    assert outcome.problems[0].label == "typed:remote_gap"
    assert manifest.key in outcome.problems[0].detail
    meta = manifest.objects.manifest.remote_log_segment_metadata
    assert meta is not None
    hole = (meta.start_offset, meta.end_offset)
    skipped = skipped_offsets(messages)
    assert skipped == {1: [hole]}
    written = [r for r in oracles[1].uncommitted if not hole[0] <= r.offset <= hole[1]]
    assert [r.record for r in rows if r.partition == 1] == written
    uncommitted = IsolationLevel.READ_UNCOMMITTED
    assert compare_rows(plan, rows, oracles, uncommitted, "lossy", skipped=skipped) == []
    # both isolation levels, as the campaign reads them
    assert outcome.lossy_verdict in ("same", "typed_error"), outcome.lossy_problems


def test_the_harness_classifies_hangs_crashes_and_exceptions(fixture: Fixture) -> None:
    """The readers' workers are the service campaign's: a flip that blocks is killed and
    called a hang, a worker that dies and an exception that is not a GatewayError are
    untyped, and the flips after them still run."""
    base = control_flips(fixture)
    flips = [
        dataclasses.replace(base[0], index=0, sabotage="block"),
        dataclasses.replace(base[1], index=1, sabotage="exit"),
        dataclasses.replace(base[2], index=2, sabotage="raise"),
        dataclasses.replace(base[3], index=3),
    ]
    # the timeout only has to outlast one unharmed scrub of a topic (~0.05 s)
    outcomes = run_reader(fixture, flips, "scrub", workers=2, flip_timeout=5)
    assert [o.verdict for o in outcomes] == ["hang", "untyped", "untyped", "same"]
    assert outcomes[1].label == "worker process died"
    assert outcomes[2].label == "untyped:RuntimeError"


@pytest.mark.timeout(900)
def test_sampled_flips_through_the_spark_source_and_scrub(fixture: Fixture) -> None:
    flips = sample_flips(fixture, SAMPLED_FLIPS, SEED)
    cells = Counter((f.topic, f.kind) for f in flips)
    assert set(cells) == {(t, k) for t in fixture.topics() for k in KINDS}
    run = run_readers(fixture, flips, workers=WORKERS)
    _assert_requirements(fixture, run)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_more_sampled_flips_through_the_spark_source_and_scrub(fixture: Fixture) -> None:
    flips = sample_flips(fixture, SLOW_FLIPS, SEED + 1)
    run = run_readers(fixture, flips, workers=WORKERS)
    _assert_requirements(fixture, run)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_every_byte_of_one_segment_through_the_spark_source_and_scrub(fixture: Fixture) -> None:
    objects = smallest_segment(fixture, "plain.v1-raw")
    flips = every_byte_flips(fixture, objects, (0x01, 0x80, 0xFF), SEED)
    run = run_readers(fixture, flips, workers=WORKERS)
    _assert_requirements(fixture, run)
