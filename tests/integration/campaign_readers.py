"""Issue 13's corruption campaign for the bucket's other two readers: the Spark source, scrub.

The flips, the fixture, the oracle and the worker processes are those of
:mod:`tests.integration.campaign` (each flip XORs one byte of one object of a copy of the
small bucket; a worker that overruns ``flip_timeout`` is killed and its flip called ``hang``);
only what runs on the damaged bucket differs (``_CHECKS``, passed to
:func:`~tests.integration.campaign.run_campaign` as its ``check``).

``spark-source``: the ``tiered-kafka`` data source without a SparkSession (a session per flip
would take seconds): the driver's plan (:func:`gateway.spark.driver.build_plan`, from one bucket
scan per flip that its reads share) and every split through the executor function
(:func:`gateway.spark.read.read_split`) in the worker, as Spark would run them (the executor's
per-process caches cleared for each flip), with ``maxBytesPerPartition`` set to the flip's
``max_bytes`` so segments are cut into several splits (the executors then use the offset
index). Per flip, every partition of the flipped topic is read from ``earliest`` to ``latest``
in both isolation levels, then from two of the flip's probe timestamps (``startingTimestamp``,
the driver's timestamp search); the Arrow batches become rows (offset, timestamp, timestamp
type, key, value, headers, leaderEpoch: the oracle's :class:`~tests.integration.campaign.
Expected`) and each partition's rows, in split order, must be the written records in the read's
range; the planned ranges must be the written log's. Verdicts as in the service campaign:
``same``, ``typed_error`` (the job fails with a typed :class:`~gateway.errors.GatewayError`;
rows yielded before it do not matter, a failed job has no output), ``wrong``, ``hang``,
``untyped``.

``failOnDataLoss=false``: when a default read of the flip failed because records are lost (a
:class:`~gateway.errors.RemoteGapError`, or an unreadable manifest whose offsets the read
covers), both isolation levels are read again with ``failOnDataLoss=false``. The offsets the
driver says it skipped (its warnings: a hole ``lo..hi``, what lies before the remote log start
or after its end, a partition with no readable segment) must include the failing read's hole,
and the rows must be exactly the written records outside them (or a typed error, for other
damage). Its verdict is kept apart (:attr:`SourceOutcome.lossy_verdict`).

``scrub``: the audit without Spark, as the job runs it: one inventory of the topic's bucket,
:func:`gateway.scrub.audit.audit_segment` for every segment, the continuity check. Its
verdict: ``same`` (no error finding), ``typed_error`` (error findings; the label says whether
one names the damaged object or its segment), ``hang``, ``untyped`` (an ``internal`` finding:
the auditor itself failed, or an exception out of it).

:func:`cross_check`: scrub must report every flip that changes what a reader gets. A flip
whose service or Spark verdict is not ``same`` must give at least one error finding naming the
damaged object or its segment (otherwise a *scrub miss*); flips that scrub reports while every
reader gets the written records (bytes nothing reads, a displaced upload) are listed for
information.

``python -m tests.integration.campaign_readers --help`` runs the readers' campaign (and, for the
cross-check, the service's) and prints a table per reader.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow as pa

from gateway.errors import RemoteGapError
from gateway.kafka.uuids import encode_uuid
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import parse_object_key
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.scrub import Finding, audit_segment, check_continuity, inventory
from gateway.scrub.findings import INTERNAL
from gateway.service.types import IsolationLevel
from gateway.spark import rlmm
from gateway.spark import segments as spark_read
from gateway.spark.driver import ReadPlan, build_plan
from gateway.spark.options import parse_options
from gateway.spark.read import read_split
from gateway.storage.sync import SyncStoreSpec
from tests.integration.campaign import (
    _SEVERITY,
    BUILD_SEED,
    KINDS,
    VERDICTS,
    BucketObject,
    Expected,
    Fixture,
    Flip,
    Outcome,
    PartitionOracle,
    Problem,
    _error_problem,
    _flip,
    _page_problem,
    _sabotage,
    apply_flip,
    describe,
    every_byte_flips,
    examples,
    fixture_in,
    run_campaign,
    sample_flips,
    smallest_segment,
    table,
)
from tests.integration.independent_bucket import KEY_PREFIX

READERS: Final = ("spark-source", "scrub")
PROBES: Final = 2  # startingTimestamp reads per flip (of the flip's four ListOffsets probes)
MAX_ROWS_PER_BATCH: Final = 50  # several Arrow batches per split
ELSEWHERE: Final = " (not the damaged segment)"
_DRIVER_LOG: Final = "gateway.spark.driver"

Metadata = tuple[RemoteLogMetadataManager, rlmm.Claims]
"""What the driver plans from: the RLMM of a bucket scan, and the manifests it could not read
(by partition)."""


# --- the Spark source, its executor path in this process ---------------------------------------


def source_options(
    bucket_folder: Path,
    key_pair_spec: str,
    topic: str,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    max_bytes: int = 2048,
    fail_on_data_loss: bool = True,
    starting_timestamp: int | None = None,
) -> dict[str, str]:
    """The reader options of ``spark.read.format("tiered-kafka")`` for one campaign read."""
    options = {
        "store": bucket_folder.as_uri(),
        "keyPrefix": KEY_PREFIX,
        "keyPairs": key_pair_spec,
        "topic": topic,
        "includeHeaders": "true",
        "isolation.level": isolation.value,
        "maxBytesPerPartition": str(max_bytes),
        "maxRowsPerBatch": str(MAX_ROWS_PER_BATCH),
        "failOnDataLoss": str(fail_on_data_loss).lower(),
    }
    if starting_timestamp is not None:
        options["startingTimestamp"] = str(starting_timestamp)
        options["startingOffsetsByTimestampStrategy"] = "latest"
    return options


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the source: where Spark puts it, and the record as the oracle spells it."""

    topic: str
    partition: int
    timestamp_type: int
    record: Expected


