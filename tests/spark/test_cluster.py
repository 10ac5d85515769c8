"""``export`` and the ``tiered-kafka`` source on a real standalone cluster (issue 18, point 5).

A master and a worker from pyspark's own ``bin/spark-class`` (separate JVMs on 127.0.0.1),
the worker started without the project's venv: no ``PYSPARK_PYTHON``, no ``VIRTUAL_ENV``, its
``bin`` off ``PATH``, no ``PYTHONPATH``. Each driver is a process of its own (the test process
holds the ``local[2]`` session the results are compared with) started outside the source tree,
so nothing but what is shipped gives the executors ``gateway``:

* the packed environment of ``make spark-env`` (venv-pack), passed as spark-submit's
  ``--archives ...#environment`` with ``spark.pyspark.python=./environment/bin/python``
  (docs/spark.md): ``export`` writes exactly the records of a ``local[2]`` export;
* the package zip the driver adds (:func:`gateway.spark.ship.ship_package`) for executors whose
  Python has the compiled dependencies but not the package: the same read with and without it.

Cluster logs (master, worker, executors' stderr under ``work/``) stay in the test's temp folder.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow.dataset as ds
import pyspark
import pytest
from pyspark.sql import Row, SparkSession

import gateway.commands.export
from gateway.cli import main as cli_main
from gateway.spark.source import TieredKafkaDataSource
from tests.spark.support import PREFIX, Bucket, write_bucket

SPARK_HOME = Path(pyspark.__file__).parent
REPO = Path(__file__).resolve().parents[2]
EXPORT_SCRIPT = Path(gateway.commands.export.__file__)
START_S = 120.0  # a JVM's start on a loaded 2-core machine, the bound of a failing start
RUN_S = 600
MAX_BYTES = "3000"  # several splits per partition: several tasks on the executors


@dataclass(frozen=True)
class Cluster:
    url: str
    root: Path  # logs and the worker's work folder (one subfolder per application)

    def logs(self) -> str:
        """The master's and worker's logs and the executors' stderr, for a failure message."""
        files = [self.root / "master.log", self.root / "worker.log"]
        files += sorted(self.root.glob("work/*/*/stderr"))
        return "\n".join(f"--- {f}\n{f.read_text(errors='replace')[-4000:]}" for f in files)


def cluster_env(**extra: str) -> dict[str, str]:
    """This environment without the project's venv (as a cluster machine's would be)."""
    venv_bin = str(Path(sys.executable).parent)
    drop = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_HOME"] = str(SPARK_HOME)
    env.update(extra)
    return env


def _wait_for_line(log: Path, pattern: str, proc: subprocess.Popen[bytes]) -> re.Match[str]:
    """The first match of ``pattern`` in ``log`` once the process has written it; fails when
    the process exits first or nothing matches within ``START_S``."""
    deadline = time.monotonic() + START_S
    while True:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        if proc.poll() is not None or time.monotonic() > deadline:
            state = f"exited {proc.returncode}" if proc.returncode is not None else "timed out"
            raise RuntimeError(f"{log.name}: {state} before {pattern!r}:\n{log.read_text()}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the process group of ``proc`` (the JVM and anything it started)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _daemon(kind: str, args: list[str], root: Path) -> subprocess.Popen[bytes]:
    """``spark-class org.apache.spark.deploy.<kind>``, its output in ``<name>.log``."""
    log = (root / f"{kind.split('.', maxsplit=1)[0]}.log").open("wb")
    with log:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), f"org.apache.spark.deploy.{kind}", *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=cluster_env(),
            cwd=root, start_new_session=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and a worker (2 cores, 2 GiB) on 127.0.0.1, ports chosen by the JVMs."""
    root = tmp_path_factory.mktemp("cluster")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        host = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        procs.append(_daemon("master.Master", host, root))
        url = _wait_for_line(root / "master.log", r"Starting Spark master at (spark://\S+)",
                             procs[0]).group(1)  # fmt: skip
        (root / "work").mkdir()
        worker = [*host, "--cores", "2", "--memory", "2g", "--work-dir", str(root / "work"), url]
        procs.append(_daemon("worker.Worker", worker, root))
        _wait_for_line(root / "worker.log", r"Successfully registered with master", procs[1])
        yield Cluster(url, root)
    finally:
        for proc in reversed(procs):
            _stop(proc)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    return write_bucket(tmp_path_factory.mktemp("cluster-bucket"))


def export_args(bucket: Bucket, topic: str, out: Path) -> list[str]:
    return [
        "--store", bucket.store_url, "--key-prefix", PREFIX, "--key-pair", bucket.key_pairs[0],
        "--topic", topic, "--output", str(out), "--max-bytes-per-partition", MAX_BYTES,
        "--include-headers", "--quiet",
    ]  # fmt: skip


def table_rows(path: Path) -> list[dict[str, object]]:
    """An export's records with their topic and partition (from the folder names), in order."""
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda row: (row["partition"], row["offset"]))


