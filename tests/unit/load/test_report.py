"""The load test's arithmetic: percentiles, the coordinated-omission correction, the split of
deliberate ``overloaded`` answers from other failures, GETs per MB from two scrapes."""

from __future__ import annotations

from typing import Any

from tests.load.report import Sample, corrected, markdown, metric, percentile, rows, summary


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) == 0.0


def test_correction_adds_what_a_closed_loop_user_did_not_send() -> None:
    # meant to send every 1000 ms, waited 5000 ms: 4 sends were held back, each late by less
    assert corrected([5000.0], 1000.0) == [5000.0, 4000.0, 3000.0, 2000.0, 1000.0]
    assert corrected([999.0, 10.0], 1000.0) == [999.0, 10.0]  # on time: nothing added
    assert corrected([5000.0], 0.0) == [5000.0]  # no pacing: nothing to correct against


def _sample(name: str, ms: float, outcome: str = "ok", size: int = 1_000_000) -> Sample:
    return (name, 1000.0, ms, size, outcome)


SAMPLES = [
    _sample("page", 10),
    _sample("page", 30),
    _sample("page", 20, "overloaded", 0),
    _sample("stream", 4000),
    _sample("stream", 50, "stream ended with corrupt_data", 500_000),
]


def test_rows_separate_overloaded_from_other_failures() -> None:
    by_name = {r.name: r for r in rows(SAMPLES, rate_per_user=1.0)}
    assert (by_name["page"].overloaded, by_name["page"].failures) == (1, 0)
    assert (by_name["stream"].overloaded, by_name["stream"].failures) == (0, 1)
    total = by_name["total"]
    assert (total.requests, total.overloaded, total.failures) == (5, 1, 1)
    assert total.mb_served == 3.5  # a stream that ended with an error line served its lines
    assert by_name["stream"].raw_ms[2] == 4000.0
    assert by_name["stream"].corrected_ms[0] == 2000.0  # 50, 1000, 2000, 3000, 4000


METRICS_BEFORE = """# HELP tiered_gateway_remote_gets_total GETs to the store
tiered_gateway_remote_gets_total 10.0
tiered_gateway_remote_bytes_fetched_total 1000000.0
"""
METRICS_AFTER = """tiered_gateway_remote_gets_total 16.0
tiered_gateway_remote_gets_total_other{x="1"} 99.0
tiered_gateway_remote_bytes_fetched_total 7000000.0
"""


def test_metric_reads_an_unlabelled_sample() -> None:
    assert metric(METRICS_AFTER, "tiered_gateway_remote_gets_total") == 16.0
    assert metric(METRICS_AFTER, "absent_total") == 0.0


def test_summary_and_markdown() -> None:
    run: dict[str, Any] = {
        "users": 5,
        "scenario": "Mix",
        "cores": 2,
        "budgets_mib": 48,
        "server_cpu_seconds": 2.5,
        "rss_idle_mib": 100,
        "rss_peak_mib": 300,
        "rss_after_mib": 150,
        "after_seconds": 5.0,
        "unfinished_at_stop": 0,
    }
    doc = summary(SAMPLES, 1.0, run, METRICS_BEFORE, METRICS_AFTER)
    assert doc["store_gets"] == 6
    assert doc["store_gets_per_mb_served"] == round(6 / 3.5, 3)
    assert doc["store_mb_fetched_per_mb_served"] == round(6 / 3.5, 3)
    assert doc["overloaded_pct"] == 20.0
    assert doc["failure_pct_other"] == 20.0
    assert doc["failure_reasons"] == {"overloaded": 1, "stream ended with corrupt_data": 1}
    assert doc["requests_per_server_cpu_second"] == 2.0
    text = markdown(doc)
    assert "| total | 5 | 1 | 1 | 3.5 |" in text
    assert "peak over them +252, after over them +102" in text
    assert "peak +252 MiB within, after +102 MiB OVER" in text  # 286 and 95 MiB: the goals
    assert "over idle + budgets: peak +152, after +2 MiB" in text
