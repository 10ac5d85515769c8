"""``make load`` end to end, shortened: a small bucket, a real server, locust for a few seconds.
Skipped where the ``load`` extra (locust) is not installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("locust") is None, reason="the `load` extra is not installed"
)
ROOT = Path(__file__).resolve().parents[2]


def test_a_short_load_run_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "load"
    args = ["--seconds", "3", "--users", "4", "--spawn-rate", "4", "--rate", "2"]
    args += ["--records", "20000", "--segment-mib", "1", "--after", "1", "--out", str(out)]
    args += ["--bucket-cache", str(tmp_path / "bucket")]
    args += ["--scenario", "WarmPages", "ColdReads", "Streams", "Offsets"]  # a user each
    subprocess.run(
        [sys.executable, "-m", "tests.load.run", *args], cwd=ROOT, check=True, timeout=240
    )
    doc = json.loads((out / "summary.json").read_text())
    assert doc["requests"] > 0
    assert doc["failure_reasons"] == {}, doc["failure_reasons"]
    names = {row["name"] for row in doc["by_name"]}
    assert names == {"warm page", "cold raw", "ndjson stream", "list offsets", "total"}
    assert doc["mb_served"] > 0
    assert doc["rss_peak_mib"] >= doc["rss_idle_mib"] > 0
    assert (out / "summary.md").read_text().startswith("4 users, scenario WarmPages ColdReads")
    assert (out / "rss.csv").read_text().count("\n") > 2
