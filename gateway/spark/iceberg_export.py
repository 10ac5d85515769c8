"""``export --format iceberg``, the job: plan the offsets the table lacks, write them with the
Arrow writer's tasks (one Parquet file per split and UTC day under the table's ``data/``), and
add every file to the table in one commit on the driver (:mod:`gateway.spark.iceberg`;
``docs/iceberg.md``). Dispatched to by :func:`gateway.spark.export.export`; pyiceberg is
imported only when an Iceberg export runs."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid

from pyspark.sql import SparkSession

from gateway.errors import ConfigurationError, ExportFailedError, GatewayError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.service.locate import remote_bounds
from gateway.spark import iceberg as ice
from gateway.spark.dataloss import missing
from gateway.spark.driver import ReadPlan, build_plan
from gateway.spark.iceberg_schema import check_table
from gateway.spark.job import ExportJob, IcebergTarget, TableResult
from gateway.spark.options import parse_options
from gateway.spark.output import settle, undo_export
from gateway.spark.read_options import EARLIEST, LATEST, Bound, BoundKind, Bounds, ReadOptions
from gateway.spark.rlmm import Claims, load_with_claims
from gateway.spark.sink import (
    OutputSpec,
    Written,
    open_output,
    partition_dir,
    redact,
    remove_leftovers,
    write_planned,
)
from gateway.spark.typed import for_iceberg
from gateway.spark.typed_plan import typed_sides

log = logging.getLogger("gateway.spark.export")

Gaps = dict[int, list[tuple[int, int]]]
"""The offset runs ``[lo, hi)`` the table lacks, by partition."""


def export_to_iceberg(spark: SparkSession, job: ExportJob) -> TableResult:
    """Plan what the table lacks, write it with the Arrow writer, commit once on the driver.

    The table's cumulative summary map says which offsets it holds; the read's resolved
    ``[start, end)`` of each partition minus those is what this run reads: one plan when it
    is one run of offsets per partition (the usual cron case: from the last commit to the
    end), else one plan per run. Nothing missing: no job, no commit."""
    target = job.iceberg or IcebergTarget()
    opts = parse_options(job.options)
    identifier = ice.table_identifier(target.table, opts.topic)
    shown = ".".join(identifier)
    try:
        catalog = ice.open_catalog(target.catalog, target.warehouse, dict(target.properties))
        table = ice.load_table(catalog, identifier)
    except GatewayError:
        raise
    except Exception as exc:  # the catalog's own errors: unreachable, refused, malformed
        where = redact(target.catalog or target.warehouse or "")
        raise ConfigurationError(f"catalog {where}: {type(exc).__name__}: {exc}") from exc
    typed = tuple(for_iceberg(side) for side in typed_sides(job.typed, job.topic))
    if table is not None:
        table = check_table(table, opts.include_headers, typed)
    done = ice.committed(table) if table is not None else ice.Committed()
    rlmm, claims = load_with_claims(opts)
    try:
        topic_id = str(rlmm.resolve_topic(opts.topic, opts.topic_id))
        isolation = opts.isolation.value
        if table is not None:
            ice.check_topic(table, done, opts.topic, topic_id, isolation)
        plan = build_plan(opts, rlmm, claims)
        held = done.ranges.get(opts.topic, {})
        _check_retention(rlmm, opts, held)
        wanted = {r.partition: (r.start_offset, r.end_offset) for r in plan.ranges}
        gaps = {p: ice.missing(lo, hi, held.get(p, [])) for p, (lo, hi) in wanted.items()}
        gaps = {p: g for p, g in gaps.items() if g}
        whole = all(gaps.get(p, []) == ([(lo, hi)] if lo < hi else []) for p, (lo, hi) in
                    wanted.items())  # fmt: skip
        plans = []
        if gaps:
            plans = [plan] if whole else gap_plans(opts, gaps, rlmm, claims)
    finally:
        rlmm.close()
    if table is None:
        try:
            table = ice.create_table(catalog, identifier, opts.include_headers, typed)
        except GatewayError:
            raise
        except Exception as exc:  # refused, or created by another run since it was loaded
            raise ConfigurationError(
                f"table {shown} could not be created: {type(exc).__name__}: {exc}"
            ) from exc
    location = ice.data_location(table)
    if not gaps:
        log.info("table %s holds every offset of the read: nothing to commit", shown)
        return TableResult(shown, table.location(), 0, 0, 0, done.snapshot_id, False, {})
    info: dict[str, object] = {"topicId": topic_id, "isolation": isolation}
    summary = ice.summary_properties(done, opts.topic, gaps, info)
    ranges = {str(p): [list(r) for r in g] for p, g in sorted(gaps.items())}
    out = OutputSpec(location, uuid.uuid4().hex[:8], compression=job.compression,
                     keep_partition_columns=True, typed=typed)  # fmt: skip
    results, snapshot_id, commit_s = _write_and_commit(spark, table, out, plans, summary)
    return TableResult(
        shown, table.location(), records=sum(r.records for r in results), files=len(results),
        bytes=sum(r.bytes for r in results), snapshot_id=snapshot_id, committed=True,
        ranges={opts.topic: ranges}, commit_seconds=round(commit_s, 3),
    )  # fmt: skip


def gap_plans(
    opts: ReadOptions, gaps: Gaps, rlmm: RemoteLogMetadataManager, claims: Claims
) -> list[ReadPlan]:
    """One plan per round: the k-th missing run of offsets of every partition that has one."""
    plans = []
    for k in range(max(len(g) for g in gaps.values())):
        runs = {p: g[k] for p, g in sorted(gaps.items()) if len(g) > k}
        plans.append(build_plan(round_options(opts, runs), rlmm, claims))
    return plans


def round_options(opts: ReadOptions, runs: dict[int, tuple[int, int]]) -> ReadOptions:
    """The read's options reading only ``runs``: offsets ``[lo, hi)`` of each partition named,
    in place of its own partitions and bounds."""
    topic = opts.topic

    def offsets(end: int) -> tuple[tuple[str, int, Bound], ...]:
        return tuple((topic, p, Bound(BoundKind.OFFSET, r[end])) for p, r in sorted(runs.items()))

    return dataclasses.replace(
        opts,
        partitions=tuple(sorted(runs)),
        start=Bounds(EARLIEST, offsets(0)),
        end=Bounds(LATEST, offsets(1)),
        ending_given=True,
    )


def _check_retention(rlmm: RemoteLogMetadataManager, opts: ReadOptions, held: Gaps) -> None:
    """Offsets after the table's first committed one that it does not hold and the remote tier
    no longer has (retention deleted them between two runs) are data loss, never a silent
    hole in the table: :class:`~gateway.errors.RemoteGapError` (``failOnDataLoss``)."""
    partitions = {tp.partition: tp for tp in rlmm.partitions(rlmm.resolve_topic(opts.topic))}
    for p, have in sorted(held.items()):
        tp = partitions.get(p)
        if tp is None or not have:
            continue
        remote_start = remote_bounds(rlmm, tp)[0]
        for lo, hi in ice.missing(have[0][0], remote_start, have):
            reason = (
                "retention deleted them before the table held them (it holds "
                f"{[list(r) for r in have]}): export more often than the topic's retention"
            )
            missing(tp, lo, hi - 1, reason, fail=opts.fail_on_data_loss)


def _write_and_commit(
    spark: SparkSession,
    table: ice.Table,
    out: OutputSpec,
    plans: list[ReadPlan],
    summary: dict[str, str],
) -> tuple[list[Written], int, float]:
    """The executors write every plan's splits into ``out``, the driver commits the files in
    one transaction (``summary`` in its snapshot): the files written, the new snapshot's id, the
    commit's seconds. On any failure before the commit is known to have failed or succeeded
    the job's files are removed (a commit whose outcome is unknown keeps them)."""
    location = out.uri
    fs, root = open_output(location)
    items = [(i, split) for i, plan in enumerate(plans) for split in plan.splits]
    contexts = tuple(plan.context for plan in plans)
    folders = [partition_dir(root, split) for _, split in items]
    results: list[Written] = []
    try:
        try:
            if items:
                job = functools.partial(write_planned, contexts=contexts, out=out)
                rdd = spark.sparkContext.parallelize(items, len(items))
                results = rdd.flatMap(job).collect()
            remove_leftovers(fs, folders, out.job)
            files = [location + w.path[len(root) :] for w in results if w.path is not None]
            committing = time.monotonic()
            snapshot_id = ice.commit(table, files, summary)
            commit_s = time.monotonic() - committing
        except ice.CommitStateUnknownException as exc:
            raise ExportFailedError(
                f"commit to table {'.'.join(table.name())}: its outcome is unknown ({exc}); the "
                f"job's {len(results)} files are left in place: if the table's newest snapshot "
                f"has no {ice.RANGES_KEY} of this run, they are not in the table"
            ) from exc
        except BaseException as exc:
            settle(spark)
            undo_export(fs, root, folders, out.job, created=False)
            if isinstance(exc, ice.COMMIT_ERRORS):
                raise ExportFailedError(
                    f"commit to table {'.'.join(table.name())} failed, nothing committed and "
                    f"the job's files removed: {type(exc).__name__}: {exc}"
                ) from exc
            raise
    except OSError as exc:  # the driver's own listing and deletes
        raise ExportFailedError(f"export to {redact(location)}: {exc}") from exc
    return results, snapshot_id, commit_s
