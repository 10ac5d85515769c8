"""``tiered-gateway serve`` as a real process (uvicorn and the real service): the one launcher
every test that starts ``serve`` goes through (:func:`serve_command`, :func:`serve_env`,
:func:`spawn_serve`, :func:`run_serve`, :func:`start_serve`, :func:`wait_for_log`), and a walk of
a partition by ``next_offset`` over HTTP, for the HTTP tests. ``tests/load/run.py`` starts its
own: locust's process must not import httpx."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.ports import LOCALHOST, listening_port


def serve_command(*args: str) -> list[str]:
    """The ``serve`` command line every test starts (this interpreter, the repository's code)."""
    return [sys.executable, "-m", "gateway.cli", "serve", *args]


def serve_env(**extra: str) -> dict[str, str]:
    """The environment of every test's ``serve``: this one without its ``TIERED_GATEWAY_``
    settings (the flags say everything), S3 test credentials, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_GATEWAY_")}
    env.setdefault("AWS_ACCESS_KEY_ID", "testing")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    env.update(extra)
    return env


def spawn_serve(
    args: Sequence[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``serve`` with ``args``, its output to ``log_path``; not waited for (see
    :func:`wait_for_log`, :func:`start_serve`)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            serve_command(*args), stdout=log, stderr=subprocess.STDOUT, env=env or serve_env()
        )


def run_serve(args: Sequence[str], timeout_s: float = 60) -> subprocess.CompletedProcess[bytes]:
    """``serve`` run to its end (a start that must be refused), its output captured."""
    return subprocess.run(
        serve_command(*args), capture_output=True, env=serve_env(), timeout=timeout_s, check=False
    )


def wait_for_log(
    proc: subprocess.Popen[bytes],
    log_path: Path,
    pattern: re.Pattern[bytes],
    *,
    until: Callable[[re.Match[bytes]], bool] = lambda _: True,
    timeout_s: float = 60,
) -> re.Match[bytes]:
    """The first match of ``pattern`` in the process's log for which ``until`` holds. If the
    process exits or ``timeout_s`` passes first: stopped, and RuntimeError with its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode}:\n{log_path.read_text()}")
        found = pattern.search(log_path.read_bytes())
        if found and until(found):
            return found
        time.sleep(0.05)
    stop(proc)
    raise RuntimeError(f"serve did not log {pattern.pattern!r}:\n{log_path.read_text()}")


def start_serve(
    args: Sequence[str],
    log_path: Path,
    *,
    defaults: bool = False,
    log_level: str = "warning",
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``serve`` with ``args`` on a port it picks (``--port 0``), logging at
    ``log_level``, its output to ``log_path``; the process and its base URL once it listens (not
    yet ready). One worker process unless ``args`` say otherwise (or ``SERVE_WORKERS``), or,
    with ``defaults`` (the benchmarks), serve's own default. Its environment: ``env``, or this
    one without ``TIERED_GATEWAY_*`` variables, with test S3 credentials."""
    if not defaults:
        args = ["--workers", os.environ.get("SERVE_WORKERS", "1"), *args]
    command = serve_command(*args, "--port", "0", "--log-level", log_level)
    return start_listening(command, log_path, "serve", env or serve_env())


def start_listening(
    command: Sequence[str], log_path: Path, what: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``command`` (a server told to bind port 0 of 127.0.0.1), its output to
    ``log_path``; the process and its base URL once it listens."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        port = listening_port(proc, timeout_s=60)
    except RuntimeError as e:
        stop(proc)
        raise RuntimeError(f"{what} did not listen ({e}):\n{log_path.read_text()}") from None
    return proc, f"http://{LOCALHOST}:{port}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def serve_process(args: Sequence[str], log_path: Path) -> Iterator[str]:
    """Start ``serve`` with ``args`` on a free port; yield its base URL once ready."""
    proc, url = start_serve(args, log_path)
    try:
        wait_ready(url, proc, log_path)
        yield url
    finally:
        stop(proc)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"serve did not become ready:\n{log_path.read_text()}")


RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"


def walk(
    client: httpx.Client, topic: str, partition: int, max_bytes: int, isolation: str
) -> tuple[list[dict[str, Any]], int]:
    info = client.get(f"/v1/topics/{topic}/partitions/{partition}").json()
    offset, end = info["remote_log_start_offset"], info["remote_log_end_offset"]
    records: list[dict[str, Any]] = []
    pages = 0
    while offset < end:
        r = client.get(
            RECORDS.format(topic=topic, partition=partition),
            params={"offset": offset, "max_bytes": max_bytes, "isolation_level": isolation},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["next_offset"] > offset, "a walk must always move forward"
        assert body["log_end_offset"] == end
        records += body["records"]
        offset = body["next_offset"]
        pages += 1
    return records, pages