def rows_of(batch: pa.RecordBatch) -> list[Row]:
    """The rows of one Arrow batch the source yielded (timestamps back to milliseconds; a
    timestamp that is not a whole millisecond becomes -1, which no written record has)."""
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> list[Any]:
        values: list[Any] = batch.column(names.index(name)).to_pylist()
        return values

    micros = batch.column(names.index("timestamp")).cast(pa.int64()).to_pylist()
    headers = column("headers") if "headers" in names else [None] * n
    rows = []
    for key, value, topic, partition, offset, us, kind, hdrs, epoch in zip(
        column("key"),
        column("value"),
        column("topic"),
        column("partition"),
        column("offset"),
        micros,
        column("timestampType"),
        headers,
        column("leaderEpoch"),
        strict=True,
    ):
        ms, rest = divmod(us, 1000) if us is not None else (-1, 0)
        pairs = tuple((h["key"], h["value"]) for h in hdrs or ())
        record = Expected(offset, -1 if rest else ms, kind == 1, key, value, pairs, epoch)
        rows.append(Row(topic, partition, kind, record))
    return rows


def clear_executor_caches() -> None:
    """The executor module keeps opened segments (manifests, unwrapped data keys) and store
    clients per process, keyed by store and object key: a new flip is a new bucket."""
    spark_read._open_segment.cache_clear()
    spark_read._store.cache_clear()


def load_metadata(options: Mapping[str, str]) -> Metadata:
    """The driver's metadata for reads of ``options``' store: a bucket scan into memory, and
    the manifests it could not read (what ``build_plan`` loads when given none)."""
    return rlmm.load_with_claims(parse_options(options))


def read_source(
    options: Mapping[str, str],
    step: Callable[[str], None] = lambda _: None,
    metadata: Metadata | None = None,
) -> tuple[ReadPlan, list[Row]]:
    """Plan a read as the driver does (from ``metadata``, else from a scan of its own), then
    read every split as an executor does, in order."""
    step(f"plan {options['topic']} {options['isolation.level']}")
    opts = parse_options(options)
    plan = build_plan(opts) if metadata is None else build_plan(opts, *metadata)
    rows: list[Row] = []
    for split in plan.splits:
        step(
            f"read split {split.topic}-{split.partition} [{split.start_offset}, "
            f"{split.end_offset}) part {split.part}/{split.parts} of {split.segment.key}"
        )
        for batch in read_split(split, plan.context):
            rows += rows_of(batch)
    return plan, rows


Skipped = Mapping[int, Sequence[tuple[int, int]]]
"""Offsets (inclusive ranges) by partition that a read with failOnDataLoss=false skipped."""


def _skipped(part: PartitionOracle, skipped: Skipped | None, offset: int) -> bool:
    if skipped is None:
        return False
    return any(lo <= offset <= hi for lo, hi in skipped.get(part.partition, ()))


