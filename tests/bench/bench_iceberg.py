"""Iceberg export benchmark: records/s of ``export --format iceberg`` next to the Parquet
export, in the same run, on the same bucket and the same Spark session.

The data are :mod:`tests.bench.bench_spark`'s (N records of 200-byte values in 16 KiB batches,
segments of ``--segment-mib``, tiered with no chunk transform into a filesystem store). One
fresh session on ``--master`` runs ``--runs`` rounds; each round is a Parquet export (the Arrow
writer, ``--mode overwrite`` into one folder) and an Iceberg export into a new warehouse (an
embedded SQLite catalog, the table created by the run), in alternating order. The first round
is a warm-up (its first export starts Spark's Python workers and loads the compiled loop); the
ratio is of the other rounds: of the best run of each, and the median of the rounds' own
ratios (the steadier figure on a busy machine). An Iceberg run's time includes creating the
table and the driver's commit (reading every file's footer), which the summary also gives
alone (``commit_seconds``). The CPU seconds of the whole process tree (driver, JVM, Python
workers) are measured too: on a busy machine they compare the two where wall time cannot.
Each run's rows are counted back (the Iceberg table through
pyiceberg's scan).

    python -m tests.bench.bench_iceberg [--records 5000000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

from tests.bench.bench_spark import PREFIX, TOPIC, fresh_session, prepare_bucket

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu(pid: int | None = None) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each live process of the tree under ``pid``
    (this one): the driver, Spark's JVM and its Python workers (Linux only; empty elsewhere)."""
    pid = os.getpid() if pid is None else pid
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        children: list[int] = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    except OSError:  # gone meanwhile
        return {}
    out = {pid: (int(fields[11]) + int(fields[12])) / _TICK}
    for child in children:
        out.update(tree_cpu(child))
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float | None:
    """CPU seconds the tree used between two snapshots; None when a process of the first
    ended meanwhile (its last seconds are not known)."""
    if set(before) - set(after):
        return None
    return sum(after[p] - before.get(p, 0.0) for p in after)


def _export(args: list[str]) -> tuple[dict[str, object], float, float | None]:
    """One ``tiered-gateway export``: its JSON summary, wall seconds and CPU seconds."""
    from gateway.cli import main as cli_main  # noqa: PLC0415

    out = io.StringIO()
    cpu = tree_cpu()
    started = time.perf_counter()
    with redirect_stdout(out):
        code = cli_main(args)
    seconds = time.perf_counter() - started
    used = cpu_between(cpu, tree_cpu())
    if code != 0:
        raise SystemExit(f"export failed with {code}: {' '.join(args)}")
    summary: dict[str, object] = json.loads(out.getvalue().strip().splitlines()[-1])
    return summary, seconds, used


def _cpu(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.1f}"


def parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq  # noqa: PLC0415

    return int(pq.ParquetDataset(path).read(columns=["offset"]).num_rows)


def iceberg_rows(warehouse: Path) -> tuple[int, int]:
    """Rows and data files of the table, read back through pyiceberg."""
    from gateway.spark import iceberg as ice  # noqa: PLC0415

    table = ice.load_table(ice.open_catalog(None, str(warehouse)), ("kafka", TOPIC))
    assert table is not None
    scan = table.scan(selected_fields=("offset",))
    return scan.to_arrow().num_rows, len(list(scan.plan_files()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--max-bytes-per-partition", type=int, default=32 * 1024 * 1024)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
    try:
        count = prepare_bucket(root, args.records, args.segment_mib, f"; master {args.master}")
        common = [
            "export", "--store", (root / "bucket").as_uri(), "--key-prefix", PREFIX,
            "--topic", TOPIC, "--max-bytes-per-partition", str(args.max_bytes_per_partition),
            "--quiet",
        ]  # fmt: skip
        spark = fresh_session(args.master)
        timings: dict[str, list[float]] = {"parquet": [], "iceberg": []}
        cpus: dict[str, list[float | None]] = {"parquet": [], "iceberg": []}
        for run in range(args.runs):
            done: dict[str, tuple[dict[str, object], float, float | None]] = {}
            for kind in ("parquet", "iceberg") if run % 2 == 0 else ("iceberg", "parquet"):
                if kind == "parquet":
                    out = root / "parquet"
                    done[kind] = _export([*common, "--output", str(out), "--mode", "overwrite"])
                    rows, files = parquet_rows(out), int(str(done[kind][0]["files"]))
                else:
                    warehouse = root / f"warehouse-{run}"
                    done[kind] = _export([*common, "--format", "iceberg", "--warehouse",
                                          str(warehouse)])  # fmt: skip
                    rows, files = iceberg_rows(warehouse)
                    shutil.rmtree(warehouse)  # as the Parquet output is overwritten
                summary, seconds, cpu = done[kind]
                if rows != count or summary["records"] != count or files != summary["files"]:
                    raise SystemExit(f"{kind} run {run}: {rows} rows in {files} files, not {count}")
                timings[kind].append(seconds)
                cpus[kind].append(cpu)
            (psum, psec, pcpu), (isum, isec, icpu) = done["parquet"], done["iceberg"]
            print(f"run {run}: parquet {count / psec / 1e6:.2f} M records/s ({psec:.2f} s, "
                  f"{_cpu(pcpu)} CPU s, {psum['files']} files), iceberg "
                  f"{count / isec / 1e6:.2f} M records/s ({isec:.2f} s, {_cpu(icpu)} CPU s, "
                  f"{isum['files']} files, commit {isum['commit_seconds']} s)")  # fmt: skip
        spark.stop()
        if args.runs < 2:
            raise SystemExit("no warm round: give --runs 2 or more")
        parquet = count / min(timings["parquet"][1:])
        ice_rate = count / min(timings["iceberg"][1:])
        best = ice_rate / parquet
        rounds = sorted(p / i for p, i in zip(timings["parquet"][1:], timings["iceberg"][1:],
                                               strict=True))  # fmt: skip
        median = rounds[len(rounds) // 2] if len(rounds) % 2 else sum(
            rounds[len(rounds) // 2 - 1 : len(rounds) // 2 + 1]) / 2  # fmt: skip
        print(f"warm (runs 1-{args.runs - 1}, best of each): parquet {parquet / 1e6:.2f} M "
              f"records/s, iceberg {ice_rate / 1e6:.2f} M records/s: ratio {best:.2f}; median "
              f"of the rounds' ratios {median:.2f} (goal >= 0.9: "
              f"{'met' if min(best, median) >= 0.9 else 'NOT met'}); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
        known = {k: [c for c in v[1:] if c is not None] for k, v in cpus.items()}
        if known["parquet"] and known["iceberg"]:
            pcpu, icpu = min(known["parquet"]), min(known["iceberg"])
            print(f"CPU (best of each, driver + JVM + Python workers): parquet {pcpu:.1f} s, "
                  f"iceberg {icpu:.1f} s: ratio of records per CPU second "
                  f"{pcpu / icpu:.2f}")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
