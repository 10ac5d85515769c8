"""What a scrub reports: one :class:`Finding` per problem, with a stable ``check`` name.

A finding is a row of the report table, so it is flat, small and picklable (Spark executors
send them to the driver). Severities:

* ``error``: data is unreadable, wrong, or reads would return wrong answers (a failed GCM tag or
  CRC, a gap in the offsets, an index entry that makes a fetch skip records). Exit code 1.
* ``warning``: inconsistent but reads stay correct, or the auditor could not tell (an object
  without a manifest that may be an upload in progress, an index entry Kafka would not write).
* ``info``: worth knowing, nothing wrong (a re-upload displaced by a later leader).

Per segment and check, :class:`FindingSink` keeps the first :data:`MAX_PER_CHECK` findings and
then one "N more" line: a segment whose every batch fails its CRC must not flood the driver.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final, Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: Final[tuple[Severity, ...]] = ("error", "warning", "info")

MAX_PER_CHECK: Final = 20

# --- check names: the values of the report's ``check`` column ---------------------------------
ORPHAN_OBJECT: Final = "orphan-object"  # .log/.indexes without a manifest
MISSING_OBJECT: Final = "missing-object"  # a manifest whose .log or .indexes is gone
UNRECOGNISED_KEY: Final = "unrecognised-key"  # a key that is not in the plugin's layout
MANIFEST: Final = "manifest"  # unparseable manifest, or metadata that disagrees with its key
DATA_KEY: Final = "data-key"  # the wrapped data key does not unwrap with the key ring
OBJECT_SIZE: Final = "object-size"  # stored object size differs from what the manifest says
CHUNK: Final = "chunk"  # a .log chunk fails its GCM tag or zstd frame
BATCH_FRAMING: Final = "batch-framing"  # bad batch length, unknown magic, trailing bytes
BATCH_CRC: Final = "batch-crc"
BATCH_DECODE: Final = "batch-decode"  # producer codec or record decoding fails
OFFSETS: Final = "offsets"  # offsets inside a segment, and against its manifest
INDEXES: Final = "indexes"  # the .indexes object cannot be read or decrypted
OFFSET_INDEX: Final = "offset-index"
TIME_INDEX: Final = "time-index"
TXN_INDEX: Final = "txn-index"
LEADER_EPOCH: Final = "leader-epoch"
PRODUCER_SNAPSHOT: Final = "producer-snapshot"
STORAGE: Final = "storage"  # the store failed (transient): the segment was not fully audited
GAP: Final = "gap"
OVERLAP: Final = "overlap"
DUPLICATE: Final = "duplicate"
INTERNAL: Final = "internal"  # an unexpected exception: a bug in the auditor or its libraries


@dataclass(frozen=True, slots=True)
class Finding:
    """One row of the report. ``topic``/``partition``/``segment_id`` are empty/-1 when the
    object key does not name them (an unrecognised key)."""

    topic: str
    partition: int
    segment_id: str
    object_key: str
    check: str
    severity: Severity
    message: str


@dataclass(frozen=True, slots=True)
class Where:
    """The segment and object findings are about (saves repeating four fields)."""

    topic: str = ""
    partition: int = -1
    segment_id: str = ""
    object_key: str = ""

    def finding(self, check: str, severity: Severity, message: str, key: str = "") -> Finding:
        return Finding(
            self.topic,
            self.partition,
            self.segment_id,
            key or self.object_key,
            check,
            severity,
            message,
        )


@dataclass(slots=True)
class FindingSink:
    """Collects one segment's findings, at most :data:`MAX_PER_CHECK` per check."""

    where: Where
    findings: list[Finding] = field(default_factory=list)
    _counts: Counter[tuple[str, Severity]] = field(default_factory=Counter)
    _keys: dict[tuple[str, Severity], str] = field(default_factory=dict)

    def add(self, check: str, severity: Severity, message: str, key: str = "") -> None:
        slot = (check, severity)
        self._counts[slot] += 1
        self._keys.setdefault(slot, key)
        if self._counts[slot] <= MAX_PER_CHECK:
            self.findings.append(self.where.finding(check, severity, message, key))

    def error(self, check: str, message: str, key: str = "") -> None:
        self.add(check, "error", message, key)

    def warning(self, check: str, message: str, key: str = "") -> None:
        self.add(check, "warning", message, key)

    def info(self, check: str, message: str, key: str = "") -> None:
        self.add(check, "info", message, key)

    def close(self) -> list[Finding]:
        """The findings, plus one line per check that was cut short."""
        out = list(self.findings)
        for (check, severity), count in self._counts.items():
            if count > MAX_PER_CHECK:
                more = count - MAX_PER_CHECK
                message = f"... and {more} more {check} findings of this segment (not listed)"
                key = self._keys[check, severity]
                out.append(self.where.finding(check, severity, message, key))
        return out


def count_by(findings: list[Finding]) -> dict[str, dict[str, int]]:
    """``{check: {severity: count}}``, sorted, for the summary."""
    out: dict[str, dict[str, int]] = {}
    for f in sorted(findings, key=lambda f: (f.check, SEVERITIES.index(f.severity))):
        out.setdefault(f.check, {}).setdefault(f.severity, 0)
        out[f.check][f.severity] += 1
    return out