def compare_rows(
    plan: ReadPlan,
    rows: Sequence[Row],
    oracles: Sequence[PartitionOracle],
    isolation: IsolationLevel,
    where: str,
    *,
    starts: Mapping[int, int] | None = None,
    skipped: Skipped | None = None,
) -> list[Problem]:
    """The rows of a read against the written records: per partition, in split order, exactly
    the records from ``starts[p]`` (the log start by default) to the log end, but for the
    ``skipped`` offsets (a read with failOnDataLoss=false; its ranges are not checked then)."""
    problems: list[Problem] = []
    by_partition: dict[int, list[Expected]] = defaultdict(list)
    topics = {part.topic for part in oracles}
    odd = [r for r in rows if r.topic not in topics or r.timestamp_type not in (0, 1)]
    if odd:
        first = odd[0]
        problems.append(
            Problem(
                "wrong",
                "wrong topic or timestampType column",
                f"{where}: offset {first.record.offset}: topic {first.topic!r}, "
                f"timestampType {first.timestamp_type}",
            )
        )
    for row in rows:
        by_partition[row.partition].append(row.record)
    known = {part.partition for part in oracles}
    extra = sorted(set(by_partition) - known)
    if extra:
        problems.append(Problem("wrong", "extra records", f"{where}: rows of partitions {extra}"))
    ranges = {r.partition: (r.start_offset, r.end_offset) for r in plan.ranges}
    for part in oracles:
        start = part.start if starts is None else starts[part.partition]
        want = tuple(
            r
            for r in part.records(isolation)
            if r.offset >= start and not _skipped(part, skipped, r.offset)
        )
        got = by_partition.get(part.partition, [])
        name = f"{where} partition {part.partition}"
        if tuple(got) != want:
            problems.append(_page_problem(part, isolation, got, want, name))
        if skipped is None and ranges.get(part.partition) != (start, part.end):
            problems.append(
                Problem(
                    "wrong",
                    "wrong partition range",
                    f"{name}: planned {ranges.get(part.partition)} != written "
                    f"[{start}, {part.end})",
                )
            )
    return problems


_HOLE: Final = re.compile(
    r"no remote segment of (?P<tp>\S+)-(?P<p>\d+) holds offsets (\d+)\.\.(\d+)"
)
_NONE_READABLE: Final = re.compile(r"partition (?P<p>\d+) of \S+ has no readable segment")
_BEFORE: Final = re.compile(
    r"partition (?P<p>\d+) of \S+: offsets before the remote log start (\d+)"
)
_AFTER: Final = re.compile(r"partition (?P<p>\d+) of \S+: offsets after the remote log end (\d+)")
_FOREVER: Final = 1 << 62


def skipped_offsets(messages: Sequence[str]) -> dict[int, list[tuple[int, int]]]:
    """What the driver's warnings say a read with failOnDataLoss=false skipped."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for text in messages:
        if "failOnDataLoss=false" not in text:
            continue
        for m in _HOLE.finditer(text):
            out[int(m["p"])].append((int(m[3]), int(m[4])))
        for m in _NONE_READABLE.finditer(text):
            out[int(m["p"])].append((0, _FOREVER))
        for m in _BEFORE.finditer(text):
            out[int(m["p"])].append((0, int(m[2]) - 1))
        for m in _AFTER.finditer(text):
            out[int(m["p"])].append((int(m[2]), _FOREVER))
    return dict(out)


class _DriverLog(logging.Handler):
    """The driver's warnings during one read (what failOnDataLoss=false skipped)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(record.getMessage())


@contextlib.contextmanager
def driver_warnings() -> Iterator[list[str]]:
    """The messages the Spark driver warns with while the block runs."""
    handler = _DriverLog()
    logger = logging.getLogger(_DRIVER_LOG)
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def lost_data(exc: BaseException) -> bool:
    """The read failed because records are lost, which failOnDataLoss=false skips."""
    return isinstance(exc, RemoteGapError) or "failOnDataLoss=false skips it" in str(exc)


@dataclass(frozen=True, slots=True)
class SourceOutcome(Outcome):
    """The Spark source's outcome of one flip; ``lossy_verdict`` is that of the reads with
    failOnDataLoss=false ("" when no default read lost data, so none ran)."""

    lossy_verdict: str = ""
    lossy_problems: tuple[Problem, ...] = ()


def _worst(problems: Sequence[Problem]) -> str:
    return max((p.verdict for p in problems), key=_SEVERITY.__getitem__, default="same")


