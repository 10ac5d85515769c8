"""The load test's figures from locust's samples, the /metrics scrapes and the RSS samples.

Latencies come in two kinds. *Raw*: what each closed-loop locust user measured. *Corrected*
for coordinated omission as HdrHistogram's ``recordValueWithExpectedInterval`` does: a request
that took ``L`` when the user meant to send one every ``T`` (``1 / rate``) also stands for the
requests the user did not send meanwhile, recorded as ``L - T``, ``L - 2T``, ... down to ``T``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

MB: Final = 1_000_000
MIB: Final = 1 << 20
OVERLOADED: Final = "overloaded"
Sample = tuple[str, float, float, int, str]  # name, start (epoch s), ms, bytes, outcome


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of sorted ``values``; 0 if empty."""
    if not values:
        return 0.0
    return values[max(0, math.ceil(q / 100 * len(values)) - 1)]


def corrected(latencies_ms: Iterable[float], interval_ms: float) -> list[float]:
    """The latencies plus the ones coordinated omission hid (see the module docstring)."""
    out: list[float] = []
    for value in latencies_ms:
        out.append(value)
        missing = value - interval_ms
        while interval_ms > 0 and missing >= interval_ms:
            out.append(missing)
            missing -= interval_ms
    return out


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    requests: int
    overloaded: int
    failures: int  # other than overloaded
    mb_served: float
    raw_ms: tuple[float, float, float]  # p50, p95, p99
    corrected_ms: tuple[float, float, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "requests": self.requests,
            "overloaded": self.overloaded,
            "failures": self.failures,
            "mb_served": round(self.mb_served, 2),
            "p50_p95_p99_ms": [round(v, 1) for v in self.raw_ms],
            "p50_p95_p99_ms_corrected": [round(v, 1) for v in self.corrected_ms],
        }


def _row(name: str, samples: list[Sample], interval_ms: float) -> Row:
    raw = sorted(s[2] for s in samples)
    fixed = sorted(corrected(raw, interval_ms))
    qs = (50, 95, 99)
    return Row(
        name=name,
        requests=len(samples),
        overloaded=sum(1 for s in samples if s[4] == OVERLOADED),
        failures=sum(1 for s in samples if s[4] not in ("ok", OVERLOADED)),
        mb_served=sum(s[3] for s in samples) / MB,  # a stream cut short still served its lines
        raw_ms=(percentile(raw, 50), percentile(raw, 95), percentile(raw, 99)),
        corrected_ms=tuple(percentile(fixed, q) for q in qs),  # type: ignore[arg-type]
    )


def rows(samples: list[Sample], rate_per_user: float) -> list[Row]:
    """One row per request name, then the total."""
    interval_ms = 1000 / rate_per_user if rate_per_user > 0 else 0.0
    by_name: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_name[s[0]].append(s)
    out = [_row(name, by_name[name], interval_ms) for name in sorted(by_name)]
    out.append(_row("total", samples, interval_ms))
    return out


def failure_reasons(samples: list[Sample]) -> dict[str, int]:
    reasons: dict[str, int] = defaultdict(int)
    for s in samples:
        if s[4] != "ok":
            reasons[s[4][:200]] += 1
    return dict(sorted(reasons.items(), key=lambda kv: -kv[1]))


