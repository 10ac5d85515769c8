"""The progress line of the Spark commands (gateway/spark/progress.py): pure text, no Spark."""

from __future__ import annotations

from gateway.spark.progress import progress_text


def test_the_line_has_the_rate_and_an_eta() -> None:
    assert progress_text("export orders", 10, 40, 2, 20.0) == (
        "export orders: 10/40 tasks done, 2 running, 0.5 tasks/s, 20 s, ETA 60 s"
    )


def test_no_eta_before_the_first_task_or_after_the_last() -> None:
    assert "ETA" not in progress_text("scrub", 0, 40, 2, 3.0)
    assert "ETA" not in progress_text("scrub", 40, 40, 0, 30.0)
    assert (
        progress_text("scrub", 0, 0, 0, 0.0) == "scrub: 0/0 tasks done, 0 running, 0.0 tasks/s, 0 s"
    )
