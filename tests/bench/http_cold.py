"""The cold figure of the end-to-end HTTP benchmark: ``serve`` on the bench bucket behind a slow
S3 stand-in (:mod:`tests.bench.slow_s3`: 20 ms to the first byte, 100 MiB/s per GET), the
indexes loaded, then ``reads`` concurrent raw fetches of distinct 1 MiB ranges nothing has read;
``serve`` at its defaults (workers, budgets), as users run it.

Every figure is taken after one unmeasured pass of the same kind (issue 30): ``reads`` concurrent
cold reads of other ranges, far enough from the measured ones that no byte either fetches is
shared (:func:`_warm_slots`), first through the gateway and again for each peer. The bucket is
twice the warm figures' (:func:`cold_bucket`), so that both passes find distinct cold ranges.

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
from tests.bench.http_bucket import KEY_PREFIX, TOPIC, BenchBucket, bench_bucket
from tests.bench.http_load import RECORDS, Conn
from tests.bench.http_procs import nginx_binary, start_nginx, tree_cpu_s
from tests.bench.http_report import Cold
from tests.fixtures.ports import LOCALHOST, listening_port
from tests.integration.serve import start_serve, stop, wait_ready

FIRST_BYTE_S: Final = 0.020
MIB_PER_S: Final = 100.0  # one GET's body
BUCKET: Final = "bench-http"
PRIMED: Final = 16 * 2**20  # bytes read at each segment's start while loading the indexes
MEASURED_SEED: Final = 15
WARM_SEED: Final = 16
# What a read of a range may fetch beyond it: the offset-index floor before it, the window's
# slack after it, both rounded out to blocks (64 KiB): no two reads' ranges this close.
GUARD: Final = 256 * 2**10


def _concurrency() -> int:
    value = Settings.model_fields["max_concurrent_gets"].default
    assert isinstance(value, int)
    return value


def cold_bucket(cache: Path, records: int, segment_mib: int) -> BenchBucket:
    """The bucket of the cold figure: the warm figures' bucket of twice the records."""
    return bench_bucket(cache, 2 * records, segment_mib)


def _usable(bucket: BenchBucket, ask: int) -> list[int]:
    """The ``ask``-byte slots of the concatenated logs away from the primed start of each
    segment (its first 16 MiB, or half of a smaller one)."""
    primed, position = [], 0
    for log in bucket.logs:
        size = log.stat().st_size
        primed.append((position, position + min(PRIMED, size // 2)))
        position += size
    return [
        s
        for s in range(bucket.log_bytes // ask - 1)
        if not any(start - ask < s * ask < end for start, end in primed)
    ]


def _slots(bucket: BenchBucket, reads: int, ask: int) -> list[int]:
    """The measured reads: ``reads`` distinct usable slots, seeded."""
    return random.Random(MEASURED_SEED).sample(_usable(bucket, ask), reads)


def _warm_slots(bucket: BenchBucket, reads: int, ask: int) -> list[int]:
    """The unmeasured pass before the measured one: up to ``reads`` usable slots none of
    whose bytes, :data:`GUARD` around, a measured read's also touch (fewer on a bucket too small
    for that, as the tiny test's)."""
    near = math.ceil((ask + 2 * GUARD) / ask) - 1
    measured = set(_slots(bucket, reads, ask))
    free = [
        s
        for s in _usable(bucket, ask)
        if not any(s + d in measured for d in range(-near, near + 1))
    ]
    return random.Random(WARM_SEED).sample(free, min(reads, len(free)))


def _targets(bucket: BenchBucket, slots: list[int], ask: int) -> list[int]:
    """The offsets at the start of ``slots``: batches are of one size, so offsets are
    proportional to bytes."""
    return [bucket.records * s * ask // bucket.log_bytes for s in slots]


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


def _ranges(bucket: BenchBucket, slots: list[int], ask: int) -> list[tuple[str, int, int]]:
    """The cold reads' ``slots`` as (``.log`` path under the bucket root, first byte, size):
    the bytes the gateway's reads ask for, as ranges of the objects that hold them."""
    starts, position = [], 0
    for log in bucket.logs:
        starts.append(position)
        position += log.stat().st_size
    out = []
    for slot in slots:
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
        _read_ranges(nginx.url, "", _ranges(bucket, _warm_slots(bucket, reads, ask), ask))
        return _read_ranges(nginx.url, "", _ranges(bucket, _slots(bucket, reads, ask), ask))
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
        _read_all(url, _targets(bucket, _warm_slots(bucket, reads, ask), ask), ask, [])
        return _read_all(url, _targets(bucket, _slots(bucket, reads, ask), ask), ask)
    finally:
        stop(proc)


def run_cold(bucket: BenchBucket, work: Path, reads: int, ask: int) -> Cold:
    measured, warm = _slots(bucket, reads, ask), _warm_slots(bucket, reads, ask)
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
            warm_shed: list[int] = []  # unmeasured: a refusal here is not the figure's
            _read_all(url, _targets(bucket, warm, ask), ask, warm_shed)
            before = httpx.get(f"{endpoint}/_stats").json()
            cpu0, gw0, wall0 = tree_cpu_s(s3.pid), tree_cpu_s(proc.pid), time.perf_counter()
            shed: list[int] = []
            latencies = _read_all(url, _targets(bucket, measured, ask), ask, shed)
            wall = time.perf_counter() - wall0
            s3_cpu, gw_cpu = tree_cpu_s(s3.pid) - cpu0, tree_cpu_s(proc.pid) - gw0
            after = httpx.get(f"{endpoint}/_stats").json()
        finally:
            stop(proc)
        # The peer: the same client reading the same ranges straight from the same store.
        _read_ranges(endpoint, f"/{BUCKET}", _ranges(bucket, warm, ask))
        direct = _read_ranges(endpoint, f"/{BUCKET}", _ranges(bucket, measured, ask))
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
            f"after an unmeasured pass of {len(warm)} ({len(warm_shed)} shed), "
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
