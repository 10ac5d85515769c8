"""``serve --workers N``: the setting, the budgets divided among the workers, what a worker is
handed, its response header, the disk share; and a worker that cannot start stops the server."""

from __future__ import annotations

import argparse
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gateway.commands import worker_process
from gateway.commands.serve import add_parser, add_setting_flags, settings_from_args
from gateway.commands.worker_budgets import DIVIDED, arena_bytes, per_worker, worker_settings
from gateway.commands.worker_process import WorkerSpec, fork_worker, served_by
from gateway.commands.workers import WORKER_NOT_STARTED, Supervisor
from gateway.config import GiB, MiB, Settings, load_settings, usable_cpus
from gateway.errors import ConfigurationError
from indexcache.share import DiskShare, stale_tmp, tmp_name
from tests.integration.serve import run_serve


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--config", type=Path)
    add_setting_flags(p)
    return p.parse_args(argv)


def test_workers_default_to_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERED_GATEWAY_WORKERS", raising=False)
    assert load_settings({"store": "file:///x"}).workers == usable_cpus()
    assert usable_cpus() == len(os.sched_getaffinity(0))


def test_workers_by_flag_environment_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "g.toml"
    toml.write_text('store = "file:///x"\nworkers = 3\n', encoding="utf-8")
    assert settings_from_args(_args(["--config", str(toml)])).workers == 3
    monkeypatch.setenv("TIERED_GATEWAY_WORKERS", "5")
    assert settings_from_args(_args(["--config", str(toml)])).workers == 5
    assert settings_from_args(_args(["--config", str(toml), "--workers", "1"])).workers == 1
    with pytest.raises(ConfigurationError, match=r"'workers' \(--workers, TIERED_GATEWAY_WORKERS"):
        load_settings({"store": "file:///x", "workers": 0})


def test_help_says_the_budgets_are_the_servers_total() -> None:
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers(dest="command"))
    text = " ".join(p._subparsers._group_actions[0].choices["serve"].format_help().split())  # type: ignore[union-attr]
    assert "--workers WORKERS" in text
    assert "budgets are the server's total, divided among the workers" in text


def test_budgets_are_divided_among_the_workers() -> None:
    s = load_settings(
        {
            "store": "file:///x",
            "workers": 4,
            "chunk_cache_bytes": "256MiB",
            "index_cache_bytes": 0,
            "inflight_bytes": "100MiB",
            "max_concurrent_gets": 3,
            "get_rate_per_prefix": 5500,
            "chunk_cache_disk_bytes": "4GiB",
            "threads": 6,
        }
    )
    w = per_worker(s)
    assert w.chunk_cache_bytes == 64 * MiB
    assert w.index_cache_bytes == 0  # off stays off
    assert w.inflight_bytes == 25 * MiB
    assert w.max_concurrent_gets == 1  # at least one
    assert w.get_rate_per_prefix == 1375.0
    # per process, or divided by the disk tiers themselves: unchanged
    assert (w.chunk_cache_disk_bytes, w.threads, w.workers) == (4 * GiB, 6, 4)
    unchanged = set(Settings.model_fields) - set(DIVIDED)
    assert all(getattr(w, name) == getattr(s, name) for name in unchanged)
    one = load_settings({"store": "file:///x", "workers": 1})
    assert per_worker(one) is one


def test_each_worker_has_its_own_catalog_file(tmp_path: Path) -> None:
    s = load_settings({"store": "file:///x", "workers": 2, "state_dir": tmp_path})
    assert worker_settings(s, 0).state_dir == tmp_path
    assert worker_settings(s, 1).state_dir == tmp_path / "worker-1"
    no_state = load_settings({"store": "file:///x", "workers": 2})
    assert worker_settings(no_state, 1).state_dir is None


@pytest.mark.parametrize(("runs", "code"), [(lambda: 0, 0), (lambda: 3, 3), (lambda: 1 / 0, 1)])
def test_a_forked_worker_runs_its_spec_and_exits_with_its_status(
    monkeypatch: pytest.MonkeyPatch, runs: Callable[[], int], code: int
) -> None:
    """The worker is a fork of the supervisor: it runs the resolved settings it was given (no
    parse again) and exits with what the run returned (1 when it raised), never returning
    into the supervisor's code."""
    s = Settings(store="file:///x", workers=2, key_pairs=["k1=/keys/one.pem"])
    seen: list[Settings] = []

    def run(spec: WorkerSpec) -> int:
        seen.append(spec.settings)
        if spec.settings is not s:
            return 99
        return runs()

    monkeypatch.setattr(worker_process, "_run_worker", run)
    worker = fork_worker(WorkerSpec(s, DiskShare(1, 2, 123.0), 7, 8, os.getpid()))
    while worker.poll() is None:
        time.sleep(0.01)
    assert worker.returncode == code
    assert seen == []  # the run was the child's, not this process's


async def test_responses_name_the_worker() -> None:
    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"b")]})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]

    transport = httpx.ASGITransport(app=served_by(app, "worker 1 pid 42"))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.get("/")
    assert r.headers["x-served-by"] == "worker 1 pid 42" and r.headers["a"] == "b"


