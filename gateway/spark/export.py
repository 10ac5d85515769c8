"""The export job: a topic's records from the bucket to Parquet (or ORC, JSON), by partition.

    tiered-gateway export --store s3://bucket --key-prefix tiered/ --topic orders \\
        --output s3a://lake/orders --master local[*]
    spark-submit --master spark://host:7077 gateway/commands/export.py --store ... --output ...
    python -m gateway.commands.export --store ... --output ...

(the arguments are parsed in :mod:`gateway.commands.export`, which hands over here).

Both writers give the layout of ``partitionBy("topic", "partition")``, one directory per
Kafka partition:

* ``--writer arrow`` (the default for Parquet): the driver plans the read once
  (:func:`~gateway.spark.driver.build_plan`) and runs one task per split, each writing its
  split's records as one Parquet file with Arrow (:mod:`gateway.spark.sink`); the record count
  is the sum of the tasks' results. Any path Arrow reaches: local or shared filesystems,
  ``s3://`` (``s3a://`` is read as ``s3://``, credentials from the AWS default chain), ``gs://``,
  ``hdfs://``. ``--mode`` acts as Spark's; ``_SUCCESS`` is written last.
* ``--writer spark`` (ORC, JSON, or Parquet to paths only Hadoop reaches): the ``tiered-kafka``
  data source into Spark's DataFrame writer, the count by an :class:`pyspark.sql.Observation`
  during the write.
* ``--format iceberg``: the Arrow writer's tasks write one Parquet file per (split, UTC day)
  into the table's ``data/`` folder, then the driver adds them all to an Iceberg table in one
  commit (:mod:`gateway.spark.iceberg`), reading only the offsets the table does not hold yet
  (``docs/iceberg.md``).

A session is built when none exists (``--master``, else ``local[*]`` outside spark-submit,
whose ``--master`` wins). Progress goes to stderr: the running stages' finished and running
tasks, refreshed in place on a terminal and every few seconds otherwise. The last line on
stdout is a JSON summary. A failed task (corrupt data, an unreachable store) ends the job with
exit code 1 and its error on stderr, and no ``_SUCCESS``; it leaves nothing of its own behind
(the output folder it created is removed, or in an existing one the files of this job), so a
retry meets the output as it was.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import time
import uuid
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.functions import count, lit

from gateway.errors import ConfigurationError, ExportFailedError, GatewayError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.service.locate import remote_bounds
from gateway.spark import FORMAT_NAME
from gateway.spark.dataloss import missing
from gateway.spark.driver import Claims, ReadPlan, build_plan, load_with_claims
from gateway.spark.logs import default_log_path
from gateway.spark.options import ReadOptions, parse_options
from gateway.spark.progress import Progress
from gateway.spark.session import spark_session
from gateway.spark.sink import (
    OBJECT_STORES,
    OutputSpec,
    Written,
    make_dir,
    open_output,
    partition_dir,
    redact,
    remove_job_files,
    remove_leftovers,
    write_planned,
    write_split,
)
from gateway.spark.source import TieredKafkaDataSource
from gateway.spark.typed import TypedSide, for_iceberg
from gateway.spark.typed_plan import typed_sides

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1  # a task failed: corrupt data, the store unreachable
EXIT_BAD_INPUT = 2
_SPARK_CODEC_NAMES = {("orc", "gzip"): "zlib"}  # ORC's name for deflate
_CODECS = {
    "orc": frozenset({"none", "snappy", "zstd", "lz4", "gzip"}),
    "json": frozenset({"none", "gzip", "lz4", "snappy"}),  # Hadoop's codecs without natives
}


def read_topic(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark.read.format(FORMAT_NAME).options(**options).load()


def writer_of(args: argparse.Namespace) -> str:
    """``--writer``, defaulting to arrow for Parquet and Spark's writer for other formats;
    checks that the format takes the codec."""
    writer: str = args.writer or ("arrow" if args.format in ("parquet", "iceberg") else "spark")
    if args.format == "iceberg" and writer != "arrow":
        raise ConfigurationError("--format iceberg writes with the arrow writer only")
    if writer == "arrow" and args.format not in ("parquet", "iceberg"):
        raise ConfigurationError(f"--writer arrow writes parquet only, not {args.format}")
    if args.compression not in _CODECS.get(args.format, {args.compression}):
        raise ConfigurationError(
            f"--compression {args.compression} is not one {args.format} takes: "
            + ", ".join(sorted(_CODECS[args.format]))
        )
    return writer


def export(
    spark: SparkSession, args: argparse.Namespace, options: dict[str, str]
) -> dict[str, object]:
    """Run the export reading with the ``tiered-kafka`` ``options``; the summary printed last."""
    started = time.monotonic()
    writer = writer_of(args)
    progress = Progress(spark, f"export {args.topic}") if not args.quiet else _Quiet()
    written: dict[str, object]
    try:
        with progress:
            if args.format == "iceberg":
                written = _export_to_iceberg(spark, args, options)
            elif writer == "arrow":
                written = {**_export_with_arrow(spark, args, options)}
            else:
                written = {**_export_with_spark(spark, args, options)}
    except AnalysisException as exc:  # an existing output, a bad path or option: no traceback
        raise ConfigurationError(f"export to {args.output}: {_last_line(exc)}") from exc
    except (PythonException, Py4JJavaError) as exc:  # a task failed (after Spark's retries)
        raise ExportFailedError(f"export of {args.topic} failed: {task_error(exc)}") from exc
    seconds = time.monotonic() - started
    records = written.get("records", 0)
    assert isinstance(records, int)
    output = written.pop("output", None) or args.output
    assert isinstance(output, str)
    return {
        "topic": args.topic,
        "output": redact(output),
        "format": args.format,
        "writer": writer,
        **written,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds) if seconds > 0 and records else None,
    }


def _export_with_spark(
    spark: SparkSession, args: argparse.Namespace, options: dict[str, str]
) -> dict[str, int]:
    observation = Observation("export")
    df = read_topic(spark, options)
    observed = df.observe(observation, count(lit(1)).alias("records"))
    writer = observed.write.mode(args.mode).partitionBy("topic", "partition")
    codec = _SPARK_CODEC_NAMES.get((args.format, args.compression), args.compression)
    writer.format(args.format).option("compression", codec).save(args.output)
    return {"records": int(observation.get.get("records", 0))}


def _export_with_arrow(
    spark: SparkSession, args: argparse.Namespace, options: dict[str, str]
) -> dict[str, int]:
    """Plan on the driver, one task per split writing its own Parquet file."""
    out = OutputSpec(
        args.output, uuid.uuid4().hex[:8], compression=args.compression, typed=typed_sides(args)
    )
    fs, root = open_output(args.output)
    plan = build_plan(parse_options(options))  # before --mode overwrite deletes
    shown = redact(args.output)
    folders = [partition_dir(root, s) for s in plan.splits]
    try:
        existed = fs.get_file_info(root).type != pafs.FileType.NotFound
        if not prepare_output(fs, root, args.mode, shown):
            return {"records": 0, "files": 0, "bytes": 0, "skipped": True}
        results: list[Written] = []
        try:
            if plan.splits:
                job = functools.partial(write_split, ctx=plan.context, out=out)
                rdd = spark.sparkContext.parallelize(plan.splits, len(plan.splits))
                results = rdd.map(job).collect()
            remove_leftovers(fs, folders, out.job)
            with fs.open_output_stream(f"{root}/_SUCCESS"):
                pass
        except BaseException:
            # A failed export leaves nothing of its own: a retry meets the output as it was.
            # Its other tasks may still be writing: stop them and wait before removing.
            settle(spark)
            undo_export(fs, root, folders, out.job, created=not existed)
            raise
    except OSError as exc:  # the driver's own listing, deletes and _SUCCESS
        raise ExportFailedError(f"export to {shown}: {exc}") from exc
    return {
        "records": sum(r.records for r in results),
        "files": sum(1 for r in results if r.path is not None),
        "bytes": sum(r.bytes for r in results),
    }


_BOUND_OPTIONS = frozenset(
    {
        "startingoffsets", "endingoffsets", "startingtimestamp", "endingtimestamp",
        "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "partitions",
    }
)  # fmt: skip


def _export_to_iceberg(
    spark: SparkSession, args: argparse.Namespace, options: dict[str, str]
) -> dict[str, object]:
    """Plan what the table lacks, write it with the Arrow writer, commit once on the driver.

    The table's cumulative summary map says which offsets it holds; the read's resolved
    ``[start, end)`` of each partition minus those is what this run reads: one plan when it
    is one run of offsets per partition (the usual cron case: from the last commit to the
    end), else one plan per run. Nothing missing: no job, no commit."""
    from gateway.spark import iceberg as ice  # noqa: PLC0415 (a second of imports: only here)

    opts = parse_options(options)
    identifier = ice.table_identifier(args.table, opts.topic)
    shown = ".".join(identifier)
    properties = _catalog_properties(args.catalog_property or [])
    try:
        catalog = ice.open_catalog(args.catalog, args.warehouse, properties)
        table = ice.load_table(catalog, identifier)
    except GatewayError:
        raise
    except Exception as exc:  # the catalog's own errors: unreachable, refused, malformed
        where = redact(args.catalog or args.warehouse or "")
        raise ConfigurationError(f"catalog {where}: {type(exc).__name__}: {exc}") from exc
    typed = tuple(for_iceberg(side) for side in typed_sides(args))
    if table is not None:
        table = ice.check_table(table, opts.include_headers, typed)
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
            plans = [plan] if whole else _gap_plans(options, opts.topic, gaps, rlmm, claims)
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
    result: dict[str, object] = {"table": shown, "output": table.location()}
    if not gaps:
        log.info("table %s holds every offset of the read: nothing to commit", shown)
        return {**result, "records": 0, "files": 0, "bytes": 0, "snapshot_id": done.snapshot_id,
                "committed": False, "ranges": {}}  # fmt: skip
    info: dict[str, object] = {"topicId": topic_id, "isolation": isolation}
    summary = ice.summary_properties(done, opts.topic, gaps, info)
    written = _write_and_commit(
        spark, table, location, plans, compression=args.compression, summary=summary, typed=typed
    )
    ranges = {str(p): [list(r) for r in g] for p, g in sorted(gaps.items())}
    return {**result, **written, "committed": True, "ranges": {opts.topic: ranges}}


def _catalog_properties(pairs: list[str]) -> dict[str, str]:
    """``--catalog-property KEY=VALUE`` (repeated) as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"--catalog-property {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _gap_plans(
    options: dict[str, str],
    topic: str,
    gaps: dict[int, list[tuple[int, int]]],
    rlmm: RemoteLogMetadataManager,
    claims: Claims,
) -> list[ReadPlan]:
    """One plan per round: the k-th missing run of offsets of every partition that has one."""
    base = {k: v for k, v in options.items() if k.lower() not in _BOUND_OPTIONS}
    plans = []
    for k in range(max(len(g) for g in gaps.values())):
        runs = {p: g[k] for p, g in sorted(gaps.items()) if len(g) > k}
        round_options = {
            **base,
            "partitions": ",".join(str(p) for p in runs),
            "startingOffsets": json.dumps({topic: {str(p): lo for p, (lo, _) in runs.items()}}),
            "endingOffsets": json.dumps({topic: {str(p): hi for p, (_, hi) in runs.items()}}),
        }
        plans.append(build_plan(parse_options(round_options), rlmm, claims))
    return plans


