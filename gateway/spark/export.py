"""The export job: a topic's records from the bucket to Parquet (or ORC, JSON), by partition.

    tiered-gateway export --store s3://bucket --key-prefix tiered/ --topic orders \\
        --output s3a://lake/orders --master local[*]
    spark-submit --master spark://host:7077 gateway/commands/export.py --store ... --output ...
    python -m gateway.commands.export --store ... --output ...

(the arguments are parsed in :mod:`gateway.commands.export`, which hands over a typed
:class:`~gateway.spark.job.ExportJob`; :func:`export` answers an
:class:`~gateway.spark.job.ExportSummary`).

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
  commit, reading only the offsets the table does not hold yet: that job is
  :mod:`gateway.spark.iceberg_export` (``docs/iceberg.md``).

A session is built when none exists (``--master``, else ``local[*]`` outside spark-submit,
whose ``--master`` wins). Progress goes to stderr: the running stages' finished and running
tasks, refreshed in place on a terminal and every few seconds otherwise. The last line on
stdout is a JSON summary. A failed task (corrupt data, an unreachable store) ends the job with
exit code 1 and its error on stderr, and no ``_SUCCESS``; it leaves nothing of its own behind
(the output folder it created is removed, or in an existing one the files of this job:
:mod:`gateway.spark.output`), so a retry meets the output as it was.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
import uuid
from collections.abc import Mapping

import pyarrow.fs as pafs
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.functions import count, lit

from gateway.errors import ConfigurationError, ExportFailedError
from gateway.spark import FORMAT_NAME
from gateway.spark.driver import build_plan
from gateway.spark.job import (
    ExportJob,
    ExportSummary,
    FilesResult,
    SparkResult,
    TableResult,
    WriteResult,
)
from gateway.spark.logs import default_log_path
from gateway.spark.options import parse_options
from gateway.spark.output import prepare_output, settle, undo_export
from gateway.spark.progress import Progress
from gateway.spark.session import spark_session
from gateway.spark.sink import (
    OutputSpec,
    Written,
    open_output,
    partition_dir,
    redact,
    remove_leftovers,
    write_split,
)
from gateway.spark.source import TieredKafkaDataSource
from gateway.spark.typed_plan import typed_sides

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1  # a task failed: corrupt data, the store unreachable
EXIT_BAD_INPUT = 2
_SPARK_CODEC_NAMES = {("orc", "gzip"): "zlib"}  # ORC's name for deflate
_CODECS = {
    "orc": frozenset({"none", "snappy", "zstd", "lz4", "gzip"}),
    "json": frozenset({"none", "gzip", "lz4", "snappy"}),  # Hadoop's codecs without natives
}


def read_topic(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark.read.format(FORMAT_NAME).options(**options).load()


def writer_of(job: ExportJob) -> str:
    """``--writer``, defaulting to arrow for Parquet and Spark's writer for other formats;
    checks that the format takes the codec."""
    writer = job.writer or ("arrow" if job.format in ("parquet", "iceberg") else "spark")
    if job.format == "iceberg" and writer != "arrow":
        raise ConfigurationError("--format iceberg writes with the arrow writer only")
    if writer == "arrow" and job.format not in ("parquet", "iceberg"):
        raise ConfigurationError(f"--writer arrow writes parquet only, not {job.format}")
    if job.compression not in _CODECS.get(job.format, {job.compression}):
        raise ConfigurationError(
            f"--compression {job.compression} is not one {job.format} takes: "
            + ", ".join(sorted(_CODECS[job.format]))
        )
    return writer


def export(spark: SparkSession, job: ExportJob) -> ExportSummary:
    """Run the export ``job``; its summary (printed last)."""
    started = time.monotonic()
    writer = writer_of(job)
    progress = Progress(spark, f"export {job.topic}") if not job.quiet else _Quiet()
    result: WriteResult
    try:
        with progress:
            if job.format == "iceberg":
                from gateway.spark.iceberg_export import export_to_iceberg  # noqa: PLC0415

                result = export_to_iceberg(spark, job)  # (pyiceberg's second of imports here)
            elif writer == "arrow":
                result = _export_with_arrow(spark, job)
            else:
                result = _export_with_spark(spark, job)
    except AnalysisException as exc:  # an existing output, a bad path or option: no traceback
        raise ConfigurationError(f"export to {job.output}: {_last_line(exc)}") from exc
    except (PythonException, Py4JJavaError) as exc:  # a task failed (after Spark's retries)
        raise ExportFailedError(f"export of {job.topic} failed: {task_error(exc)}") from exc
    seconds = time.monotonic() - started
    output = result.location if isinstance(result, TableResult) else job.output
    assert output is not None
    return ExportSummary(job.topic, redact(output), job.format, writer, result, seconds)


def _export_with_spark(spark: SparkSession, job: ExportJob) -> SparkResult:
    assert job.output is not None and job.mode is not None
    observation = Observation("export")
    df = read_topic(spark, job.options)
    observed = df.observe(observation, count(lit(1)).alias("records"))
    writer = observed.write.mode(job.mode).partitionBy("topic", "partition")
    codec = _SPARK_CODEC_NAMES.get((job.format, job.compression), job.compression)
    writer.format(job.format).option("compression", codec).save(job.output)
    return SparkResult(int(observation.get.get("records", 0)))


def _export_with_arrow(spark: SparkSession, job: ExportJob) -> FilesResult:
    """Plan on the driver, one task per split writing its own Parquet file."""
    assert job.output is not None and job.mode is not None
    typed = typed_sides(job.typed, job.topic)
    out = OutputSpec(job.output, uuid.uuid4().hex[:8], compression=job.compression, typed=typed)
    fs, root = open_output(job.output)
    plan = build_plan(parse_options(job.options))  # before --mode overwrite deletes
    shown = redact(job.output)
    folders = [partition_dir(root, s) for s in plan.splits]
    try:
        existed = fs.get_file_info(root).type != pafs.FileType.NotFound
        if not prepare_output(fs, root, job.mode, shown):
            return FilesResult(0, 0, 0, skipped=True)
        results: list[Written] = []
        try:
            if plan.splits:
                task = functools.partial(write_split, ctx=plan.context, out=out)
                rdd = spark.sparkContext.parallelize(plan.splits, len(plan.splits))
                results = rdd.map(task).collect()
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
    return FilesResult(
        records=sum(r.records for r in results),
        files=sum(1 for r in results if r.path is not None),
        bytes=sum(r.bytes for r in results),
    )


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


def run_export(job: ExportJob) -> int:
    """The CLI's entry: build (or reuse) a session, export, print the summary."""
    log_path = job.spark_log or default_log_path("export")
    spark, _ = spark_session(job.master, "tiered-gateway export", log_path)
    try:
        summary = export(spark, job)
    except ExportFailedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"(Spark's log, with the traces: {log_path})", file=sys.stderr)
        return EXIT_FAILED
    result = summary.result
    if isinstance(result, TableResult) and not result.committed:
        print(f"nothing new: table {result.table} holds every offset of the read; "
              "nothing committed", file=sys.stderr)  # fmt: skip
    print(json.dumps(summary.as_dict(), separators=(",", ":")))
    return EXIT_OK