def test_disk_share() -> None:
    assert DiskShare().budget(10) == 10 and not DiskShare().shared
    share = DiskShare(1, 3, since=100.0)
    assert (share.budget(10), share.budget(2), share.budget(0)) == (3, 1, 0)
    names = [f"n{i}" for i in range(60)]
    owners = [[DiskShare(i, 3, 100.0).adopts(n, 50.0) for i in range(3)] for n in names]
    assert all(sum(o) == 1 for o in owners)  # an old file: exactly one worker counts it
    assert all(DiskShare(i, 3, 100.0).adopts("n0", 100.0) for i in range(3))  # a recent one: all
    for bad in ((2, 2), (0, 0), (-1, 2)):
        with pytest.raises(ValueError, match="not a valid share"):
            DiskShare(*bad)


def test_stale_temporary_files() -> None:
    mine = tmp_name("a.chunk")
    assert mine.startswith(f"a.chunk.{os.getpid()}-") and mine.endswith(".tmp")
    parent = f"a.chunk.{os.getppid()}-abc.tmp"
    assert not stale_tmp(parent, 1000.0, 1000.0)  # a live writer
    assert stale_tmp(parent, 1000.0, 1000.0 + 3601)  # but an hour old
    assert stale_tmp(mine, 1000.0, 1000.0)  # this process writes nothing before it opens
    assert stale_tmp("a.chunk.abcdef.tmp", 1000.0, 1000.0)  # an older version's name


def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    """The catalog's folder is a file: the workers' services cannot open; the server exits
    with 3 and leaves no worker behind."""
    (tmp_path / "state").write_text("not a folder", encoding="utf-8")
    done = run_serve(
        ["--store", tmp_path.as_uri(), "--port", "0", "--workers", "2",
         "--state-dir", str(tmp_path / "state")],
        timeout_s=120,
    )  # fmt: skip
    stderr = done.stderr.decode()
    assert done.returncode == 3, stderr
    assert "before it served: stopping the server" in stderr
    assert "error: the gateway did not start" in stderr
    pids = [int(pid) for pid in re.findall(r"worker \d starting \(pid (\d+)\)", stderr)]
    assert len(pids) == 2 and not [pid for pid in pids if Path(f"/proc/{pid}").exists()]


class _Exited:
    pid = 4242

    def poll(self) -> int:
        return 3


def test_a_replacement_that_fails_is_retried_with_backoff_not_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a worker index that never served stops the server; a replacement that fails (the
    store unreachable while it scans) is started again, each time after a longer wait."""
    sock = socket.socket()
    sup = Supervisor(Settings(store="file:///nowhere", workers=2), sock)
    sock.close()  # never used: _start is replaced
    starts: list[int] = []

    def start(index: int) -> None:
        starts.append(index)
        sup._procs[index] = _Exited()  # type: ignore[assignment]
        sup._started_at[index] = -1e9  # long ago: due for a restart at once

    monkeypatch.setattr(sup, "_start", start)
    monkeypatch.setattr(sup, "_has_started", lambda index: False)
    sup._procs[0] = _Exited()  # type: ignore[assignment]
    sup._started_at[0] = -1e9
    assert sup._reap() == WORKER_NOT_STARTED  # index 0 never served: the server stops
    sup._served.add(0)  # it had served before it died
    for want in (2.0, 4.0, 8.0):
        assert sup._reap() == 0  # started again, not fatal
        assert sup._backoff[0] == want
    assert starts == [0, 0, 0]
    sup._backoff[0] = 1e12  # a long backoff: not again yet
    sup._started_at[0] = time.monotonic()
    assert sup._reap() == 0 and starts == [0, 0, 0]


def test_the_chunk_budget_is_mostly_the_shared_run_arena() -> None:
    """With workers, 3/4 of the chunk cache's budget is the one arena they share; the rest is
    divided between them (their units and read-ahead); one worker keeps it all."""
    s = load_settings({"store": "file:///x", "workers": 2, "chunk_cache_bytes": "256MiB"})
    assert arena_bytes(s) == 192 * MiB
    assert worker_settings(s, 0).chunk_cache_bytes == worker_settings(s, 1).chunk_cache_bytes
    assert worker_settings(s, 1).chunk_cache_bytes == 32 * MiB
    one = load_settings({"store": "file:///x", "workers": 1, "chunk_cache_bytes": "256MiB"})
    assert arena_bytes(one) == 0
    assert worker_settings(one, 0).chunk_cache_bytes == 256 * MiB
    off = load_settings({"store": "file:///x", "workers": 2, "chunk_cache_bytes": 0})
    assert arena_bytes(off) == 0
    assert worker_settings(off, 1).chunk_cache_bytes == 0
    two = {"store": "file:///x", "workers": 2, "chunk_cache_bytes": "256MiB"}
    unshared = load_settings({**two, "shared_runs_share": 0})
    assert arena_bytes(unshared) == 0
    assert worker_settings(unshared, 1).chunk_cache_bytes == 128 * MiB
    half = load_settings({**two, "shared_runs_share": 0.5})
    assert (arena_bytes(half), worker_settings(half, 0).chunk_cache_bytes) == (
        128 * MiB,
        64 * MiB,
    )
