"""The export job: a topic's records from the bucket to Parquet (or ORC, JSON), by partition.

    tiered-gateway export --store s3://bucket --key-prefix tiered/ --topic orders \\
        --output s3a://lake/orders --master local[*]
    spark-submit --master spark://host:7077 gateway/spark/export.py --store ... --output ...
    python -m gateway.spark.export --store ... --output ...

Reads with the ``tiered-kafka`` data source and writes ``partitionBy("topic", "partition")``,
so the output has one directory per Kafka partition. A session is built when none exists
(``--master``, else ``local[*]`` outside spark-submit, whose ``--master`` wins). Progress goes
to stderr: the write stage's finished and running tasks, refreshed in place on a terminal and
every few seconds otherwise. The last line on stdout is a JSON summary with the record count
(counted by an :class:`pyspark.sql.Observation` during the write, not by a second pass).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import TextIO

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql.functions import count, lit

from gateway.commands.export import add_arguments, reader_options
from gateway.errors import ConfigurationError, GatewayError
from gateway.spark import FORMAT_NAME
from gateway.spark.source import TieredKafkaDataSource

EXIT_OK = 0
EXIT_BAD_INPUT = 2


class Progress:
    """A daemon thread printing the running stages' task counts until stopped."""

    def __init__(self, spark: SparkSession, label: str, out: TextIO = sys.stderr) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._label = label
        self._out = out
        self._tty = out.isatty()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="export-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._tty:
            self._out.write("\n")
            self._out.flush()

    def line(self) -> str | None:
        stages = [self._tracker.getStageInfo(s) for s in self._tracker.getActiveStageIds()]
        known = [s for s in stages if s is not None]
        if not known:
            return None
        done = sum(s.numCompletedTasks for s in known)
        total = sum(s.numTasks for s in known)
        running = sum(s.numActiveTasks for s in known)
        elapsed = time.monotonic() - self._started
        return f"{self._label}: {done}/{total} tasks done, {running} running, {elapsed:.0f} s"

    def _run(self) -> None:
        every = 0.5 if self._tty else 5.0
        while not self._stop.wait(every):
            text = self.line()
            if text is None:
                continue
            self._out.write(f"\r{text}\x1b[K" if self._tty else f"{text}\n")
            self._out.flush()


def session(master: str | None, app_name: str = "tiered-gateway export") -> SparkSession:
    """The active session, else a new one (``local[*]`` unless spark-submit sets a master)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):
        # Local Python workers must run this interpreter (its venv has gateway), not the
        # first python3 on PATH; SparkContext reads only the environment for it.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()


def read_topic(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    spark.dataSource.register(TieredKafkaDataSource)
    return spark.read.format(FORMAT_NAME).options(**options).load()


def export(spark: SparkSession, args: argparse.Namespace) -> dict[str, object]:
    """Run the export; the summary printed at the end."""
    started = time.monotonic()
    observation = Observation("export")
    try:
        df = read_topic(spark, reader_options(args))
        observed = df.observe(observation, count(lit(1)).alias("records"))
        writer = observed.write.mode(args.mode).partitionBy("topic", "partition")
        with Progress(spark, f"export {args.topic}") if not args.quiet else _Quiet():
            writer.format(args.format).save(args.output)
    except AnalysisException as exc:  # an existing output, a bad path or option: no traceback
        raise ConfigurationError(f"export to {args.output}: {_last_line(exc)}") from exc
    seconds = time.monotonic() - started
    records = int(observation.get.get("records", 0))
    return {
        "topic": args.topic,
        "output": args.output,
        "format": args.format,
        "records": records,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds) if seconds > 0 else None,
    }


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


def run_export(args: argparse.Namespace) -> int:
    """The CLI's entry: build (or reuse) a session, export, print the summary."""
    spark = session(args.master)
    summary = export(spark, args)
    print(json.dumps(summary, separators=(",", ":")))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit's entry (``gateway/spark/export.py`` or ``-m gateway.spark.export``)."""
    parser = argparse.ArgumentParser(
        prog="gateway.spark.export", description="Export a topic from the bucket with Spark."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_export(args)
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
