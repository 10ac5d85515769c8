"""``tiered-gateway serve`` as a real process (uvicorn and the real service), and a walk of a
partition by ``next_offset`` over HTTP, for the HTTP tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.ports import LOCALHOST, listening_port


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
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_GATEWAY_")}
        env.setdefault("AWS_ACCESS_KEY_ID", "testing")
        env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    command = [sys.executable, "-m", "gateway.cli", "serve", *args, "--port", "0",
               "--log-level", log_level]  # fmt: skip
    return start_listening(command, log_path, "serve", env)


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