def metric(text: str, name: str) -> float:
    """The value of an unlabelled sample ``name`` in Prometheus text; 0 when absent."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def summary(
    samples: list[Sample],
    rate_per_user: float,
    run: dict[str, Any],
    metrics_before: str,
    metrics_after: str,
) -> dict[str, Any]:
    """Every figure of the run, as one JSON-able document. ``run`` holds the run's settings and
    the server's RSS and CPU figures (see ``run.py``)."""
    table = rows(samples, rate_per_user)
    total = table[-1]
    starts = [s[1] for s in samples]
    ends = [s[1] + s[2] / 1000 for s in samples]
    seconds = max(ends) - min(starts) if samples else 0.0
    gets = metric(metrics_after, "tiered_gateway_remote_gets_total") - metric(
        metrics_before, "tiered_gateway_remote_gets_total"
    )
    fetched = metric(metrics_after, "tiered_gateway_remote_bytes_fetched_total") - metric(
        metrics_before, "tiered_gateway_remote_bytes_fetched_total"
    )
    cpu = run["server_cpu_seconds"]
    return {
        **run,
        "rate_per_user": rate_per_user,
        "seconds": round(seconds, 1),
        "requests": total.requests,
        "rps": round(total.requests / seconds, 1) if seconds else 0.0,
        "requests_per_server_cpu_second": round(total.requests / cpu, 1) if cpu else 0.0,
        "overloaded_pct": round(100 * total.overloaded / max(1, total.requests), 2),
        "failure_pct_other": round(100 * total.failures / max(1, total.requests), 2),
        "failure_reasons": failure_reasons(samples),
        "mb_served": round(total.mb_served, 1),
        "store_gets": int(gets),
        "store_gets_per_mb_served": round(gets / total.mb_served, 3) if total.mb_served else 0,
        "store_mb_fetched_per_mb_served": round(fetched / MB / total.mb_served, 3)
        if total.mb_served
        else 0,
        "by_name": [r.as_dict() for r in table],
    }


PEAK_GOAL_MIB: Final = 300e6 / MIB
AFTER_GOAL_MIB: Final = 100e6 / MIB


def markdown(doc: dict[str, Any]) -> str:
    """The run as a markdown table per request name and a few lines of totals."""
    lines = [
        f"{doc['users']} users, scenario {doc['scenario']}, {doc['seconds']} s, "
        f"{doc['rate_per_user']} tasks/s per user intended, {doc['cores']} cores",
        "",
        "| request | requests | overloaded | other failures | MB served "
        "| p50 / p95 / p99 ms | corrected for CO |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in doc["by_name"]:
        raw = " / ".join(f"{v:.0f}" for v in r["p50_p95_p99_ms"])
        fixed = " / ".join(f"{v:.0f}" for v in r["p50_p95_p99_ms_corrected"])
        lines.append(
            f"| {r['name']} | {r['requests']} | {r['overloaded']} | {r['failures']} "
            f"| {r['mb_served']} | {raw} | {fixed} |"
        )
    budgets = doc["budgets_mib"]
    lines += [
        "",
        f"- RPS {doc['rps']}; {doc['requests_per_server_cpu_second']} requests per server "
        f"CPU-second ({doc['server_cpu_seconds']} CPU-s); overloaded {doc['overloaded_pct']} %, "
        f"other failures {doc['failure_pct_other']} %; requests cut off unfinished at the "
        f"stop (not in the table): {doc['unfinished_at_stop']}",
        f"- store GETs per MB served {doc['store_gets_per_mb_served']}; store MB fetched per "
        f"MB served {doc['store_mb_fetched_per_mb_served']}",
        f"- memory, summed PSS (MiB): idle {doc['rss_idle_mib']}, peak {doc['rss_peak_mib']}, "
        f"{doc['after_seconds']} s after {doc['rss_after_mib']}; cache budgets {budgets} MiB: "
        f"peak over them {doc['rss_peak_mib'] - budgets:+.0f}, after over them "
        f"{doc['rss_after_mib'] - budgets:+.0f}; in-flight budget "
        f"{doc.get('inflight_budget_mib')} MiB; {doc.get('workers', 1)} worker process(es)",
        f"- against the goals (over the budgets: peak <= 300 MB = {PEAK_GOAL_MIB:.0f} MiB, "
        f"after <= 100 MB = {AFTER_GOAL_MIB:.0f} MiB): peak "
        f"{_verdict(doc['rss_peak_mib'] - budgets, PEAK_GOAL_MIB)}, after "
        f"{_verdict(doc['rss_after_mib'] - budgets, AFTER_GOAL_MIB)}; over idle + budgets: "
        f"peak {doc['rss_peak_mib'] - budgets - doc['rss_idle_mib']:+.0f}, after "
        f"{doc['rss_after_mib'] - budgets - doc['rss_idle_mib']:+.0f} MiB",
    ]
    return "\n".join(lines) + "\n"


def _verdict(over_mib: float, goal_mib: float) -> str:
    return f"{over_mib:+.0f} MiB " + ("within" if over_mib <= goal_mib else "OVER")
