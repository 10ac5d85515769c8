"""The real-Kafka suite's verdicts: a ``PASS``/``FAIL`` line per check, a table of records
compared and differences per surface and topic, and the closing ``N checks, M differences``."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]
BIG = 4096  # base64 characters: a longer key or value is compared (and kept) by its SHA-256


def b64(data: bytes | bytearray | None) -> str | None:
    """Standard padded base64 of ``data`` (a key, value or header value), ``None`` for null."""
    return None if data is None else base64.b64encode(bytes(data)).decode()


def compact(row: Any) -> Any:
    """``row`` with a key or value over :data:`BIG` as ``sha256:<hex>`` of its bytes (the
    oracles are committed: a 1 MB record is kept as its digest)."""
    if not isinstance(row, dict):
        return row
    out = dict(row)
    for field_ in ("key", "value"):
        v = out.get(field_)
        if isinstance(v, str) and len(v) > BIG and not v.startswith("sha256:"):
            out[field_] = "sha256:" + hashlib.sha256(base64.b64decode(v)).hexdigest()
    return out


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    table: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    checks: int = 0
    differences: int = 0
    emit: Callable[[str], None] = print

    def compare(
        self, name: str, surface: str, topic: str, want: Sequence[Row], got: Sequence[Row]
    ) -> None:
        """One check: ``got`` equal to ``want``, row by row."""
        diffs = differences([compact(r) for r in want], [compact(r) for r in got])
        cell = self.table.setdefault((surface, topic), [0, 0])
        cell[0] += len(want)
        cell[1] += len(diffs)
        self.verdict(name, diffs)

    def verdict(self, name: str, diffs: Sequence[str]) -> None:
        self.checks += 1
        self.differences += len(diffs)
        line = f"PASS {name}" if not diffs else f"FAIL {name}: {len(diffs)} differences; {diffs[0]}"
        self.lines.append(line)
        self.emit(line)

    def guarded(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; an exception is the check ``name``'s FAIL line (and ``None``)."""
        try:
            return fn(*args)
        except Exception as e:
            self.fail(name, f"{type(e).__name__}: {str(e)[:300]}")
            return None

    def merge(self, other: Report) -> None:
        """``other``'s verdicts after this one's (its lines emitted now)."""
        for line in other.lines:
            self.lines.append(line)
            self.emit(line)
        for key, (n, d) in other.table.items():
            cell = self.table.setdefault(key, [0, 0])
            cell[0] += n
            cell[1] += d
        self.checks += other.checks
        self.differences += other.differences

    def fail(self, name: str, why: str) -> None:
        self.verdict(name, [why])

    def summary(self) -> str:
        surfaces = sorted({s for s, _ in self.table})
        topics = sorted({t for _, t in self.table})
        width = max([len(s) for s in surfaces] + [8])
        out = [f"{'surface':<{width}}  " + "  ".join(f"{t:>18}" for t in topics)]
        for s in surfaces:
            cells = []
            for t in topics:
                n, d = self.table.get((s, t), (0, 0))
                cells.append(f"{f'{n} / {d}' if (s, t) in self.table else '-':>18}")
            out.append(f"{s:<{width}}  " + "  ".join(cells))
        out.append("(records compared / differences)")
        out.append(f"{self.checks} checks, {self.differences} differences")
        return "\n".join(out)


def differences(want: Sequence[Row], got: Sequence[Row]) -> list[str]:
    """One line per row that differs (and one for a different row count): all of them, so
    the report's difference count is exact."""
    out: list[str] = []
    if len(want) != len(got):
        out.append(f"{len(got)} rows, want {len(want)}")
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if w != g and not (isinstance(w, dict) and isinstance(g, dict)):
            out.append(f"row {i}: {_short(g)} want {_short(w)}")
        elif w != g:
            keys = sorted(k for k in set(w) | set(g) if w.get(k) != g.get(k))
            out.append(
                f"row {i} ({w.get('partition', '')}:{w.get('offset', '')}): "
                + ", ".join(f"{k}={_short(g.get(k))} want {_short(w.get(k))}" for k in keys)
            )
    return out


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."
