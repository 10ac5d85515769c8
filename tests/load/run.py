"""``make load``: a generated bucket, ``tiered-gateway serve`` on it, locust headless against it.

    python -m tests.load.run [--seconds 60] [--users 200] [--scenario Mix] [--rate 0.5]

Steps: build (or reuse, under ``--bucket-cache``) the bucket of the HTTP benchmark
(``tests/bench/http_bucket.py``: one partition, ~130 MiB by default, larger than the caches, so
random reads miss them); start the server on a free port with small cache budgets; run locust
as its own process (``import locust`` cannot share a process with httpx or botocore) for
``--seconds`` at ``--users``; sample the server's memory (summed PSS of the server and any child
processes) every 0.5 s during the run and ``--after`` seconds after it; scrape ``/metrics``
before and after; write ``summary.json``, ``summary.md``, ``rss.csv`` (and ``rss.png`` when
matplotlib is installed) into ``--out``.

``LOAD_SECONDS``, ``LOAD_USERS``, ``LOAD_SCENARIO``, ``LOAD_RATE``, ``LOAD_INFLIGHT_MIB`` and
``LOAD_WORKERS`` (1: the memory bound is one process's) set the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

from gateway.config import Settings
from tests.bench.http_bucket import BASE_TS, KEY_PREFIX, TOPIC, BenchBucket, bench_bucket
from tests.bench.http_procs import tree_cpu_s
from tests.fixtures.ports import LOCALHOST, listening_port
from tests.load.report import MIB, markdown, summary

HERE: Final = Path(__file__).resolve().parent
SAMPLE_EVERY_S: Final = 0.5


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (uvicorn workers, if any)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


def rss_bytes(pid: int) -> int:
    """The memory of the server's processes: their summed PSS (``smaps_rollup``), issue 30's
    measure: pages the forked workers share with the supervisor count once, not once per
    process as in VmRSS (the ``rss_*`` names of the summary are kept)."""
    total = 0
    for p in _tree(pid):
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
    return total


class Sampler(threading.Thread):
    """(seconds since start, RSS bytes) every 0.5 s until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.points = pid, list[tuple[float, int]]()
        self.started = time.monotonic()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.points.append((time.monotonic() - self.started, rss_bytes(self.pid)))
            self._stop_event.wait(SAMPLE_EVERY_S)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def plan(bucket: BenchBucket) -> dict[str, Any]:
    """What the locustfile reads (``LOAD_PLAN``): the partitions, their offsets and times."""
    end = bucket.records  # record n has offset n and the timestamp BASE_TS + n
    last = BASE_TS + end - 1
    part = {"partition": 0, "end_offset": end, "first_timestamp": BASE_TS, "last_timestamp": last}
    return {"topic": TOPIC, "partitions": [part]}


def start_server(bucket: BenchBucket, args: argparse.Namespace, log: Path) -> tuple[Any, str]:
    exe = Path(sys.executable).parent / "tiered-gateway"
    cmd = [
        str(exe) if exe.exists() else "tiered-gateway",
        "serve",
        *("--store", bucket.store_url, "--key-prefix", KEY_PREFIX, "--port", "0"),
        *("--chunk-cache-bytes", str(args.chunk_cache_mib * MIB)),
        *("--index-cache-bytes", str(args.index_cache_mib * MIB)),
        *("--rescan-interval-s", "0", "--log-level", "warning"),
        *(("--inflight-bytes", str(args.inflight_mib * MIB)) if args.inflight_mib else ()),
        *(("--workers", str(args.workers)) if "workers" in Settings.model_fields else ()),
        *args.serve_arg,
    ]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://{LOCALHOST}:{listening_port(proc)}"
    deadline = time.monotonic() + 60
    while _get(base + "/readyz")[0] != 200:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.terminate()
            raise RuntimeError(f"the server did not get ready; see {log}")
        time.sleep(0.1)
    return proc, base


def _default_mib(setting: str) -> int | None:
    """The default of a byte setting of ``serve`` in MiB; None if there is no such setting."""
    field = Settings.model_fields.get(setting)
    return None if field is None else int(field.get_default(call_default_factory=True)) // MIB


def run_locust(base: str, args: argparse.Namespace, out: Path) -> None:
    env = {
        **os.environ,
        "LOAD_PLAN": str(out / "plan.json"),
        "LOAD_SAMPLES": str(out / "samples.json"),
        "LOAD_RATE": str(args.rate),
    }
    cmd = [
        *(sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), "--host", base),
        *("--headless", "--only-summary", "-u", str(args.users), "-r", str(args.spawn_rate)),
        *("-t", f"{args.seconds}s", "--stop-timeout", "60", "--csv", str(out / "locust")),
        *("--exit-code-on-error", "0", *args.scenario),
    ]
    with (out / "locust.log").open("wb") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)