@dataclass(slots=True)
class _SourceReads:
    """The reads of one flip, planned from one bucket scan (each read of a Spark job scans
    for itself; the damaged bucket does not change between them)."""

    folder: Path
    key_pair_spec: str
    oracles: Sequence[PartitionOracle]
    max_bytes: int
    step: Callable[[str], None]
    metadata: Metadata

    def options(self, isolation: IsolationLevel, **extra: Any) -> dict[str, str]:
        topic = self.oracles[0].topic
        return source_options(
            self.folder, self.key_pair_spec, topic, isolation=isolation,
            max_bytes=self.max_bytes, **extra,
        )  # fmt: skip

    def full(
        self, isolation: IsolationLevel, *, fail_on_data_loss: bool = True
    ) -> tuple[list[Problem], BaseException | None, Skipped]:
        """Every partition from earliest to latest: the problems, the error if any, and what
        a read with failOnDataLoss=false skipped."""
        options = self.options(isolation, fail_on_data_loss=fail_on_data_loss)
        where = f"spark {options['topic']} {isolation.value} maxBytesPerPartition={self.max_bytes}"
        if not fail_on_data_loss:
            where += " failOnDataLoss=false"
        try:
            with driver_warnings() as warnings:
                plan, rows = read_source(options, self.step, self.metadata)
        except Exception as exc:  # classified: typed or not
            return [_error_problem(exc, where)], exc, {}
        if fail_on_data_loss:
            return compare_rows(plan, rows, self.oracles, isolation, where), None, {}
        skipped = skipped_offsets(warnings)
        found = compare_rows(plan, rows, self.oracles, isolation, where, skipped=skipped)
        return found, None, skipped

    def from_timestamp(self, isolation: IsolationLevel, timestamp: int) -> list[Problem]:
        """From ``startingTimestamp`` (a partition with no record at or after it reads
        nothing): the planned starts must be Kafka's ``offsetsForTimes``, the rows the records
        from there."""
        options = self.options(isolation, starting_timestamp=timestamp)
        where = f"spark {options['topic']} {isolation.value} startingTimestamp={timestamp}"
        try:
            plan, rows = read_source(options, self.step, self.metadata)
        except Exception as exc:
            return [_error_problem(exc, where)]
        starts = {}
        for part in self.oracles:
            hit = part.for_timestamp(timestamp).offset
            starts[part.partition] = part.end if hit < 0 else hit
        return compare_rows(plan, rows, self.oracles, isolation, where, starts=starts)

    def lossy(self, losses: Sequence[BaseException]) -> list[Problem]:
        """Both isolation levels with failOnDataLoss=false: the written records outside the
        skipped offsets, which must include every hole the default reads failed on."""
        problems: list[Problem] = []
        for isolation in IsolationLevel:
            found, error, skipped = self.full(isolation, fail_on_data_loss=False)
            problems += found
            if error is not None:
                continue
            for loss in losses:
                if not isinstance(loss, RemoteGapError) or loss.start is None or loss.end is None:
                    continue
                lo, hi = loss.start, loss.end
                if not any(a <= lo and hi <= b for r in skipped.values() for a, b in r):
                    problems.append(
                        Problem(
                            "wrong",
                            "a hole the default read failed on is not logged as skipped",
                            f"spark {isolation.value} failOnDataLoss=false: offsets {lo}..{hi} "
                            f"are not in the skipped {dict(skipped)}",
                        )
                    )
        return problems


def check_source(
    bucket_folder: Path,
    key_pair_spec: str,
    flip: Flip,
    oracles: Sequence[PartitionOracle],
    step: Callable[[str], None] = lambda _: None,
) -> SourceOutcome:
    """Read every partition of the flipped topic through the Spark source's driver and
    executor code over ``bucket_folder`` (already damaged), compare, classify."""
    started = time.perf_counter()
    clear_executor_caches()
    problems: list[Problem] = []
    losses: list[BaseException] = []
    lossy: list[Problem] = []
    try:
        _sabotage(flip.sabotage)
        options = source_options(bucket_folder, key_pair_spec, flip.topic)
        step(f"scan {flip.topic}")
        try:
            metadata = load_metadata(options)
        except Exception as exc:  # every read of the topic fails the same way
            metadata = None
            problems.append(_error_problem(exc, f"spark {flip.topic}: the driver's bucket scan"))
        if metadata is not None:
            try:
                reads = _SourceReads(
                    bucket_folder, key_pair_spec, oracles, flip.max_bytes, step, metadata
                )
                for isolation in IsolationLevel:
                    found, error, _ = reads.full(isolation)
                    problems += found
                    if error is not None and lost_data(error):
                        losses.append(error)
                for n, timestamp in enumerate(flip.probes[:PROBES]):
                    isolation = list(IsolationLevel)[(flip.index + n) % 2]
                    problems += reads.from_timestamp(isolation, timestamp)
                if losses:
                    lossy = reads.lossy(losses)
            finally:
                metadata[0].close()
    except Exception as exc:  # the harness's own failure, or a sabotage
        problems.append(_error_problem(exc, "spark source"))
    return SourceOutcome(
        flip,
        _worst(problems),
        tuple(problems),
        -1.0,
        -1.0,
        time.perf_counter() - started,
        "",
        _worst(lossy) if losses else "",
        tuple(lossy),
    )


