"""End-to-end HTTP benchmark (issue 15): ``tiered-gateway serve`` on a bucket of ~200 B records
encoded by kafka-python, against nginx serving the same bytes with Range requests and a naive
peer (read the ``.log`` objects, decode with kafka-python), all in one run.

Figures are per CPU-second of the server's process tree (utime + stime from ``/proc``), with
the client's CPU beside them; wall-clock on a shared machine is noise. Warm: the clients walk a
window of the partition that fits the default caches, after one pass over it; each figure is
the best of ``--repeats`` runs. Cold: 100 concurrent reads through a slow S3 stand-in
(:mod:`tests.bench.http_cold`).

    python -m tests.bench.bench_http [--records 1500000] [--seconds 3] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gateway.config import Settings
from tests.bench import http_report
from tests.bench.http_bucket import KEY_PREFIX, TOPIC, BenchBucket, bench_bucket
from tests.bench.http_cold import cold_bucket, run_cold
from tests.bench.http_floor import floor_walker, start_floor, whole_batches
from tests.bench.http_load import (
    Conn,
    Measured,
    MiB,
    Step,
    Window,
    drive,
    json_walker,
    ndjson_walker,
    range_walker,
    raw_walker,
    warm_pass,
)
from tests.bench.http_peer import naive_peer
from tests.bench.http_procs import nginx_binary, start_nginx, tree_pss_mib
from tests.bench.http_report import Results
from tests.integration.serve import start_serve, stop, wait_ready

IDLE_S = 3.0  # after /readyz, before the idle memory is read

Walker = Callable[[str, Window, int, int], tuple[Step, Conn]]
Make = Callable[[int, int], tuple[Step, Conn]]


def _window_mib() -> int:
    """128 MiB, or half the default chunk cache when that is smaller: a window that stays warm."""
    field = Settings.model_fields.get("chunk_cache_bytes")
    cache = field.default if field is not None and isinstance(field.default, int) else 0
    return min(128, cache // MiB // 2) if cache else 128


def _window(bucket: BenchBucket, window_mib: int) -> tuple[int, int]:
    """(records, bytes) of the warm window: the first ``window_mib`` of the log."""
    window_bytes = min(bucket.log_bytes, window_mib * MiB)
    return bucket.records * window_bytes // bucket.log_bytes, window_bytes


def _bind(walker: Walker, url: str, window: Window) -> Make:
    return lambda c, n: walker(url, window, c, n)


def _best(args: argparse.Namespace, make: Make, pid: int, name: str, out: Results) -> Measured:
    """The best of ``--repeats`` runs (interference from other work only slows a run); the
    spread of all of them is kept for the report."""
    drive(make, args.clients, 1.0, pid)  # warm-up, not counted
    runs = [drive(make, args.clients, args.seconds, pid) for _ in range(args.repeats)]
    rates = [m.per_server_cpu_s for m in runs]
    out.spread[name] = (min(rates), max(rates))
    best = max(runs, key=lambda m: m.per_server_cpu_s)
    print(f"  {name:14}: {http_report.describe(name, best)}", flush=True)
    return best


def run_gateway(args: argparse.Namespace, bucket: BenchBucket, work: Path, out: Results) -> None:
    records, _ = _window(bucket, args.window_mib)
    log = work / "serve.log"
    proc, url = start_serve(
        ["--store", bucket.store_url, "--key-prefix", KEY_PREFIX], log, defaults=True
    )
    try:
        wait_ready(url, proc, log)
        time.sleep(IDLE_S)
        out.memory["idle"] = tree_pss_mib(proc.pid)
        warm_pass(url, TOPIC, records, 8 * MiB)
        cases = [
            ("json", json_walker, Window(TOPIC, records, args.max_bytes)),
            ("ndjson", ndjson_walker, Window(TOPIC, records, args.ndjson_bytes)),
            ("raw", raw_walker, Window(TOPIC, records, args.max_bytes)),
        ]
        for name, walker, window in cases:
            out.gateway[name] = _best(args, _bind(walker, url, window), proc.pid, name, out)
        out.memory["after"] = tree_pss_mib(proc.pid)
        print(f"  memory (summed PSS, MiB): {http_report.memory_text(out)}", flush=True)
    finally:
        stop(proc)


def run_floor(args: argparse.Namespace, bucket: BenchBucket, work: Path, out: Results) -> None:
    """The bare server stack answering ``max_bytes`` from memory: the raw figure's ceiling;
    then the same with every batch's CRC checked per answer, from the bare app and from a
    FastAPI route: the ceilings of a checked answer."""
    proc, url = start_floor(args.max_bytes, work / "floor.log")
    try:
        out.floor = _best(args, floor_walker(url, args.max_bytes), proc.pid, "floor", out)
    finally:
        stop(proc)
    log = bucket.logs[0]
    size = len(whole_batches(log, args.max_bytes))
    for fastapi in (False, True):
        name = "framework" if fastapi else "checked"
        proc, url = start_floor(args.max_bytes, work / f"{name}.log", log, fastapi=fastapi)
        try:
            out.ceilings[name] = _best(args, floor_walker(url, size), proc.pid, name, out)
        finally:
            stop(proc)


def run_nginx(args: argparse.Namespace, bucket: BenchBucket, work: Path, out: Results) -> None:
    binary = nginx_binary()
    if binary is None:
        out.notes.append("nginx is not installed and could not be installed: no nginx ratio")
        print("  nginx: missing, skipped", flush=True)
        return
    _, window_bytes = _window(bucket, args.window_mib)
    workers = os.cpu_count() or 1
    nginx = start_nginx(binary, bucket.root, work / "nginx", workers)
    try:
        make = range_walker(nginx.url, bucket.root, bucket.logs, window_bytes, args.max_bytes)
        out.nginx = _best(args, make, nginx.proc.pid, "nginx", out)
    finally:
        nginx.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_500_000, help="records in the bucket")
    ap.add_argument("--segment-mib", type=int, default=96, help="segment size")
    ap.add_argument(
        "--window-mib", type=int, default=_window_mib(), help="warm window (fits the caches)"
    )
    ap.add_argument("--clients", type=int, default=4, help="concurrent client connections")
    ap.add_argument("--seconds", type=float, default=3.0, help="time of one measured run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure (the best counts)")
    ap.add_argument("--max-bytes", type=int, default=MiB, help="max_bytes of a JSON/raw page")
    ap.add_argument("--ndjson-bytes", type=int, default=4 * MiB, help="budget of one stream")
    ap.add_argument("--cold-reads", type=int, default=100, help="concurrent cold reads (0: none)")
    ap.add_argument("--cold-kib", type=int, default=1024, help="bytes of one cold read")
    ap.add_argument("--no-nginx", action="store_true", help="skip nginx")
    ap.add_argument("--cache", type=Path, default=Path("build/bench-http"), help="bucket cache")
    ap.add_argument("--label", default="", help="which server this is, for the docs")
    ap.add_argument("--docs", type=Path, help="write the results into this markdown file")
    args = ap.parse_args()

    bucket = bench_bucket(args.cache, args.records, args.segment_mib)
    print(
        f"bucket: {bucket.records} records, {bucket.segments} segments, "
        f"{bucket.log_bytes / MiB:.0f} MiB of log, {os.cpu_count()} cores",
        flush=True,
    )
    out = Results(
        args=vars(args) | {"segments": bucket.segments, "log_mib": bucket.log_bytes / MiB}
    )
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        work = Path(tmp)
        run_gateway(args, bucket, work, out)
        run_floor(args, bucket, work, out)
        if args.no_nginx:
            out.notes.append("nginx skipped (--no-nginx)")
        else:
            run_nginx(args, bucket, work, out)
        out.peer = max(
            (naive_peer(bucket.logs, args.seconds) for _ in range(args.repeats)),
            key=lambda p: p[0] / p[1],
        )
        print(f"  peer: {out.peer[0] / out.peer[1]:,.0f} records/CPU-s", flush=True)
        if args.cold_reads:
            cold = cold_bucket(args.cache, args.records, args.segment_mib)
            out.cold = run_cold(cold, work, args.cold_reads, args.cold_kib * 1024)
            shed = f", {out.cold.shed} shed (503 overloaded)" if out.cold.shed else ""
            print(f"  cold: {out.cold.p99_s * 1e3:.0f} ms p99{shed}, {out.cold.detail}", flush=True)
        else:
            out.notes.append("cold reads skipped (--cold-reads 0)")
    out.args["load"] = os.getloadavg()[0]
    print()
    print(http_report.table(out))
    for line in http_report.details(out):
        print(line)
    if args.docs is not None:
        plot = http_report.plot(out, args.docs.parent / "img" / "bench_http.png")
        if plot is None:
            out.notes.append("matplotlib is not installed: no plot")
        http_report.write_docs(args.docs, out, plot)
        print(f"\nwritten into {args.docs}")


if __name__ == "__main__":
    main()
