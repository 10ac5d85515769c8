"""SIGTERM while an NDJSON stream is being read (issue 17): the stream ends cleanly, with its
closing line saying where to go on, and the process exits within its grace period."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.bench.http_bucket import KEY_PREFIX, TOPIC, bench_bucket
from tests.integration.serve import start_serve, stop, wait_ready

GRACE_S = 20
RECORDS = 60_000  # ~13 MiB of log: a stream of many pages


@pytest.fixture(scope="module")
def bucket_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return bench_bucket(tmp_path_factory.mktemp("graceful"), RECORDS, 8).store_url


def _slow_stream(host: str, port: int) -> socket.socket:
    """An NDJSON request on a socket with a small receive window: the server can only run a
    little ahead of a reader this slow."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect((host, port))
    sock.sendall(
        f"GET /v1/topics/{TOPIC}/partitions/0/records?offset=0 HTTP/1.1\r\n"
        f"Host: {host}\r\nAccept: application/x-ndjson\r\n\r\n".encode()
    )
    return sock


def _body(raw: bytes) -> bytes:
    """The de-chunked body of a chunked HTTP/1.1 response."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    out = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        rest = rest[size + 2 :]


def test_sigterm_ends_a_stream_cleanly_and_exits_within_the_grace(
    bucket_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    args = ["--store", bucket_url, "--key-prefix", KEY_PREFIX, "--stream-page-bytes", "262144",
            "--shutdown-grace-s", str(GRACE_S)]  # fmt: skip
    proc, url = start_serve(args, log)
    try:
        wait_ready(url, proc, log)
        host, port = url.removeprefix("http://").split(":")
        sock = _slow_stream(host, int(port))
        raw = bytearray(sock.recv(2048))  # the stream has begun
        proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        while chunk := sock.recv(65536):  # now read on at full speed
            raw += chunk
        sock.close()
        code = proc.wait(timeout=GRACE_S + 10)
        took = time.monotonic() - stopped_at
    except BaseException:
        stop(proc)
        raise
    assert code in (0, -signal.SIGTERM), (
        log.read_text()
    )  # uvicorn re-raises the signal it drained on
    assert took < GRACE_S, log.read_text()
    lines = [json.loads(line) for line in _body(bytes(raw)).splitlines()]
    *records, closing = lines
    assert records, "some records before the end"
    assert [r["offset"] for r in records] == list(range(len(records)))
    assert "error_code" not in closing
    assert closing["next_offset"] == len(records)  # where a client goes on
    assert closing["next_offset"] < RECORDS  # it ended early: the server was stopping


def test_a_stopping_server_is_gone_and_does_not_hang(bucket_url: str, tmp_path: Path) -> None:
    """Nothing in flight: SIGTERM ends the process at once (well within the grace)."""
    log = tmp_path / "serve.log"
    proc, url = start_serve(["--store", bucket_url, "--key-prefix", KEY_PREFIX], log)
    wait_ready(url, proc, log)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=GRACE_S) in (0, -signal.SIGTERM)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise
