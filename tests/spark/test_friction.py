"""What a new user met first (issue 18, point 4), each a test: the source from a plain
interpreter with no venv activated, and an empty scrub scope."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from gateway.cli import main
from gateway.demo import DemoBucket

pytestmark = pytest.mark.spark

PROGRESS = re.compile(r"export \S+: \d+/\d+ tasks done")  # gateway.spark.progress
JVM_NOTICE = "Picked up JAVA_TOOL_OPTIONS: "
READ = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
from gateway.spark.source import TieredKafkaDataSource  # imported after the session started
spark.dataSource.register(TieredKafkaDataSource)
df = (spark.read.format("tiered-kafka").option("store", sys.argv[1])
      .option("keyPrefix", sys.argv[2]).option("topic", "orders").load())
print("COUNT", df.count())
spark.stop()
"""


def test_a_plain_interpreter_without_the_venv_reads_the_source(
    demo: DemoBucket, tmp_path: Path
) -> None:
    """No PYSPARK_PYTHON and the venv not on PATH (a `python` started by its path, as a cron
    job or an IDE does): the workers must still run an interpreter that has `gateway`."""
    script = tmp_path / "read.py"
    script.write_text(READ)
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    done = subprocess.run(
        [sys.executable, str(script), demo.store_url, demo.key_prefix],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    orders = next(t for t in demo.topics if t.name == "orders")
    assert f"COUNT {orders.records}" in done.stdout, done.stderr[-3000:]


def test_an_empty_scrub_scope_is_an_error(
    demo: DemoBucket, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong key prefix finds nothing: exit 2 naming it, never "0 segments, 0 errors"."""
    args = ["scrub", "--store", demo.store_url, "--key-prefix", "nothing-here/", "--master",
            "local[1]"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no tiered segment under" in err and "--allow-empty" in err
    assert main([*args, "--allow-empty"]) == 0


def test_export_help_says_what_its_bounds_take(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    out = capsys.readouterr().out
    assert "see above" not in out
    assert "ISO-8601" in out and "@<epoch ms>" in out and "exclusive" in out


def test_a_failed_export_says_one_thing_and_keeps_the_traces_in_its_log(
    demo: DemoBucket, tmp_path: Path
) -> None:
    """A fresh process (Spark's logging is set when its JVM starts): a corrupt batch gives a
    handful of lines on stderr ending with the typed error and the log's path; the traces are
    in that log, and no output folder is left."""
    import shutil  # noqa: PLC0415

    bucket = tmp_path / "bucket"
    shutil.copytree(demo.root / "bucket", bucket)
    log = max(bucket.rglob("orders-*/0/*.log"), key=lambda p: p.stat().st_size)
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x5A
    log.write_bytes(bytes(data))
    spark_log = tmp_path / "spark.log"
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "export", "--store", bucket.as_uri(),
         "--key-prefix", demo.key_prefix, "--topic", "orders", "--output", str(tmp_path / "out"),
         "--master", "local[2]", "--spark-log", str(spark_log)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    # the progress lines come every 5 s, as many as the machine's load makes the job last
    # the lines counted are the export's own: not the JVM's "Picked up JAVA_TOOL_OPTIONS"
    # (the suite's JIT settings, tests/conftest.py)
    lines = [ln for ln in done.stderr.strip().splitlines()
             if not PROGRESS.match(ln) and not ln.startswith(JVM_NOTICE)]  # fmt: skip
    assert len(lines) <= 5, done.stderr[-3000:]  # was ~150: Spark's traces, then the error
    assert any(ln.startswith("error: export of orders failed") and "CrcMismatch" in ln
               for ln in lines)  # fmt: skip
    assert str(spark_log) in lines[-1]
    assert "CrcMismatchError" in spark_log.read_text()  # the traces, kept
    assert not (tmp_path / "out").exists()
