"""Results of the end-to-end HTTP benchmark: the goals of issue 15, the printed table and the
section of ``docs/benchmarks.md`` (between two markers, replaced on every ``--docs`` run)."""

from __future__ import annotations

import datetime
import importlib
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.bench.http_load import Measured, MiB

BEGIN: Final = "<!-- bench_http: begin (written by python -m tests.bench.bench_http --docs) -->"
END: Final = "<!-- bench_http: end -->"
SECTION: Final = "## End to end over HTTP (issue 15)"

JSON_GOAL: Final = 1_000_000  # records per server CPU-second (issue 30; 500 k in issue 15)
NDJSON_GOAL: Final = 1_000_000
RAW_RATIO_GOAL: Final = 0.5  # gateway MB per CPU-s / nginx MB per CPU-s
COLD_GOAL: Final = 2.0  # p99 / the same client's p99 reading the same ranges from the store
IDLE_GOAL_MIB: Final = 150.0  # summed PSS per worker, idle
BYTE_KINDS: Final = frozenset(
    {"raw", "nginx", "floor", "checked", "framework"}
)  # figures in MB, not records


@dataclass(frozen=True, slots=True)
class Cold:
    reads: int
    p50_s: float
    p99_s: float
    theory_s: float
    detail: str
    nginx_p99_s: float | None = None  # the same reads from nginx, no latency: the client's floor
    direct_p99_s: float | None = None  # the same client, the same ranges, straight from the store
    shed: int = 0  # reads answered 503 overloaded (their latency is in the quantiles)

    @property
    def ratio(self) -> float | None:
        """p99 / the direct reads' p99 (issue 30's goal)."""
        return None if not self.direct_p99_s else self.p99_s / self.direct_p99_s