def plot(
    points: list[tuple[float, int]], marks: dict[str, float], ended: float, path: Path
) -> bool:
    """RSS over time as a PNG, if matplotlib is installed; True when written."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([t for t, _ in points], [r / MIB for _, r in points], label="server RSS")
    for (label, mib), style in zip(marks.items(), ("--", ":", "-."), strict=False):
        ax.axhline(mib, linestyle=style, linewidth=1, label=label, color="grey")
    ax.axvline(ended, linewidth=1, color="black", label="locust stopped")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=int, default=int(env("LOAD_SECONDS", "60")))
    p.add_argument("--users", type=int, default=int(env("LOAD_USERS", "200")))
    p.add_argument("--spawn-rate", type=int, default=50)
    p.add_argument("--rate", type=float, default=float(env("LOAD_RATE", "0.5")))
    p.add_argument("--scenario", nargs="*", default=env("LOAD_SCENARIO", "Mix").split())
    p.add_argument("--records", type=int, default=600_000, help="of ~220 B each")
    p.add_argument("--segment-mib", type=int, default=16)
    p.add_argument("--chunk-cache-mib", type=int, default=32)
    p.add_argument("--index-cache-mib", type=int, default=16)
    p.add_argument(
        "--inflight-mib",
        type=int,
        default=int(env("LOAD_INFLIGHT_MIB", "0")) or None,
        help="response bytes in flight (default: serve's)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=int(env("LOAD_WORKERS", "1")),
        help="serve's worker processes, where serve has the option (the RSS is their sum)",
    )
    p.add_argument("--after", type=float, default=5.0, help="seconds sampled after the run")
    p.add_argument("--out", type=Path, default=Path("build/load"))
    p.add_argument("--bucket-cache", type=Path, default=Path("build/load-bucket"))
    p.add_argument(
        "--serve-arg", action="append", default=[], help="passed on to serve: --serve-arg=--x=1"
    )
    return p.parse_args()


def main() -> None:
    args = parse_args()
    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"a bucket of {args.records} records ...", flush=True)
    bucket = bench_bucket(args.bucket_cache, args.records, args.segment_mib)
    (out / "plan.json").write_text(json.dumps(plan(bucket)))
    proc, base = start_server(bucket, args, out / "server.log")
    try:
        time.sleep(1.0)
        idle = rss_bytes(proc.pid)
        metrics_before = _get(base + "/metrics")[1]
        sampler = Sampler(proc.pid)
        sampler.start()
        cpu0 = tree_cpu_s(proc.pid)
        print(f"locust: {args.users} users, {args.seconds} s, {args.scenario} ...", flush=True)
        run_locust(base, args, out)
        cpu = tree_cpu_s(proc.pid) - cpu0
        ended = time.monotonic() - sampler.started
        time.sleep(args.after)
        sampler.stop()
        metrics_after = _get(base + "/metrics")[1]
    finally:
        proc.terminate()
        proc.wait(30)
    during = [r for t, r in sampler.points if t <= ended]
    budgets = args.chunk_cache_mib + args.index_cache_mib
    run = {
        "users": args.users,
        "scenario": " ".join(args.scenario),
        "cores": os.cpu_count(),
        "bucket_mib": round(bucket.log_bytes / MIB, 1),
        "budgets_mib": budgets,
        "inflight_budget_mib": args.inflight_mib or _default_mib("inflight_bytes"),
        "workers": args.workers if "workers" in Settings.model_fields else 1,
        "server_cpu_seconds": round(cpu, 1),
        "rss_idle_mib": round(idle / MIB),
        "rss_peak_mib": round(max(during, default=0) / MIB),
        "rss_after_mib": round(sampler.points[-1][1] / MIB),
        "after_seconds": args.after,
    }
    data = json.loads((out / "samples.json").read_text())
    run["unfinished_at_stop"] = data["started"] - len(data["samples"])
    doc = summary(data["samples"], data["rate_per_user"], run, metrics_before, metrics_after)
    with (out / "rss.csv").open("w") as f:
        f.write("seconds,rss_bytes\n")
        f.writelines(f"{t:.2f},{r}\n" for t, r in sampler.points)
    marks = {
        "budgets + 300 MB": budgets + 300e6 / MIB,
        "budgets + 100 MB": budgets + 100e6 / MIB,
        "idle + budgets": idle / MIB + budgets,
    }
    doc["rss_plot"] = "rss.png" if plot(sampler.points, marks, ended, out / "rss.png") else None
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(doc)
    (out / "summary.md").write_text(text)
    print(text)
    print(f"written to {out}/ (summary.json, summary.md, rss.csv, locust_*.csv)")


if __name__ == "__main__":
    main()
