"""An export's output folder on the driver: ``--mode`` applied as Spark's writer applies it,
and after a failure the job's own files removed once its other tasks have stopped, so a retry
meets the output as it was."""

from __future__ import annotations

import logging
import time

import pyarrow.fs as pafs
from pyspark.sql import SparkSession

from gateway.errors import ConfigurationError
from gateway.spark.sink import OBJECT_STORES, make_dir, redact, remove_job_files

log = logging.getLogger("gateway.spark.export")

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