def driver_conf(**conf: str) -> list[str]:
    base = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.executor.memory": "1g",
        **conf,
    }
    return [arg for key, value in base.items() for arg in ("--conf", f"{key}={value}")]


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make spark-env`` into a temp folder: the archive the documentation tells to ship."""
    target = tmp_path_factory.mktemp("spark-env") / "spark-env"
    base_python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}"
    started = time.monotonic()
    done = subprocess.run(
        ["make", "--no-print-directory", "spark-env", f"SPARK_ENV={target}",
         f"PYTHON={base_python}"],
        cwd=REPO, capture_output=True, text=True, timeout=RUN_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    archive = target.with_name("spark-env.tar.gz")
    size_mb = archive.stat().st_size / 1e6
    print(f"make spark-env: {time.monotonic() - started:.0f} s, {size_mb:.0f} MB")
    return archive


@pytest.mark.slow
def test_export_on_a_cluster_with_the_packed_environment(
    cluster: Cluster, packed_env: Path, bucket: Bucket, tmp_path: Path
) -> None:
    """spark-submit with the archive, as docs/spark.md says, and the CLI with the same settings
    in ``PYSPARK_SUBMIT_ARGS`` and ``PYSPARK_PYTHON``: the records of ``local[2]``."""
    local = tmp_path / "local"
    assert cli_main(["export", *export_args(bucket, "sealed", local), "--master", "local[2]"]) == 0
    out = tmp_path / "cluster"
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url,
        "--archives", f"{packed_env}#environment",
        *driver_conf(**{"spark.pyspark.python": "./environment/bin/python",
                        "spark.pyspark.driver.python": sys.executable}),
        str(EXPORT_SCRIPT), *export_args(bucket, "sealed", out),
    ]  # fmt: skip
    done = subprocess.run(
        command, env=cluster_env(), cwd=tmp_path, capture_output=True, text=True,
        timeout=RUN_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:] + cluster.logs()
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    expected = sum(len(p.records) for p in bucket.topics["sealed"].values())
    assert summary["records"] == expected
    assert table_rows(out) == table_rows(local)
    assert len(table_rows(out)) == expected
    # The executors ran the unpacked archive, and no package zip was added beside it.
    app = max((cluster.root / "work").glob("app-*"), key=lambda p: p.stat().st_mtime)
    assert list(app.glob("*/environment/bin/python")), sorted(app.rglob("*"))[:50]
    assert not list(app.rglob("tiered_gateway-*.zip"))
    # `tiered-gateway export --master spark://...` from a shell: the same, from the environment.
    out = tmp_path / "shell"
    submit_args = " ".join(["--archives", f"{packed_env}#environment", *driver_conf()])
    env = cluster_env(PYSPARK_SUBMIT_ARGS=f"{submit_args} pyspark-shell",
                      PYSPARK_PYTHON="./environment/bin/python")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "export", *export_args(bucket, "sealed", out),
         "--master", cluster.url],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:] + cluster.logs()
    assert table_rows(out) == table_rows(local)


READ = """
import json, sys
from pyspark.sql import Row, SparkSession
from gateway.spark.ship import ship_package
from gateway.spark.source import TieredKafkaDataSource

master, options, out, ship = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
builder = SparkSession.builder.master(master).appName("tiered-kafka read")
if len(sys.argv) > 5:
    builder = builder.config("spark.archives", sys.argv[5])
spark = (builder
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.executor.memory", "1g")
         .config("spark.task.maxFailures", "1")
         .config("spark.tieredGateway.shipPackage", ship).getOrCreate())
print("SHIPPED", ship_package(spark), flush=True)
spark.dataSource.register(TieredKafkaDataSource)
spark.read.format("tiered-kafka").options(**options).load().write.parquet(out)
spark.stop()
"""


@pytest.fixture(scope="module")
def deps_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with the compiled dependencies but not the package: a new venv that sees the
    project venv's site-packages as a plain path (its editable-install hook, a .pth file of
    that folder, is not run, so ``gateway`` does not import)."""
    venv = tmp_path_factory.mktemp("deps-python") / "venv"
    base_python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}"
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(p for p in map(Path, sys.path) if p.name == "site-packages" and
                p.is_relative_to(sys.prefix))  # fmt: skip
    (next(venv.glob("lib/python*/site-packages")) / "deps.pth").write_text(f"{site}\n")
    python = venv / "bin" / "python"
    probe = "import numba, numpy, pyarrow, zstandard\ntry:\n import gateway\nexcept ImportError:"
    probe += "\n print('NO GATEWAY')"
    done = subprocess.run([str(python), "-c", probe], env=cluster_env(), cwd=venv,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.stdout.strip() == "NO GATEWAY", done.stderr
    return python


def read_on(
    cluster: Cluster, python: str, bucket: Bucket, out: Path, ship: str, *archive: str
) -> str:
    """Run :data:`READ` as a driver of its own in ``out``'s folder, its Python workers (the
    driver's planning one and the executors') running ``python``: its exit code and output."""
    script = out.parent / "read.py"
    script.write_text(READ)
    options = bucket.options("sealed", maxBytesPerPartition=MAX_BYTES, includeHeaders="true")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), cluster.url, json.dumps(options), str(out), ship, *archive],
        env=cluster_env(PYSPARK_PYTHON=python), cwd=out.parent, capture_output=True,
        text=True, timeout=RUN_S, check=False,
    )  # fmt: skip
    print(f"read on the cluster, shipPackage={ship}: {time.monotonic() - started:.0f} s")
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def local_rows(spark: SparkSession, bucket: Bucket) -> list[Row]:
    """The topic as ``local[2]`` reads it, in (partition, offset) order."""
    spark.dataSource.register(TieredKafkaDataSource)
    options = bucket.options("sealed", maxBytesPerPartition=MAX_BYTES, includeHeaders="true")
    local = spark.read.format("tiered-kafka").options(**options).load()
    rows = sorted(local.collect(), key=lambda r: (r.partition, r.offset))
    assert len(rows) == sum(len(p.records) for p in bucket.topics["sealed"].values())
    return rows


def parquet_rows(spark: SparkSession, out: Path) -> list[Row]:
    return sorted(spark.read.parquet(str(out)).collect(), key=lambda r: (r.partition, r.offset))


@pytest.mark.slow
def test_the_source_on_a_cluster_with_the_package_zip(
    cluster: Cluster, deps_python: Path, bucket: Bucket, spark: SparkSession, tmp_path: Path
) -> None:
    """Executors whose Python has the compiled dependencies only: the read fails with
    ``No module named 'gateway'`` unless the driver ships the zip, and with it equals
    ``local[2]``."""
    (tmp_path / "without").mkdir()
    failed = read_on(cluster, str(deps_python), bucket, tmp_path / "without" / "out", "false")
    assert not failed.startswith("exit 0"), failed[-4000:]
    assert "No module named 'gateway'" in failed, failed[-4000:]
    assert "SHIPPED None" in failed
    (tmp_path / "with").mkdir()
    out = tmp_path / "with" / "out"
    shipped = read_on(cluster, str(deps_python), bucket, out, "auto")
    assert shipped.startswith("exit 0"), shipped[-4000:] + cluster.logs()
    assert re.search(r"SHIPPED \S+/tiered_gateway-[0-9a-f]{16}\.zip", shipped), shipped[-2000:]
    assert parquet_rows(spark, out) == local_rows(spark, bucket)


@pytest.mark.slow
def test_the_source_on_a_cluster_with_the_packed_environment(
    cluster: Cluster, packed_env: Path, bucket: Bucket, spark: SparkSession, tmp_path: Path
) -> None:
    """Client mode: the executors run ``./environment/bin/python`` of the unpacked archive, and
    so does the driver's planning worker, from the driver's working folder: without an
    ``environment`` there the read fails before any task; with one (a link to the driver's
    venv, as docs/spark.md says) it equals ``local[2]``, and no package zip is added."""
    python, archive = "./environment/bin/python", f"{packed_env}#environment"
    (tmp_path / "without").mkdir()
    failed = read_on(cluster, python, bucket, tmp_path / "without" / "out", "auto", archive)
    assert not failed.startswith("exit 0"), failed[-4000:]
    assert "environment/bin/python" in failed, failed[-4000:]
    (tmp_path / "with").mkdir()
    (tmp_path / "with" / "environment").symlink_to(sys.prefix)
    out = tmp_path / "with" / "out"
    done = read_on(cluster, python, bucket, out, "auto", archive)
    assert done.startswith("exit 0"), done[-4000:] + cluster.logs()
    assert "SHIPPED None" in done  # spark.archives is set: the environment has the package
    assert parquet_rows(spark, out) == local_rows(spark, bucket)