# --- scrub ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScrubOutcome(Outcome):
    """Scrub's outcome of one flip; ``findings``: its error and warning findings."""

    findings: tuple[Finding, ...] = ()


def scrub_bucket(
    bucket_folder: Path, key_pair_spec: str, step: Callable[[str], None]
) -> list[Finding]:
    """Inventory, every segment's audit and the continuity check, as the scrub job runs them."""
    store = SyncStoreSpec(bucket_folder.as_uri()).open()
    try:
        step("scrub: inventory")
        ring = KeyRing.from_specs([key_pair_spec])
        inv = inventory(store, KEY_PREFIX)
        reader = SyncSegmentReader(store)
        findings = list(inv.findings)
        ranges = []
        for seg in inv.segments:
            step(f"scrub: audit {seg.manifest_key}")
            audit = audit_segment(reader, seg.manifest_key, ring, sizes=seg.sizes)
            findings += audit.findings
            if audit.range is not None:
                ranges.append(audit.range)
        step("scrub: continuity")
        return findings + check_continuity(ranges)
    finally:
        store.close()


def names_damage(finding: Finding, flip: Flip) -> bool:
    """The finding is about the damaged object or its segment."""
    key = parse_object_key(flip.key, KEY_PREFIX)
    if finding.object_key == flip.key:
        return True
    return (finding.topic, finding.partition, finding.segment_id) == (
        key.topic,
        key.partition,
        encode_uuid(key.segment_id),
    )


def check_scrub(
    bucket_folder: Path,
    key_pair_spec: str,
    flip: Flip,
    oracles: Sequence[PartitionOracle] = (),
    step: Callable[[str], None] = lambda _: None,
) -> ScrubOutcome:
    """Scrub the flipped topic's bucket (already damaged) and classify its findings."""
    started = time.perf_counter()
    problems: list[Problem] = []
    findings: list[Finding] = []
    try:
        _sabotage(flip.sabotage)
        findings = [
            f for f in scrub_bucket(bucket_folder, key_pair_spec, step) if f.severity != "info"
        ]
    except Exception as exc:
        problems.append(_error_problem(exc, "scrub"))
        if problems[-1].verdict == "typed_error":  # scrub turns typed errors into findings
            problems[-1] = dataclasses.replace(problems[-1], verdict="untyped")
    for f in findings:
        if f.severity != "error":
            continue
        detail = f"{f.object_key}: {f.message}"[:400]
        if f.check == INTERNAL:
            problems.append(Problem("untyped", f"scrub:{f.check}", detail))
        else:
            elsewhere = "" if names_damage(f, flip) else ELSEWHERE
            problems.append(Problem("typed_error", f"scrub:{f.check}{elsewhere}", detail))
    return ScrubOutcome(
        flip,
        _worst(problems),
        tuple(problems),
        -1.0,
        -1.0,
        time.perf_counter() - started,
        "",
        tuple(findings),
    )


def reports_damage(outcome: Outcome) -> bool:
    """Scrub gave an error finding naming the damaged object or its segment."""
    return any(
        p.verdict == "typed_error" and not p.label.endswith(ELSEWHERE) for p in outcome.problems
    )


# --- workers -------------------------------------------------------------------------------------

_CHECKS: Final[dict[str, Callable[..., Outcome]]] = {
    "spark-source": check_source,
    "scrub": check_scrub,
}


