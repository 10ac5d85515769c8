"""The scrub as a Spark job: one listing on the driver, segment audits on the executors.

The driver lists the prefix once (:func:`~gateway.scrub.inventory.inventory`), then
parallelises the manifest keys (with the listing's object sizes) over the cluster. Each Spark
partition opens one store from the picklable :class:`~gateway.storage.sync.SyncStoreSpec`
and one key ring, and runs :func:`~gateway.scrub.audit.audit_segment` for its segments; the
executors return :class:`~gateway.scrub.audit.SegmentAudit` values (findings are capped per
segment and check, so they stay small). The driver adds the continuity findings, which need
every segment's range, and builds the report table.

Key pairs are read on the driver and shipped as PEM bytes in the task closure, so executors
need no key files (and anyone who can read the job's tasks can read the keys: run it on a
cluster you trust with them, as you would the broker).

pyspark is an optional extra: only this module imports it, and only the ``scrub`` command
imports this module.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.heap import task_started
from gateway.remote.keyring import KeyPair, KeyRing
from gateway.remote.keys import Suffix
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.scrub.audit import SegmentAudit, audit_segment
from gateway.scrub.continuity import check_continuity
from gateway.scrub.findings import SEVERITIES, Finding, count_by
from gateway.scrub.inventory import DEFAULT_UPLOAD_GRACE_S, inventory
from gateway.storage.sync import SyncStoreSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REPORT_COLUMNS = ("topic", "partition", "segment_id", "object_key", "check", "severity", "message")
SLICES_PER_CORE = 4  # small tasks balance segments of very different sizes


@dataclass(frozen=True, slots=True)
class ScrubConfig:
    store: SyncStoreSpec
    key_prefix: str = ""
    key_pairs: tuple[tuple[str, bytes], ...] = ()  # (id, private key PEM), read on the driver
    topic: str | None = None
    upload_grace_s: float = DEFAULT_UPLOAD_GRACE_S
    num_slices: int | None = None


@dataclass(slots=True)
class ScrubResult:
    """Everything the summary and the report need."""

    findings: list[Finding] = field(default_factory=list)
    segments: int = 0
    objects: int = 0
    bucket_bytes: int = 0  # listed bytes under the prefix (in scope)
    stored_bytes: int = 0  # bytes fetched
    log_bytes: int = 0  # original segment bytes decoded
    chunks: int = 0
    batches: int = 0
    records: int = 0
    seconds: float = 0.0

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def exit_code(self) -> int:
        """0 clean (warnings and info allowed), 1 when any finding is an error."""
        return 1 if self.count("error") else 0

    def summary(self) -> dict[str, Any]:
        return {
            "segments": self.segments,
            "objects": self.objects,
            "bucket_bytes": self.bucket_bytes,
            "stored_bytes_read": self.stored_bytes,
            "log_bytes_decoded": self.log_bytes,
            "chunks": self.chunks,
            "batches": self.batches,
            "records": self.records,
            "seconds": round(self.seconds, 3),
            "findings": {s: self.count(s) for s in SEVERITIES},
            "by_check": count_by(self.findings),
        }


def _audit_partition(
    spec: SyncStoreSpec,
    key_pairs: tuple[tuple[str, bytes], ...],
    items: Iterable[tuple[str, dict[str, int]]],
) -> Iterator[SegmentAudit]:
    """One Spark partition: one store client and one key ring for all its segments."""
    task_started()
    ring = KeyRing(KeyPair.from_pem(kid, pem, f"key pair {kid!r}") for kid, pem in key_pairs)
    store = spec.open()
    try:
        reader = SyncSegmentReader(store)
        for manifest_key, sizes in items:
            yield audit_segment(
                reader, manifest_key, ring, sizes={Suffix(k): v for k, v in sizes.items()}
            )
    finally:
        store.close()


def _sort_key(f: Finding) -> tuple[str, int, str, str, int, str]:
    return (f.topic, f.partition, f.object_key, f.check, SEVERITIES.index(f.severity), f.message)


def run_scrub(spark: SparkSession, config: ScrubConfig) -> ScrubResult:
    """List, audit every segment on the cluster, check continuity; nothing is written."""
    started = time.monotonic()
    result = ScrubResult()
    store = config.store.open()
    try:
        inv = inventory(
            store, config.key_prefix, config.topic, upload_grace_s=config.upload_grace_s
        )
    finally:
        store.close()
    result.findings += inv.findings
    result.objects, result.bucket_bytes = inv.objects, inv.bytes
    result.segments = len(inv.segments)
    items = [(s.manifest_key, {k.value: v for k, v in s.sizes.items()}) for s in inv.segments]
    ranges = []
    if items:
        sc = spark.sparkContext
        slices = config.num_slices or min(len(items), sc.defaultParallelism * SLICES_PER_CORE)
        spec, key_pairs = config.store, config.key_pairs
        audits: list[SegmentAudit] = (
            sc.parallelize(items, max(1, slices))
            .mapPartitions(lambda part: _audit_partition(spec, key_pairs, part))
            .collect()
        )
        for audit in audits:
            result.findings += audit.findings
            result.stored_bytes += audit.stored_bytes
            result.log_bytes += audit.log_bytes
            result.chunks += audit.chunks
            result.batches += audit.batches
            result.records += audit.records
            if audit.range is not None:
                ranges.append(audit.range)
    result.findings += check_continuity(ranges)
    result.findings.sort(key=_sort_key)
    result.seconds = time.monotonic() - started
    return result


def report_frame(spark: SparkSession, findings: list[Finding]) -> DataFrame:
    """The report table: one row per finding (an empty table when the bucket is clean)."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType  # noqa: PLC0415

    schema = StructType(
        [
            StructField(name, IntegerType() if name == "partition" else StringType(), False)
            for name in REPORT_COLUMNS
        ]
    )
    rows = [tuple(getattr(f, name) for name in REPORT_COLUMNS) for f in findings]
    return spark.createDataFrame(rows, schema)


def write_report(spark: SparkSession, findings: list[Finding], path: str) -> None:
    """The report table as Parquet at ``path`` (a folder, one file: reports are small)."""
    report_frame(spark, findings).coalesce(1).write.mode("errorifexists").parquet(path)
