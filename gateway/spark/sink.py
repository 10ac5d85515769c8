"""Executor side of ``export``'s Arrow writer: one split's records as one Parquet file.

Spark schedules the splits (one task each, retried like any task) and each task writes its
records with Arrow's C++ Parquet writer, so no row crosses into the JVM: the JVM's Arrow to
row conversion, sort and Parquet encoder cost more CPU than the whole read here
(``docs/benchmarks.md``). No pyspark is imported here.

The output is the layout of Spark's ``partitionBy("topic", "partition")``:
``OUTPUT/topic=T/partition=P/part-<start offset>-<part>-<job>.<codec>.parquet`` without the two
partition columns in the files, so ``spark.read.parquet(OUTPUT)``, Hive, Trino or
``pyarrow.dataset(..., partitioning="hive")`` read the same table. Timestamps are Parquet
``TIMESTAMP(MICROS, UTC)``.

A file appears whole or not at all: it is written under a dot name (which those readers
skip) and renamed into place once closed (on S3 or GCS a server-side copy), and a failed task
deletes its temp file. A name is a function of the split and the job, so a retried task
replaces its own file rather than adding a second one, and ``--mode append`` adds files.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gateway.errors import ConfigurationError
from gateway.spark.plan import Split
from gateway.spark.read import read_split
from gateway.spark.segments import ReadContext

PARTITION_COLUMNS: Final = ("topic", "partition")
TEMP_MARK: Final = ".tmp-"
# Arrow's Hadoop-style aliases: Spark jobs name S3 buckets s3a://.
_SCHEME_ALIASES: Final = {"s3a": "s3", "s3n": "s3"}
_SECRET_PARAMS: Final = frozenset({"access_key", "secret_key", "session_token"})
OBJECT_STORES: Final = frozenset({"s3", "gcs", "abfs"})


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """Where and how the tasks write (small and picklable)."""

    uri: str
    job: str  # a short id of this export, in every file name
    compression: str = "snappy"
    row_group_rows: int = 1 << 20
    row_group_bytes: int = 128 << 20


@dataclass(frozen=True, slots=True)
class Written:
    """One task's result: the records and bytes of its file (``path`` None: no records)."""

    records: int
    bytes: int
    path: str | None


def open_output(uri: str) -> tuple[pafs.FileSystem, str]:
    """The Arrow filesystem and path of an output URI or local path."""
    scheme, sep, rest = uri.partition("://")
    if sep and scheme.lower() in _SCHEME_ALIASES:
        uri = f"{_SCHEME_ALIASES[scheme.lower()]}://{rest}"
    try:
        fs, path = pafs.FileSystem.from_uri(uri if sep else os.path.abspath(uri))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise ConfigurationError(
            f"output {redact(uri)!r}: Arrow cannot write there "
            f"({str(exc).replace(uri, redact(uri))}); use --writer spark for "
            "paths only Hadoop filesystems reach"
        ) from exc
    return fs, path.rstrip("/")


def make_dir(fs: pafs.FileSystem, path: str) -> None:
    """Create a directory; none on object stores, where it would be a marker object."""
    if fs.type_name not in OBJECT_STORES:
        fs.create_dir(path, recursive=True)


def file_name(split: Split, out: OutputSpec) -> str:
    codec = "" if out.compression == "none" else f".{out.compression}"
    return f"part-{split.start_offset:020d}-{split.part:04d}-{out.job}{codec}.parquet"


def partition_dir(root: str, split: Split) -> str:
    return f"{root}/topic={split.topic}/partition={split.partition}"


def write_split(split: Split, ctx: ReadContext, out: OutputSpec) -> Written:
    """Read ``split`` and write its records as one Parquet file (none when it has none)."""
    return write_batches(read_split(split, ctx), split, out)


def write_batches(batches: Iterable[pa.RecordBatch], split: Split, out: OutputSpec) -> Written:
    fs, root = open_output(out.uri)
    folder = partition_dir(root, split)
    name = file_name(split, out)
    final = f"{folder}/{name}"
    target = f"{folder}/.{name}{TEMP_MARK}{uuid.uuid4().hex}"
    writer: pq.ParquetWriter | None = None
    pending: list[pa.RecordBatch] = []
    rows = size = records = 0
    try:
        for batch in batches:
            body = batch.drop_columns(list(PARTITION_COLUMNS))
            if writer is None:
                make_dir(fs, folder)
                writer = pq.ParquetWriter(
                    target, body.schema, filesystem=fs, compression=out.compression
                )
            pending.append(body)
            rows += body.num_rows
            size += body.nbytes
            if rows >= out.row_group_rows or size >= out.row_group_bytes:
                writer.write_table(pa.Table.from_batches(pending), row_group_size=rows)
                records += rows
                pending, rows, size = [], 0, 0
        if writer is None:
            return Written(0, 0, None)
        if pending:
            writer.write_table(pa.Table.from_batches(pending), row_group_size=rows)
            records += rows
        writer.close()
        writer = None
        fs.move(target, final)
    except BaseException:
        if writer is not None:
            _close_quietly(writer)
        _remove(fs, target)
        raise
    return Written(records, fs.get_file_info(final).size or 0, final)


def _close_quietly(writer: pq.ParquetWriter) -> None:
    with contextlib.suppress(OSError, pa.ArrowException):
        writer.close()


def _remove(fs: pafs.FileSystem, path: str) -> None:
    with contextlib.suppress(OSError):  # FileNotFoundError included
        fs.delete_file(path)


def _remove_job_files(
    fs: pafs.FileSystem, folders: Iterable[str], job: str, *, temp_only: bool
) -> int:
    """Delete the files job ``job`` wrote in ``folders`` (only its temp files when
    ``temp_only``); other jobs' files stay. How many were removed."""
    mine = []
    for folder in sorted(set(folders)):
        selector = pafs.FileSelector(folder, allow_not_found=True)
        for info in fs.get_file_info(selector):
            name = info.base_name
            if info.type != pafs.FileType.File or f"-{job}." not in name:
                continue
            temp = name.startswith(".part-") and TEMP_MARK in name
            if temp or (not temp_only and name.lstrip(".").startswith("part-")):
                mine.append(info.path)
    for path in mine:
        _remove(fs, path)
    return len(mine)


def remove_leftovers(fs: pafs.FileSystem, folders: Iterable[str], job: str) -> int:
    """Delete the temp files this job's killed task attempts left in ``folders`` (other jobs
    writing to the same output keep theirs); how many were removed."""
    return _remove_job_files(fs, folders, job, temp_only=True)


def remove_job_files(fs: pafs.FileSystem, folders: Iterable[str], job: str) -> int:
    """Delete every file, finished or temporary, that job ``job`` wrote in ``folders``."""
    return _remove_job_files(fs, folders, job, temp_only=False)


def redact(uri: str) -> str:
    """``uri`` without credentials (``user:secret@`` and key query parameters) for messages."""
    parts = urlsplit(uri)
    if not parts.scheme or (parts.password is None and not parts.query):
        return uri
    netloc = parts.netloc.rpartition("@")[2]
    if parts.username is not None:
        netloc = f"***@{netloc}"
    query = [(k, "***" if k.lower() in _SECRET_PARAMS else v) for k, v in parse_qsl(parts.query)]
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="*:")))