def run_reader(
    fixture: Fixture,
    flips: Sequence[Flip],
    reader: str,
    *,
    workers: int | None = None,
    flip_timeout: float = 30.0,
    progress: Callable[[int, int], None] | None = None,
) -> list[Outcome]:
    """One reader's outcome of every flip (``spark-source``, ``scrub``, or ``service``: the
    campaign of :mod:`tests.integration.campaign` itself), in flip order."""
    if reader == "service":
        return run_campaign(
            fixture, flips, workers=workers, flip_timeout=flip_timeout, progress=progress
        )
    return run_campaign(
        fixture,
        flips,
        workers=workers,
        flip_timeout=flip_timeout,
        progress=progress,
        check=_CHECKS[reader],
    )


def segment_objects(
    fixture: Fixture, topic: str, partition: int = 0, *, displaced: bool = False
) -> list[list[BucketObject]]:
    """The objects of each segment of a partition, by start offset (the three kinds in
    :data:`~tests.integration.campaign.KINDS` order); the displaced upload or the others."""
    found: dict[int, list[BucketObject]] = defaultdict(list)
    for obj in fixture.objects:
        if (obj.topic, obj.partition, obj.displaced) == (topic, partition, displaced):
            found[obj.start_offset].append(obj)
    return [sorted(found[s], key=lambda o: KINDS.index(o.kind)) for s in sorted(found)]


def make_flip(
    fixture: Fixture, obj: BucketObject, position: int, mask: int, index: int = 0
) -> Flip:
    """One chosen flip (its max_bytes and probes seeded by ``index``)."""
    return _flip(fixture, index, obj, position, mask, random.Random(f"flip/{index}"))


@contextlib.contextmanager
def damaged_copy(fixture: Fixture, flip: Flip, into: Path) -> Iterator[Path]:
    """A private copy of the flipped topic's bucket folder with the flip applied (for checks in
    this process, and for a real Spark session: a new folder is a new store to every cache)."""
    folder = Path(tempfile.mkdtemp(prefix=f"flip-{flip.index}-", dir=into)) / flip.topic
    shutil.copytree(fixture.buckets / flip.topic, folder)
    apply_flip(folder / flip.key, flip)
    try:
        yield folder
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


# --- the cross-check and the report --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CrossCheck:
    """Scrub against the readers, flip by flip."""

    misses: tuple[tuple[Outcome, tuple[Outcome, ...]], ...]  # readers differ, scrub is silent
    unread: tuple[Outcome, ...]  # scrub reports the damage, every reader got the records
    reported: int  # flips whose damage scrub reports
    changed: int  # flips some reader does not get the written records from


def cross_check(scrub: Sequence[Outcome], *readers: Sequence[Outcome]) -> CrossCheck:
    """``readers``: the outcomes of the same flips by the service and/or the Spark source."""
    misses, unread = [], []
    reported = changed = 0
    for n, audit in enumerate(scrub):
        seen = tuple(r[n] for r in readers)
        assert all(o.flip.index == audit.flip.index for o in seen)
        found = reports_damage(audit)
        differs = any(o.verdict != "same" for o in seen)
        reported += found
        changed += differs
        if differs and not found:
            misses.append((audit, seen))
        elif found and not differs:
            unread.append(audit)
    return CrossCheck(tuple(misses), tuple(unread), reported, changed)