def _check_retention(
    rlmm: RemoteLogMetadataManager, opts: ReadOptions, held: dict[int, list[tuple[int, int]]]
) -> None:
    """Offsets after the table's first committed one that it does not hold and the remote tier
    no longer has (retention deleted them between two runs) are data loss, never a silent
    hole in the table: :class:`~gateway.errors.RemoteGapError` (``failOnDataLoss``)."""
    from gateway.spark import iceberg as ice  # noqa: PLC0415

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
    table: Table,
    location: str,
    plans: list[ReadPlan],
    *,
    compression: str,
    summary: dict[str, str],
    typed: tuple[TypedSide, ...] = (),
) -> dict[str, object]:
    """The executors write every plan's splits, the driver commits the files in one
    transaction; on any failure before the commit is known to have failed or succeeded the
    job's files are removed (a commit whose outcome is unknown keeps them)."""
    from gateway.spark import iceberg as ice  # noqa: PLC0415

    out = OutputSpec(location, uuid.uuid4().hex[:8], compression=compression,
                     keep_partition_columns=True, typed=typed)  # fmt: skip
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
    return {
        "records": sum(r.records for r in results),
        "files": len(results),
        "bytes": sum(r.bytes for r in results),
        "snapshot_id": snapshot_id,
        "commit_seconds": round(commit_s, 3),
    }


