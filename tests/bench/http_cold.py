"""The cold figure of the end-to-end HTTP benchmark: ``serve`` on the bench bucket behind a slow
S3 stand-in (:mod:`tests.bench.slow_s3`: 20 ms to the first byte, 100 MiB/s per GET), the
indexes loaded, then ``reads`` concurrent raw fetches of distinct 1 MiB ranges nothing has read;
``serve`` at its defaults (workers, budgets), as users run it.

Theory (as ``bench_cold``): ceil(reads / GET concurrency) waves of one read's first byte + its
bytes at the per-GET bandwidth, with the server's configured GET concurrency."""

from __future__ import annotations

import bisect
import math
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import httpx

from gateway.config import Settings
from tests.bench.http_bucket import KEY_PREFIX, TOPIC, BenchBucket
from tests.bench.http_load import RECORDS, Conn
from tests.bench.http_procs import nginx_binary, start_nginx, tree_cpu_s
from tests.bench.http_report import Cold
from tests.fixtures.ports import LOCALHOST, listening_port
from tests.integration.serve import start_serve, stop, wait_ready

FIRST_BYTE_S: Final = 0.020
MIB_PER_S: Final = 100.0  # one GET's body
BUCKET: Final = "bench-http"
PRIMED: Final = 16 * 2**20  # bytes read at each segment's start while loading the indexes


def _concurrency() -> int:
    value = Settings.model_fields["max_concurrent_gets"].default
    assert isinstance(value, int)
    return value