def lossy_outcomes(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The failOnDataLoss=false reads as outcomes of their own (flips that lost data only)."""
    return [
        dataclasses.replace(o, verdict=o.lossy_verdict, problems=o.lossy_problems)
        for o in outcomes
        if isinstance(o, SourceOutcome) and o.lossy_verdict
    ]


def scrub_table(outcomes: Sequence[Outcome]) -> str:
    """Scrub's verdicts per (topic, kind): silent, an error naming the damaged segment, errors
    about other segments only, hang, untyped; then the flips per check."""
    columns: list[tuple[str, Callable[[Outcome], bool]]] = [
        ("silent", lambda o: o.verdict == "same"),
        ("reports the damage", lambda o: o.verdict == "typed_error" and reports_damage(o)),
        ("other segments only", lambda o: o.verdict == "typed_error" and not reports_damage(o)),
        ("hang", lambda o: o.verdict == "hang"),
        ("untyped", lambda o: o.verdict == "untyped"),
    ]
    rows: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        for cell in ((o.flip.topic, o.flip.kind), ("all", "all")):
            rows[cell]["flips"] += 1
            for name, test in columns:
                rows[cell][name] += test(o)
    lines = [
        "| topic | object | flips | " + " | ".join(n for n, _ in columns) + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for (topic, kind), counts in sorted(rows.items(), key=lambda kv: kv[0] == ("all", "all")):
        cells = " | ".join(str(counts[n]) for n, _ in columns)
        lines.append(f"| {topic} | {kind} | {counts['flips']} | {cells} |")
    labels: Counter[str] = Counter()
    for o in outcomes:
        for label in {p.label for p in o.problems}:
            labels[label] += 1
    if labels:
        lines.append("\nflips per finding check (a flip may show several):")
        lines += [f"  {n:5}  {label}" for label, n in labels.most_common()]
    return "\n".join(lines)


def cross_table(fixture: Fixture, check: CrossCheck, shown: int = 20) -> str:
    lines = [
        f"flips some reader does not get the written records from: {check.changed}; scrub "
        f"reports the damaged segment in {check.reported} flips",
        f"scrub misses (a reader fails, scrub names nothing about the damaged segment): "
        f"{len(check.misses)}",
    ]
    for audit, seen in check.misses[:shown]:
        verdicts = ", ".join(f"{o.verdict} ({o.label})" for o in seen)
        lines.append(f"  - flip #{audit.flip.index}: {describe(fixture, audit.flip)}")
        lines.append(f"      readers: {verdicts}; scrub: {audit.verdict} ({audit.label})")
    lines.append(f"scrub reports damage that no reader sees (informational): {len(check.unread)}")
    by_check: Counter[str] = Counter()
    for audit in check.unread:
        for label in {p.label for p in audit.problems if p.verdict == "typed_error"}:
            by_check[label] += 1
    lines += [f"    {n:5}  {label}" for label, n in by_check.most_common()]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ReadersRun:
    """A campaign over the same flips for every reader."""

    flips: tuple[Flip, ...]
    outcomes: dict[str, list[Outcome]]  # by reader: "service", "spark-source", "scrub"
    seconds: dict[str, float]

    def check(self) -> CrossCheck:
        readers = [self.outcomes[r] for r in ("service", "spark-source") if r in self.outcomes]
        return cross_check(self.outcomes["scrub"], *readers)


def run_readers(
    fixture: Fixture,
    flips: Sequence[Flip],
    *,
    readers: Sequence[str] = ("service", *READERS),
    workers: int | None = None,
    flip_timeout: float = 30.0,
    progress: Callable[[str, int, int], None] | None = None,
) -> ReadersRun:
    outcomes: dict[str, list[Outcome]] = {}
    seconds: dict[str, float] = {}
    for reader in readers:
        started = time.monotonic()
        report = None if progress is None else functools.partial(progress, reader)
        outcomes[reader] = run_reader(
            fixture, flips, reader, workers=workers, flip_timeout=flip_timeout, progress=report
        )
        seconds[reader] = time.monotonic() - started
    return ReadersRun(tuple(flips), outcomes, seconds)


def unnamed(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Flips whose first typed error does not name the damaged segment (any of its objects):
    informational (a hole is named by its offsets and the manifest that would cover it, a
    checkpoint by the segment holding it), but a corrupt byte should say where it is."""
    out = []
    for o in outcomes:
        first = next((p for p in o.problems if p.verdict == "typed_error"), None)
        if first is not None and o.flip.key.rsplit(".", 1)[0] not in first.detail:
            out.append(o)
    return out


def _unnamed_lines(outcomes: Sequence[Outcome], per_class: int) -> list[str]:
    found = unnamed(outcomes)
    if not found:
        return []
    lines = [f"typed errors that do not name the damaged segment (informational): {len(found)}"]
    labels = Counter(next(p.label for p in o.problems if p.verdict == "typed_error") for o in found)
    lines += [f"    {n:5}  {label}" for label, n in labels.most_common()]
    for o in found[:per_class]:
        detail = next(p.detail for p in o.problems if p.verdict == "typed_error")
        lines.append(f"  - flip #{o.flip.index} ({o.flip.kind}): {detail[:240]}")
    return lines


def report(fixture: Fixture, run: ReadersRun, per_class: int = 3) -> str:
    """A table per reader, the failures' examples, the cross-check."""
    parts: list[str] = []
    for reader, outcomes in run.outcomes.items():
        took = f"{len(outcomes)} flips in {run.seconds[reader]:.1f} s"
        if reader == "scrub":
            parts.append(f"## scrub ({took})\n\n{scrub_table(outcomes)}")
            parts.append(examples(fixture, outcomes, ("hang", "untyped"), per_class))
            continue
        parts.append(f"## {reader} ({took})\n\n{table(outcomes)}")
        parts.append(examples(fixture, outcomes, per_class=per_class))
        parts.append("\n".join(_unnamed_lines(outcomes, per_class)))
        if reader == "spark-source":
            lossy = lossy_outcomes(outcomes)
            parts.append(
                f"## spark-source, failOnDataLoss=false ({len(lossy)} flips whose default read "
                f"lost data)\n\n{table(lossy) if lossy else '(none)'}"
            )
            parts.append(examples(fixture, lossy, per_class=per_class))
    if "scrub" in run.outcomes and len(run.outcomes) > 1:
        parts.append("## scrub against the readers\n\n" + cross_table(fixture, run.check()))
    return "\n".join(p for p in parts if p)


def summary(outcomes: Sequence[Outcome]) -> Counter[str]:
    return Counter(o.verdict for o in outcomes)


def bad(outcomes: Sequence[Outcome]) -> tuple[int, int, int]:
    """(wrong, hang, untyped): all must be 0."""
    counts = summary(outcomes)
    return counts["wrong"], counts["hang"], counts["untyped"]


def _json(outcome: Outcome) -> dict[str, Any]:
    out: dict[str, Any] = {
        "flip": dataclasses.asdict(outcome.flip),
        "verdict": outcome.verdict,
        "problems": [dataclasses.asdict(p) for p in outcome.problems],
        "seconds": round(outcome.seconds, 3),
    }
    if isinstance(outcome, SourceOutcome) and outcome.lossy_verdict:
        out["lossy_verdict"] = outcome.lossy_verdict
        out["lossy_problems"] = [dataclasses.asdict(p) for p in outcome.lossy_problems]
    if isinstance(outcome, ScrubOutcome):
        out["findings"] = [dataclasses.asdict(f) for f in outcome.findings]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.integration.campaign_readers",
        description="Issue 13's corruption campaign through the Spark source and scrub (and the "
        "service, for the cross-check): flip bytes, read, classify, print a table per reader.",
    )
    parser.add_argument("--flips", type=int, default=400, help="sampled flips (default 400)")
    parser.add_argument("--seed", type=int, default=13, help="sampling seed (default 13)")
    parser.add_argument(
        "--every-byte",
        metavar="TOPIC",
        help="instead of sampling: every byte of TOPIC's smallest segment (masks 01, 80, ff)",
    )
    parser.add_argument("--only", type=int, action="append", help="run only flip #N (repeatable)")
    parser.add_argument(
        "--readers",
        default="service,spark-source,scrub",
        help="comma-separated, of service, spark-source, scrub (default: all three; the "
        "service's verdicts are only needed for the cross-check)",
    )
    parser.add_argument("--workers", type=int, default=None, help="default: the CPU count")
    parser.add_argument("--flip-timeout", type=float, default=30.0)
    parser.add_argument("--examples", type=int, default=3, help="examples per failure class")
    parser.add_argument("--json", type=Path, help="write every outcome to this file")
    parser.add_argument("--keep", type=Path, help="build the bucket under this folder and keep it")
    args = parser.parse_args(argv)
    readers = [r.strip() for r in args.readers.split(",") if r.strip()]
    unknown = set(readers) - {"service", *READERS}
    if unknown:
        parser.error(f"unknown readers: {sorted(unknown)}")
    with fixture_in(args.keep) as fixture:
        if args.every_byte:
            objects = smallest_segment(fixture, args.every_byte)
            flips = every_byte_flips(fixture, objects, (0x01, 0x80, 0xFF), args.seed)
        else:
            flips = sample_flips(fixture, args.flips, args.seed)
        if args.only:
            flips = [flips[i] for i in args.only]
        started = time.monotonic()

        def progress(reader: str, done: int, total: int) -> None:
            if done % 100 == 0 or done == total:
                print(
                    f"  {reader}: {done}/{total} flips, {time.monotonic() - started:.0f} s",
                    file=sys.stderr,
                )

        run = run_readers(
            fixture,
            flips,
            readers=readers,
            workers=args.workers,
            flip_timeout=args.flip_timeout,
            progress=progress,
        )
        print(
            f"{len(flips)} flips in {time.monotonic() - started:.1f} s "
            f"(seed {args.seed}, bucket seed {BUILD_SEED!r}; verdicts: {', '.join(VERDICTS)})\n"
        )
        print(report(fixture, run, per_class=args.examples))
        if args.json is not None:
            data = {r: [_json(o) for o in outs] for r, outs in run.outcomes.items()}
            args.json.write_text(json.dumps(data, indent=1, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
