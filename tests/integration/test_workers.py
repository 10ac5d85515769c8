"""``tiered-gateway serve --workers 2`` as a real process tree on the demo bucket: two worker
processes answer (``X-Served-By``), both with the right records, sharing the disk tiers; a
worker that dies is started again; SIGTERM stops every process."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.demo import DemoBucket
from tests.integration.serve import start_serve, stop, wait_ready, walk
from tests.integration.test_http_e2e import _as_json, _got
from tests.unit.service.test_service_demo import expected_records


def _children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(p) for p in path.read_text().split()}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _served_by(response: httpx.Response) -> int:
    """The pid of ``X-Served-By: worker I pid P``."""
    words = response.headers["x-served-by"].split()
    assert words[0] == "worker" and words[2] == "pid", words
    return int(words[3])


def _fresh_get(base: str, path: str) -> httpx.Response:
    """A request on a new connection (so any worker may accept it)."""
    with httpx.Client(base_url=base, timeout=30) as c:
        return c.get(path)


def _wait_for(predicate: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(
    demo: DemoBucket, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    work = tmp_path_factory.mktemp("workers")
    args = [
        *demo.serve_args,
        "--workers", "2",
        "--rescan-interval-s", "0",
        "--chunk-cache-dir", str(work / "chunks"),
        "--chunk-cache-disk-bytes", "256KiB",
        "--index-cache-dir", str(work / "indexes"),
        "--state-dir", str(work / "state"),
    ]  # fmt: skip
    proc, url = start_serve(args, work / "serve.log")
    try:
        wait_ready(url, proc, work / "serve.log")
        _wait_for(lambda: len(_children(proc.pid)) == 2, "two workers")
        yield proc, url, work
    finally:
        stop(proc)


def _pids_by_stopping(url: str, workers: set[int]) -> set[int]:
    """The pids that answer new connections: the first one, then (while it is stopped, so it
    cannot accept) another."""
    first = _served_by(_fresh_get(url, "/readyz"))
    os.kill(first, signal.SIGSTOP)
    try:
        second = _served_by(_fresh_get(url, "/readyz"))
    finally:
        os.kill(first, signal.SIGCONT)
    assert {first, second} <= workers
    return {first, second}


def test_two_workers_answer_with_the_right_records(
    server: tuple[subprocess.Popen[bytes], str, Path], demo: DemoBucket
) -> None:
    proc, url, work = server
    workers = _children(proc.pid)
    assert len(_pids_by_stopping(url, workers)) == 2
    expected = [_as_json(e) for e in expected_records(demo.root / "segments" / "orders-0")]
    seen: set[int] = set()
    for _ in range(3):  # new connections each walk: both workers read (and fill the disk tiers)
        with httpx.Client(base_url=url, timeout=30) as client:
            records, _ = walk(client, "orders", 0, 3000, "read_uncommitted")
            seen.add(_served_by(client.get("/healthz")))
        assert [_got(r) for r in records] == expected
    assert seen <= workers
    # the catalog: worker 0 in the state dir, worker 1 in its own SQLite file
    assert (work / "state" / "rlmm.sqlite").is_file()
    assert (work / "state" / "worker-1" / "rlmm.sqlite").is_file()
    chunks = [p for p in (work / "chunks").iterdir() if p.suffix == ".chunk"]
    assert chunks and sum(p.stat().st_size for p in chunks) <= 256 * 1024


def test_a_worker_that_dies_is_started_again(
    server: tuple[subprocess.Popen[bytes], str, Path],
) -> None:
    proc, url, _ = server
    before = _children(proc.pid)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    _wait_for(lambda: len(_children(proc.pid) - before) == 1, "a new worker")
    after = _children(proc.pid)
    assert victim not in after and len(after) == 2
    _wait_for(lambda: _fresh_get(url, "/readyz").status_code == 200, "ready again")
    assert len(_pids_by_stopping(url, after)) == 2  # the new one takes connections too
    log = (server[2] / "serve.log").read_text()
    assert f"(pid {victim}) died (signal 9): starting it again" in log


def test_sigterm_stops_every_process(demo: DemoBucket, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    proc, url = start_serve([*demo.serve_args, "--workers", "2"], log, log_level="info")
    try:
        wait_ready(url, proc, log)
        _wait_for(lambda: log.read_text().count(") serves") == 2, "two workers serving")
        workers = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    assert not [pid for pid in workers if _alive(pid)]
    text = log.read_text()
    assert text.count("Application shutdown complete") == 2, text  # each worker, gracefully
    assert "all 2 workers stopped" in text


def test_workers_stop_when_the_supervisor_is_killed(demo: DemoBucket, tmp_path: Path) -> None:
    """SIGKILL leaves the supervisor no time: its workers notice and stop, never serve alone."""
    log = tmp_path / "serve.log"
    proc, url = start_serve([*demo.serve_args, "--workers", "2"], log)
    try:
        wait_ready(url, proc, log)
        _wait_for(lambda: len(_children(proc.pid)) == 2, "two workers")
        workers = _children(proc.pid)
        proc.kill()
        proc.wait()
        _wait_for(lambda: not [pid for pid in workers if _alive(pid)], "the workers stopped")
    finally:
        stop(proc)
    assert log.read_text().count("is gone: stopping") == 2


COUNTER = re.compile(r"^tiered_gateway_(\w+_total) (\S+)$", re.MULTILINE)


def _counters(url: str) -> tuple[int, dict[str, float]]:
    """The pid that answered ``/metrics`` on a new connection, and its counters."""
    response = _fresh_get(url, "/metrics")
    return _served_by(response), {m[1]: float(m[2]) for m in COUNTER.finditer(response.text)}


def _pending(url: str) -> float:
    """The runs waiting to be published by the worker that answers (the only one running)."""
    found = re.search(
        r"^tiered_gateway_shared_runs_pending (\S+)$", _fresh_get(url, "/metrics").text, re.M
    )
    assert found is not None
    return float(found[1])


def test_a_worker_serves_the_runs_its_sibling_verified(demo: DemoBucket, tmp_path: Path) -> None:
    """Worker A reads a partition from the bucket (B stopped, so A takes the connection); then B
    (A stopped) reads it again: exactly the records, copied from the runs A published in the
    shared arena, none read from the bucket by B."""
    log = tmp_path / "serve.log"
    proc, url = start_serve([*demo.serve_args, "--workers", "2", "--rescan-interval-s", "0"], log)
    expected = [_as_json(e) for e in expected_records(demo.root / "segments" / "orders-0")]
    try:
        wait_ready(url, proc, log)
        _wait_for(lambda: len(_children(proc.pid)) == 2, "two workers")
        a, b = _pids_by_stopping(url, _children(proc.pid))
        got: dict[int, list[tuple[Any, ...]]] = {}
        counters: dict[int, tuple[dict[str, float], dict[str, float]]] = {}
        for reader, stopped in ((a, b), (b, a)):
            os.kill(stopped, signal.SIGSTOP)
            try:
                pid, before = _counters(url)
                with httpx.Client(base_url=url, timeout=30) as client:
                    records, _ = walk(client, "orders", 0, 3000, "read_uncommitted")
                    assert _served_by(client.get("/healthz")) == reader == pid
                # its runs are published in the background: all of them before it is stopped
                _wait_for(lambda: _pending(url) == 0, "the reader's runs published")
                counters[reader] = before, _counters(url)[1]
            finally:
                os.kill(stopped, signal.SIGCONT)
            got[reader] = [_got(r) for r in records]
    finally:
        stop(proc)
    assert got[a] == got[b] == expected
    b_before, b_after = counters[b]

    def grew(counts: tuple[dict[str, float], dict[str, float]], name: str) -> float:
        return counts[1][name] - counts[0][name]

    assert grew(counters[a], "chunk_cache_loads_total") > 0  # A read the bucket
    assert grew(counters[a], "shared_runs_published_total") > 0
    # every run B answered from was one A had published (B's only read of segment bytes is
    # its own check of the partition's tail, made once per process before it reports the end)
    assert grew(counters[b], "shared_runs_hits_total") == grew(
        counters[a], "shared_runs_published_total"
    )
    assert grew(counters[b], "shared_runs_misses_total") == 0, (b_before, b_after)
    assert grew(counters[b], "chunk_cache_misses_total") <= 1, (b_before, b_after)


def test_no_sibling_answers_before_worker_0_is_ready(demo: DemoBucket, tmp_path: Path) -> None:
    """Worker 0 takes connections while it loads (its ``/readyz`` says why not); a sibling that
    took them as soon as its own scan was done would answer ``/readyz`` 200 and send the next
    request to worker 0's 503 ``not_ready``. Worker 0 is stopped before its first scan: its
    sibling scans, and serves only after worker 0's scan (shown to fail without the gate: the
    sibling served while worker 0 was stopped, and the CI run of this change met the 503)."""
    log = tmp_path / "serve.log"
    proc, url = start_serve([*demo.serve_args, "--workers", "2"], log, log_level="info")
    try:
        found: list[int] = []

        def worker_0_started() -> bool:
            found[:] = map(int, re.findall(r"worker 0 starting \(pid (\d+)\)", log.read_text()))
            return bool(found)

        _wait_for(worker_0_started, "worker 0 forked")
        os.kill(found[0], signal.SIGSTOP)
        if "bucket scan:" in log.read_text():
            os.kill(found[0], signal.SIGCONT)
            pytest.skip("worker 0 scanned before it could be stopped: nothing to show")
        _wait_for(lambda: "bucket scan:" in log.read_text(), "worker 1's scan")
        with contextlib.suppress(AssertionError):  # the gate holds it: it never serves
            _wait_for(lambda: "worker 1 (pid" in log.read_text(), "worker 1 serving", 2)
        os.kill(found[0], signal.SIGCONT)
        wait_ready(url, proc, log)
        _wait_for(lambda: log.read_text().count(") serves") == 2, "two workers serving")
        answers = [_fresh_get(url, "/v1/topics").status_code for _ in range(20)]
    finally:
        if found:  # never left stopped, whatever failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(found[0], signal.SIGCONT)
        stop(proc)
    text = log.read_text()
    second_scan = text.index("bucket scan:", text.index("bucket scan:") + 1)
    assert text.index("worker 1 (pid") > second_scan, text
    assert answers == [200] * 20, answers