SETTLE_S = 60.0


def settle(spark: SparkSession, wait_s: float = SETTLE_S) -> None:
    """Cancel this context's jobs and wait (at most ``wait_s``) until no task runs on any
    executor (a failed stage is over before its other tasks are), so no task of a failed job
    writes a file after its cleanup."""
    context = spark.sparkContext
    context.cancelAllJobs()
    tracker = context.statusTracker()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        running = sum(e.numRunningTasks for e in tracker.getExecutorInfos())
        if not running and not tracker.getActiveStageIds():
            return
        time.sleep(0.1)


def undo_export(
    fs: pafs.FileSystem, root: str, folders: list[str], job: str, *, created: bool
) -> None:
    """After a failure: the output folder when this export created it, else the files this
    job wrote in it (other jobs' files stay). Best effort: the failure is what is reported."""
    try:
        if created:
            fs.delete_dir(root)
        else:
            remove_job_files(fs, folders, job)
    except OSError:
        log.warning("export to %s failed and its files could not all be removed", redact(root))


def prepare_output(fs: pafs.FileSystem, root: str, mode: str, shown: str) -> bool:
    """Apply ``--mode`` as Spark's writer does; False when the export is to be skipped."""
    exists = fs.get_file_info(root).type != pafs.FileType.NotFound
    if exists and mode == "overwrite" and fs.type_name in OBJECT_STORES and "/" not in root:
        raise ConfigurationError(
            f"export to {shown}: --mode overwrite would empty the whole bucket; export to a "
            "prefix in it"
        )
    if exists and mode == "errorifexists":
        raise ConfigurationError(
            f"export to {shown}: the output already exists (--mode overwrite or append)"
        )
    if exists and mode == "ignore":
        return False
    if exists and mode == "overwrite":
        fs.delete_dir(root)
    make_dir(fs, root)
    return True


