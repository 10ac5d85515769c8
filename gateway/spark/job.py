"""The export job as typed values: what to export (:class:`ExportJob`, built by
:mod:`gateway.commands.export` from its flags) and what it did (:class:`ExportSummary`, the
JSON line printed last). Pure: no pyspark, no pyarrow, so the command builds a job without the
``spark`` extra installed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.spark.typed_request import TypedRequest

Ranges = dict[str, dict[str, list[list[int]]]]
"""Offset ranges ``[lo, hi)`` as the summary prints them: ``{"topic": {"0": [[lo, hi]]}}``."""


@dataclass(frozen=True, slots=True)
class IcebergTarget:
    """``--format iceberg``'s table: ``--catalog``, ``--warehouse``, ``--table`` and the
    catalog properties (``--catalog-property KEY=VALUE``, in order)."""

    catalog: str | None = None
    warehouse: str | None = None
    table: str | None = None
    properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ExportJob:
    """One export. ``options``: the ``tiered-kafka`` reader options the records are read with
    (Spark's data-source interface, strings); ``output`` and ``mode`` for files, ``iceberg``
    for a table; ``writer`` as given (None: the format's default)."""

    topic: str
    options: Mapping[str, str]
    format: str = "parquet"
    compression: str = "snappy"
    writer: str | None = None
    output: str | None = None
    mode: str | None = None
    iceberg: IcebergTarget | None = None
    typed: TypedRequest = field(default_factory=TypedRequest)
    quiet: bool = False
    master: str | None = None
    spark_log: Path | None = None


@dataclass(frozen=True, slots=True)
class SparkResult:
    """Spark's DataFrame writer: the records it wrote."""

    records: int

    def fields(self) -> dict[str, object]:
        return {"records": self.records}


@dataclass(frozen=True, slots=True)
class FilesResult:
    """The Arrow writer: records, files and bytes written; ``skipped`` by ``--mode ignore``."""

    records: int
    files: int
    bytes: int
    skipped: bool = False

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {"records": self.records, "files": self.files,
                                  "bytes": self.bytes}  # fmt: skip
        return {**out, "skipped": True} if self.skipped else out


@dataclass(frozen=True, slots=True)
class TableResult:
    """An Iceberg export: the table (``ns.name``) and its location, what was written, the
    snapshot (the new one, else the table's current), the offsets committed."""

    table: str
    location: str
    records: int
    files: int
    bytes: int
    snapshot_id: int | None
    committed: bool
    ranges: Ranges
    commit_seconds: float | None = None  # when committed

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {
            "table": self.table, "records": self.records, "files": self.files,
            "bytes": self.bytes, "snapshot_id": self.snapshot_id,
        }  # fmt: skip
        if self.commit_seconds is not None:
            out["commit_seconds"] = self.commit_seconds
        return {**out, "committed": self.committed, "ranges": self.ranges}


WriteResult = SparkResult | FilesResult | TableResult


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What an export did; :meth:`as_dict` is the JSON summary, in its fields' order."""

    topic: str
    output: str  # redacted
    format: str
    writer: str
    result: WriteResult
    seconds: float

    @property
    def records_per_s(self) -> int | None:
        records = self.result.records
        return round(records / self.seconds) if self.seconds > 0 and records else None

    def as_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic, "output": self.output, "format": self.format,
            "writer": self.writer, **self.result.fields(), "seconds": round(self.seconds, 3),
            "records_per_s": self.records_per_s,
        }  # fmt: skip