def _slots(bucket: BenchBucket, reads: int, ask: int, seed: int) -> list[int]:
    """``reads`` distinct ``ask``-byte slots of the concatenated logs away from the primed
    start of each segment (its first 16 MiB, or half of a smaller one)."""
    primed, position = [], 0
    for log in bucket.logs:
        size = log.stat().st_size
        primed.append((position, position + min(PRIMED, size // 2)))
        position += size
    slots = [
        s
        for s in range(bucket.log_bytes // ask - 1)
        if not any(start - ask < s * ask < end for start, end in primed)
    ]
    return random.Random(seed).sample(slots, reads)


def _targets(bucket: BenchBucket, reads: int, ask: int, seed: int) -> list[int]:
    """The offsets at the start of :func:`_slots`: batches are of one size, so offsets are
    proportional to bytes."""
    return [bucket.records * s * ask // bucket.log_bytes for s in _slots(bucket, reads, ask, seed)]


Check = Callable[[int, int, dict[str, str], bytes], None]  # (request, status, headers, body)


def _concurrent(url: str, requests: list[tuple[str, dict[str, str]]], check: Check) -> list[float]:
    """Every request sent at once (one thread and connection each); latencies in seconds."""
    conns = [Conn(url) for _ in requests]
    latencies = [0.0] * len(requests)
    errors: list[BaseException] = []
    go = threading.Barrier(len(requests))

    def one(i: int) -> None:
        path, headers = requests[i]
        try:
            go.wait()
            t0 = time.perf_counter()
            status, answer, body = conns[i].get(path, headers)
            latencies[i] = time.perf_counter() - t0
            check(i, status, answer, body)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    if errors:
        raise errors[0]
    return latencies


def _read_all(url: str, targets: list[int], ask: int, shed: list[int] | None = None) -> list[float]:
    """Raw fetches of ``ask`` bytes at every target at once; latencies in seconds. With
    ``shed``, a read the server refused as overloaded (503, its admission shedding) is noted
    there, not raised: a result of the figure, which then fails its goal."""
    raw = {"Accept": "application/octet-stream"}
    requests = [(RECORDS.format(topic=TOPIC, offset=t, max_bytes=ask), raw) for t in targets]

    def check(i: int, status: int, headers: dict[str, str], body: bytes) -> None:
        if shed is not None and status == 503 and b'"overloaded"' in body:
            shed.append(i)
        elif status != 200 or int(headers["x-next-offset"]) <= targets[i]:
            raise RuntimeError(f"cold read at {targets[i]}: HTTP {status} {body[:200]!r}")

    return _concurrent(url, requests, check)


def _ranges(bucket: BenchBucket, reads: int, ask: int) -> list[tuple[str, int, int]]:
    """The cold reads' slots as (``.log`` path under the bucket root, first byte, size): the
    bytes the gateway's reads ask for, as ranges of the objects that hold them."""
    starts, position = [], 0
    for log in bucket.logs:
        starts.append(position)
        position += log.stat().st_size
    out = []
    for slot in _slots(bucket, reads, ask, seed=15):
        at = slot * ask
        i = bisect.bisect_right(starts, at) - 1
        log, local = bucket.logs[i], at - starts[i]
        out.append(
            (log.relative_to(bucket.root).as_posix(), local, min(ask, log.stat().st_size - local))
        )
    return out


def _read_ranges(url: str, prefix: str, ranges: list[tuple[str, int, int]]) -> list[float]:
    """Every range at once with the gateway's client (``prefix``: before the object path)."""
    requests = [
        (f"{prefix}/{path}", {"Range": f"bytes={at}-{at + size - 1}"}) for path, at, size in ranges
    ]

    def check(i: int, status: int, headers: dict[str, str], body: bytes) -> None:
        if status != 206 or len(body) != ranges[i][2]:
            raise RuntimeError(f"range {requests[i]}: HTTP {status}, {len(body)} bytes")

    return _concurrent(url, requests, check)


def _nginx_floor(bucket: BenchBucket, work: Path, reads: int, ask: int) -> list[float] | None:
    """The same slots as byte ranges of the ``.log`` files, read at once from nginx (page
    cache, no latency, no checks): what this machine's client and loopback alone take; None
    without nginx."""
    binary = nginx_binary()
    if binary is None:
        return None
    nginx = start_nginx(binary, bucket.root, work / "nginx-cold", os.cpu_count() or 1)
    try:
        return _read_ranges(nginx.url, "", _ranges(bucket, reads, ask))
    finally:
        nginx.stop()


def _prime(url: str, bucket: BenchBucket) -> None:
    """Load every segment's indexes (and the data at its start)."""
    conn = Conn(url)
    try:
        for path in bucket.logs:
            base = int(path.name.split("-", 1)[0])
            status, _, body = conn.get(RECORDS.format(topic=TOPIC, offset=base, max_bytes=1), {})
            if status != 200:
                raise RuntimeError(f"priming at {base}: HTTP {status} {body[:200]!r}")
    finally:
        conn.close()


def _floor(bucket: BenchBucket, work: Path, reads: int, ask: int) -> list[float]:
    """The same cold reads on the filesystem store (no latency): what is not the store's."""
    log = work / "serve-cold-file.log"
    args = ["--store", bucket.store_url, "--key-prefix", KEY_PREFIX]
    proc, url = start_serve(args, log, defaults=True)
    try:
        wait_ready(url, proc, log)
        _prime(url, bucket)
        return _read_all(url, _targets(bucket, reads, ask, seed=15), ask)
    finally:
        stop(proc)


def run_cold(bucket: BenchBucket, work: Path, reads: int, ask: int) -> Cold:
    s3_log = (work / "slow_s3.log").open("wb")
    s3 = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.slow_s3", "--root", str(bucket.root), "--bucket",
         BUCKET, "--first-byte-ms", str(FIRST_BYTE_S * 1000), "--mib-per-s", str(MIB_PER_S)],
        stdout=s3_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        endpoint = f"http://{LOCALHOST}:{listening_port(s3)}"
        args = ["--store", f"s3://{BUCKET}", "--key-prefix", KEY_PREFIX, "--s3-endpoint-url",
                endpoint, "--s3-path-style", "--s3-region", "us-east-1"]  # fmt: skip
        log = work / "serve-cold.log"
        proc, url = start_serve(args, log, defaults=True)
        try:
            wait_ready(url, proc, log)
            _prime(url, bucket)
            before = httpx.get(f"{endpoint}/_stats").json()
            cpu0, gw0, wall0 = tree_cpu_s(s3.pid), tree_cpu_s(proc.pid), time.perf_counter()
            shed: list[int] = []
            latencies = _read_all(url, _targets(bucket, reads, ask, seed=15), ask, shed)
            wall = time.perf_counter() - wall0
            s3_cpu, gw_cpu = tree_cpu_s(s3.pid) - cpu0, tree_cpu_s(proc.pid) - gw0
            after = httpx.get(f"{endpoint}/_stats").json()
        finally:
            stop(proc)
        # The peer: the same client reading the same ranges straight from the same store.
        direct = _read_ranges(endpoint, f"/{BUCKET}", _ranges(bucket, reads, ask))
    finally:
        s3.terminate()
        s3.wait(timeout=10)
        s3_log.close()
    floor = statistics.quantiles(_floor(bucket, work, reads, ask), n=100)
    nginx = _nginx_floor(bucket, work, reads, ask)
    concurrency = _concurrency()
    one_read = FIRST_BYTE_S + ask / (MIB_PER_S * 2**20)
    q = statistics.quantiles(latencies, n=100)
    gets, fetched = after["gets"] - before["gets"], after["bytes"] - before["bytes"]
    return Cold(
        reads=reads,
        p50_s=q[49],
        p99_s=q[98],
        theory_s=math.ceil(reads / concurrency) * one_read,
        detail=(
            f"{ask / 2**20:g} MiB each, {FIRST_BYTE_S * 1000:g} ms first byte, {MIB_PER_S:g} MiB/s "
            f"per GET, GET concurrency {concurrency}: {gets} GETs (at most "
            f"{after['max_in_flight']} at once), "
            f"{fetched / (reads * ask):.2f} bytes fetched per byte asked; in {wall:.2f} s the "
            f"gateway used {gw_cpu:.2f} CPU-s, the stand-in {s3_cpu:.2f} CPU-s and ended a GET "
            f"at most {after['late_s'] * 1e3:.0f} ms after its plan (it waits for a slow reader). "
            f"The same reads on the filesystem store, no latency: p50 {floor[49] * 1e3:.0f} ms, "
            f"p99 {floor[98] * 1e3:.0f} ms"
        ),
        nginx_p99_s=None if nginx is None else statistics.quantiles(nginx, n=100)[98],
        direct_p99_s=statistics.quantiles(direct, n=100)[98],
        shed=len(shed),
    )