def task_error(exc: Exception) -> str:
    """The Python error of a failed task: its exception line, not Spark's wrapping."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        name, sep, _ = line.partition(": ")
        if sep and name.rsplit(".", 1)[-1].endswith(("Error", "Exception")):
            return line
    return lines[-1] if lines else type(exc).__name__


def _last_line(exc: AnalysisException) -> str:
    """Spark wraps a planning error's whole Python traceback; its last line is the error."""
    lines = [
        line.strip()
        for line in exc.getMessage().splitlines()
        if line.strip() and not line.strip().startswith("SQLSTATE")
    ]
    return lines[-1] if lines else str(exc)


class _Quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run_export(args: argparse.Namespace, options: dict[str, str]) -> int:
    """The CLI's entry: build (or reuse) a session, export, print the summary."""
    log_path = args.spark_log or default_log_path("export")
    spark, _ = spark_session(args.master, "tiered-gateway export", log_path)
    try:
        summary = export(spark, args, options)
    except ExportFailedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"(Spark's log, with the traces: {log_path})", file=sys.stderr)
        return EXIT_FAILED
    if summary.get("committed") is False:
        print(f"nothing new: table {summary['table']} holds every offset of the read; "
              "nothing committed", file=sys.stderr)  # fmt: skip
    print(json.dumps(summary, separators=(",", ":")))
    return EXIT_OK
