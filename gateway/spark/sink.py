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

The Iceberg export (:mod:`gateway.spark.iceberg`) writes with :func:`write_split_by_day`: the
same files in the same folders, but one per (split, UTC day of the record timestamps) and
keeping the ``topic`` and ``partition`` columns, since Iceberg's ``add_files`` needs every
data file inside one partition of ``identity(partition), day(timestamp)`` and infers it from
the file's column statistics. The day is in the name (``part-<start>-<part>-d<day>-<job>``),
so a retried task still replaces its own files.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gateway.errors import ConfigurationError
from gateway.spark.plan import Split
from gateway.spark.read import read_split
from gateway.spark.segments import ReadContext
from gateway.spark.typed import TypedSide, typed_batch

PARTITION_COLUMNS: Final = ("topic", "partition")
TEMP_MARK: Final = ".tmp-"
# Arrow's Hadoop-style aliases: Spark jobs name S3 buckets s3a://.
_SCHEME_ALIASES: Final = {"s3a": "s3", "s3n": "s3"}
_SECRET_PARAMS: Final = frozenset({"access_key", "secret_key", "session_token"})
OBJECT_STORES: Final = frozenset({"s3", "gcs", "abfs"})
US_PER_DAY: Final = 86_400_000_000


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """Where and how the tasks write (small and picklable)."""

    uri: str
    job: str  # a short id of this export, in every file name
    compression: str = "snappy"
    row_group_rows: int = 1 << 20
    row_group_bytes: int = 128 << 20
    keep_partition_columns: bool = False  # topic and partition in the files (Iceberg)
    typed: tuple[TypedSide, ...] = ()  # keys or values as typed columns (gateway.spark.typed)


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


def file_name(split: Split, out: OutputSpec, day: int | None = None) -> str:
    """The file of ``split`` (of its records of UTC ``day``, days since the epoch, when the
    export writes one file per day)."""
    codec = "" if out.compression == "none" else f".{out.compression}"
    dated = "" if day is None else f"-d{day}"
    return f"part-{split.start_offset:020d}-{split.part:04d}{dated}-{out.job}{codec}.parquet"


def partition_dir(root: str, split: Split) -> str:
    return f"{root}/topic={split.topic}/partition={split.partition}"


def write_split(split: Split, ctx: ReadContext, out: OutputSpec) -> Written:
    """Read ``split`` and write its records as one Parquet file (none when it has none)."""
    return write_batches(read_split(split, ctx), split, out)


def write_split_by_day(split: Split, ctx: ReadContext, out: OutputSpec) -> list[Written]:
    """Read ``split`` and write its records as one Parquet file per UTC day of their
    timestamps (none for a day without records), for the Iceberg export."""
    return write_batches_by_day(read_split(split, ctx), split, out)


def write_planned(
    item: tuple[int, Split], contexts: Sequence[ReadContext], out: OutputSpec
) -> list[Written]:
    """:func:`write_split_by_day` of ``(plan, split)``: the Iceberg export may read several
    plans (one per run of missing offsets) in one job, each with its own context."""
    plan, split = item
    return write_split_by_day(split, contexts[plan], out)


class _PartFile:
    """One output file being written: a temp name, row groups cut at the spec's bounds,
    renamed into place by :meth:`finish`, deleted by :meth:`abort`."""

    def __init__(self, fs: pafs.FileSystem, folder: str, name: str, out: OutputSpec) -> None:
        self._fs = fs
        self._folder = folder
        self._out = out
        self.final = f"{folder}/{name}"
        self._target = f"{folder}/.{name}{TEMP_MARK}{uuid.uuid4().hex}"
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        self._rows = self._size = 0
        self.records = 0

    def add(self, body: pa.RecordBatch) -> None:
        if self._writer is None:
            make_dir(self._fs, self._folder)
            self._writer = pq.ParquetWriter(
                self._target, body.schema, filesystem=self._fs, compression=self._out.compression
            )
        self._pending.append(body)
        self._rows += body.num_rows
        self._size += body.nbytes
        if self._rows >= self._out.row_group_rows or self._size >= self._out.row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        assert self._writer is not None
        self._writer.write_table(pa.Table.from_batches(self._pending), row_group_size=self._rows)
        self.records += self._rows
        self._pending, self._rows, self._size = [], 0, 0

    def finish(self) -> Written:
        """Close and rename into place (nothing when no batch came)."""
        if self._writer is None:
            return Written(0, 0, None)
        if self._pending:
            self._flush()
        self._writer.close()
        self._writer = None
        self._fs.move(self._target, self.final)
        return Written(self.records, self._fs.get_file_info(self.final).size or 0, self.final)

    def abort(self) -> None:
        if self._writer is not None:
            _close_quietly(self._writer)
            self._writer = None
        _remove(self._fs, self._target)


def _body(batch: pa.RecordBatch, out: OutputSpec) -> pa.RecordBatch:
    if out.typed:
        batch = typed_batch(batch, out.typed)
    return batch if out.keep_partition_columns else batch.drop_columns(list(PARTITION_COLUMNS))


def write_batches(batches: Iterable[pa.RecordBatch], split: Split, out: OutputSpec) -> Written:
    fs, root = open_output(out.uri)
    part = _PartFile(fs, partition_dir(root, split), file_name(split, out), out)
    try:
        for batch in batches:
            part.add(_body(batch, out))
        return part.finish()
    except BaseException:
        part.abort()
        raise


def days_of(batch: pa.RecordBatch) -> np.ndarray:
    """The UTC day (days since the epoch, floored: Iceberg's ``day`` transform) of each
    record's ``timestamp`` (microseconds)."""
    micros = batch.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)
    days: np.ndarray = np.floor_divide(micros, US_PER_DAY)
    return days


def write_batches_by_day(
    batches: Iterable[pa.RecordBatch], split: Split, out: OutputSpec
) -> list[Written]:
    """Like :func:`write_batches`, one file per UTC day of the timestamps; each file keeps
    its records in offset order. On any error every file of the split is removed."""
    fs, root = open_output(out.uri)
    folder = partition_dir(root, split)
    parts: dict[int, _PartFile] = {}
    finished: list[Written] = []

    def part_of(day: int) -> _PartFile:
        if day not in parts:
            parts[day] = _PartFile(fs, folder, file_name(split, out, day), out)
        return parts[day]

    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            body = _body(batch, out)
            days = days_of(batch)
            first, last = int(days.min()), int(days.max())
            if first == last:  # the common case: the whole batch in one day
                part_of(first).add(body)
                continue
            for day in np.unique(days).tolist():
                part_of(int(day)).add(body.filter(pa.array(days == day)))
        for day in sorted(parts):
            finished.append(parts[day].finish())
    except BaseException:
        for part in parts.values():
            part.abort()
        for done in finished:
            if done.path is not None:
                _remove(fs, done.path)
        raise
    return [w for w in finished if w.path is not None]


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