@dataclass(slots=True)
class Results:
    args: dict[str, Any]
    gateway: dict[str, Measured] = field(default_factory=dict)
    nginx: Measured | None = None
    floor: Measured | None = None  # a bare uvicorn app answering from memory
    ceilings: dict[str, Measured] = field(default_factory=dict)  # checked, framework
    peer: tuple[int, float, float] | None = None  # records, CPU s, wall s
    cold: Cold | None = None
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)  # per server CPU-s
    # summed PSS of the server's processes and each one's, MiB: idle (after /readyz), after
    memory: dict[str, tuple[float, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def peer_rate(self) -> float | None:
        return None if self.peer is None or not self.peer[1] else self.peer[0] / self.peer[1]


def _both(m: Measured, scale: float) -> str:
    """Units per server CPU-second (and per client CPU-second), divided by ``scale``."""
    return f"{m.per_server_cpu_s / scale:,.0f} ({m.per_client_cpu_s / scale:,.0f})"


def describe(kind: str, m: Measured) -> str:
    wall = m.units / m.wall_s
    if kind in BYTE_KINDS:
        return f"MB per server (client) CPU-s {_both(m, 1e6)}, {wall / 1e6:,.0f} MB/s wall"
    return f"records per server (client) CPU-s {_both(m, 1)}, {wall:,.0f}/s wall"


def _verdict(value: float | None, goal: float, at_most: bool = False) -> str:
    if value is None:
        return "not measured"
    ok = value <= goal if at_most else value >= goal
    return "**pass**" if ok else "fail"


def rows(r: Results) -> list[tuple[str, str, str, str, str, str]]:
    """(what, gateway, peer, ratio, goal, verdict) rows."""
    out = []
    peer = r.peer_rate()
    for kind, goal in (("json", JSON_GOAL), ("ndjson", NDJSON_GOAL)):
        m = r.gateway.get(kind)
        value = None if m is None else m.per_server_cpu_s
        out.append((
            f"warm {kind.upper()}: k records per server CPU-s (client CPU-s)",
            "-" if m is None else _both(m, 1e3),
            "-" if peer is None else f"{peer / 1e3:,.0f} (kafka-python)",
            "-" if value is None or peer is None else f"{value / peer:.2f}x",
            f">= {goal / 1e3:,.0f}",
            _verdict(value, goal),
        ))  # fmt: skip
    raw, nginx = r.gateway.get("raw"), r.nginx
    ratio = None if raw is None or nginx is None else raw.per_server_cpu_s / nginx.per_server_cpu_s
    out.append((
        "warm raw: MB per server CPU-s (client CPU-s), / nginx Range",
        "-" if raw is None else _both(raw, 1e6),
        "-" if nginx is None else f"{_both(nginx, 1e6)} nginx",
        "-" if ratio is None else f"{ratio:.3f}",
        f">= {RAW_RATIO_GOAL}",
        _verdict(ratio, RAW_RATIO_GOAL),
    ))  # fmt: skip
    ceilings = (
        (r.floor, "raw's ceiling: a bare uvicorn app answering from memory"),
        (r.ceilings.get("checked"), "the same, checking each batch's CRC per answer"),
        (r.ceilings.get("framework"), "the same checked answer from a FastAPI route"),
    )
    for floor, what in ceilings:
        ceiling = (
            None if floor is None or nginx is None
            else floor.per_server_cpu_s / nginx.per_server_cpu_s
        )  # fmt: skip
        out.append((
            f"{what}, MB per server CPU-s, / nginx",
            "-" if floor is None else _both(floor, 1e6),
            "-" if nginx is None else f"{_both(nginx, 1e6)} nginx",
            "-" if ceiling is None else f"{ceiling:.3f}",
            "(context)",
            "-",
        ))  # fmt: skip
    c = r.cold
    direct = None if c is None or c.direct_p99_s is None else c.direct_p99_s
    out.append((
        "cold reads: p99 / the same reads straight from the store"
        + ("" if c is None else f" ({c.reads} concurrent)"),
        "-" if c is None else f"p50 {c.p50_s * 1e3:.0f} ms, p99 {c.p99_s * 1e3:.0f} ms"
        + (f", {c.shed} shed (503)" if c is not None and c.shed else ""),
        "-" if direct is None else f"p99 {direct * 1e3:.0f} ms (store)",
        "-" if c is None or c.ratio is None else f"{c.ratio:.1f}x",
        f"<= {COLD_GOAL}x",
        "fail" if c is not None and c.shed else _verdict(
            None if c is None else c.ratio, COLD_GOAL, at_most=True
        ),
    ))  # fmt: skip
    if c is not None:
        out.append((
            "cold theory: p99 / waves of GETs at the configured concurrency",
            "-",
            f"theory {c.theory_s * 1e3:.0f} ms",
            f"{c.p99_s / c.theory_s:.1f}x",
            "(context)",
            "-",
        ))  # fmt: skip
    idle = r.memory.get("idle")
    if idle is not None:
        workers = max(len(idle[1]) - 1, 1)  # the supervisor and its workers
        per = [f"{m:.0f}" for m in idle[1]]
        out.append((
            "memory idle: summed PSS of the server's processes, MiB (each)",
            f"{idle[0]:.0f} ({' + '.join(per)})",
            "-",
            f"{idle[0] / workers:.0f} per worker",
            f"<= {IDLE_GOAL_MIB:.0f} per worker",
            _verdict(idle[0] / workers, IDLE_GOAL_MIB, at_most=True),
        ))  # fmt: skip
    if c is not None and c.nginx_p99_s is not None:
        out.append((
            "cold's floor: the same reads from nginx (page cache, no store latency), p99 / theory",
            "-",
            f"p99 {c.nginx_p99_s * 1e3:.0f} ms nginx",
            f"{c.nginx_p99_s / c.theory_s:.1f}x",
            "(context)",
            "-",
        ))  # fmt: skip
    return out


def table(r: Results) -> str:
    head = ("what", "gateway", "peer", "ratio", "goal", "verdict")
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows(r)]
    return "\n".join(lines)


def details(r: Results) -> list[str]:
    """What the table's cells do not say: the cold reads' setup, what was skipped."""
    out = [] if r.cold is None else [f"Cold reads: {r.cold.detail}."]
    if r.memory:
        out.append(f"Memory, summed PSS of the server's processes (each), MiB: {memory_text(r)}.")
    if r.spread:
        spans = ", ".join(
            f"{name} {low / scale:,.0f} to {high / scale:,.0f}"
            for name, (low, high) in r.spread.items()
            for scale in ((1e6 if name in BYTE_KINDS else 1e3),)
        )
        out.append(
            f"Spread over the {r.args['repeats']} runs of each figure (the table has the best; "
            f"k records or MB per server CPU-s): {spans}."
        )
    return out + [f"Note: {n}." for n in r.notes]


def _setup(r: Results) -> str:
    a = r.args
    return (
        f"Run of {datetime.date.today().isoformat()}, `os.cpu_count()` = {os.cpu_count()}, "
        f"Python {platform.python_version()}, load average {a.get('load', 0):.1f} at the end "
        f"(others' work on the machine; it moves wall-clock figures such as the cold reads): "
        f"{a['records']:,} records in {a['segments']} "
        f"segments of {a['segment_mib']} MiB ({a['log_mib']:.0f} MiB of log), warm window "
        f"{a['window_mib']} MiB, {a['clients']} client connections, best of {a['repeats']} "
        f"runs of {a['seconds']:g} s per figure, pages of max_bytes {a['max_bytes'] // MiB} "
        f"MiB (NDJSON streams of {a['ndjson_bytes'] // MiB} MiB)."
        + (f" Server: {a['label']}." if a.get("label") else "")
    )


def plot(r: Results, png: Path) -> Path | None:
    """Each measured figure as a share of its goal (1 = met), as a PNG; None without
    matplotlib (an optional package: not a dependency of the project)."""
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        return None
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    shares: dict[str, float] = {}
    for kind, goal in (("json", JSON_GOAL), ("ndjson", NDJSON_GOAL)):
        if kind in r.gateway:
            shares[f"{kind.upper()} records/CPU-s"] = r.gateway[kind].per_server_cpu_s / goal
    if "raw" in r.gateway and r.nginx is not None:
        ratio = r.gateway["raw"].per_server_cpu_s / r.nginx.per_server_cpu_s
        shares["raw / nginx"] = ratio / RAW_RATIO_GOAL
    if r.cold is not None and r.cold.ratio:
        shares["cold p99 / store p99"] = COLD_GOAL / r.cold.ratio
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.barh(list(shares), list(shares.values()))
    ax.axvline(1.0, color="black", linestyle="--")
    ax.set_xlabel("share of the goal (1 = met)")
    ax.set_title(f"issue 30 goals, {datetime.date.today().isoformat()} {r.args.get('label', '')}")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return png


def write_docs(path: Path, r: Results, png: Path | None = None) -> None:
    """Replace the generated part of the section (or append the section)."""
    image = [] if png is None else [f"![issue 15 goals]({png.relative_to(path.parent)})"]
    body = "\n\n".join([_setup(r), table(r), *details(r), *image])
    block = f"{BEGIN}\n{body}\n{END}"
    text = path.read_text()
    if BEGIN in text and END in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block + text[end:]
    else:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{block}\n"
    path.write_text(text)


def memory_text(r: Results) -> str:
    """Idle and after the runs: summed PSS (each process's), MiB."""
    return "; ".join(
        f"{when} {total:.0f} ({' + '.join(f'{m:.0f}' for m in each)})"
        for when, (total, each) in r.memory.items()
    )
