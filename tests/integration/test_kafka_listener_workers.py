"""``serve --workers 2 --kafka-listener 127.0.0.1:0``: one Kafka listening socket, bound by the
supervisor, served by both worker processes.

A real process tree on the bucket of independent encoders
(:mod:`tests.integration.independent_bucket`). Several confluent-kafka (librdkafka) consumers
at once ``assign()`` every partition at its beginning and read it to the remote end: the
records must equal what was written. Each worker alone (the other stopped with SIGSTOP, so it
cannot accept) answers a consumer's whole read, advertises the port the supervisor bound in its
Metadata answers and counts those connections and Fetch requests in its own ``/metrics``: with
only one worker serving the listener, the read while that one is stopped would never be
answered. With TLS, every worker's listener speaks TLS only; SIGTERM with Kafka connections
open in both workers stops every process, exit code 0, each listener closed. A worker started
again after it died serves the same socket; the supervisor binds every address of the host on
one port, and a Kafka port already taken stops ``serve`` (exit code 3) before any worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from kafka.protocol.metadata.metadata import MetadataResponse
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import settings_for
from gateway.listener.startup import bind_listener
from gateway.storage.filesystem import FilesystemStore
from tests.fixtures.ports import bound_socket, port_of
from tests.fixtures.tls import Pki
from tests.integration.independent_bucket import (
    TOPICS,
    IndependentBucket,
    upload_all,
    write_independent_bucket,
)
from tests.integration.serve import run_serve, spawn_serve, stop
from tests.integration.test_kafka_listener import (
    ISOLATION,
    RD_SIZES,
    _confluent_read,
    _expected,
    _read_frame,
)
from tests.integration.test_workers import _alive, _children, _served_by, _wait_for

pytest.importorskip("confluent_kafka")

START_LIMIT_S: Final = 60.0
_HTTP: Final = re.compile(rb"listening on 127\.0\.0\.1:(\d+) with 2 workers")
_KAFKA: Final = re.compile(rb"Kafka listener on 127\.0\.0\.1:(\d+) for 2 workers")
_WORKER_KAFKA: Final = re.compile(
    rb"Kafka listener on 127\.0\.0\.1:(\d+) \(pid (\d+), on sockets shared by the workers\)"
)
_METADATA_V1: Final = struct.pack(">hhih", 3, 1, 7, 4) + b"test" + struct.pack(">i", -1)


@dataclass(frozen=True)
class Server:
    proc: subprocess.Popen[bytes]
    http: int  # the HTTP API's port
    port: int  # the Kafka listener's, as the supervisor logged it
    workers: frozenset[int]  # the pids of the worker processes
    log: Path
    tls: ssl.SSLContext | None = None  # a client context trusting the server's CA


def _bucket(root: Path, topics: Any = TOPICS) -> IndependentBucket:
    written = write_independent_bucket(root, topics=topics)
    (root / "bucket").mkdir()
    asyncio.run(upload_all(FilesystemStore(root / "bucket"), written))
    return written


def _start(
    bucket: IndependentBucket, log: Path, *extra: str, tls: ssl.SSLContext | None = None
) -> Server:
    """``serve --workers 2`` with the Kafka listener on port 0, once both workers' listeners
    serve every topic (each asked alone)."""
    args = bucket.serve_args((bucket.root / "bucket").as_uri())
    proc = spawn_serve(
        [*args, "--workers", "2", "--port", "0", "--kafka-listener", "127.0.0.1:0",
         "--rescan-interval-s", "0", "--log-level", "info", *extra],
        log,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while len(workers := dict(_worker_listeners(log))) < 2:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the workers' Kafka listeners did not start:\n{log.read_text()}"
                )
            time.sleep(0.05)
        text = log.read_bytes()
        http, kafka = _HTTP.search(text), _KAFKA.search(text)
        assert http and kafka, text
        server = Server(proc, int(http.group(1)), int(kafka.group(1)), frozenset(workers), log, tls)
        assert set(workers.values()) == {server.port}  # the socket the supervisor bound
        assert server.workers == _children(proc.pid)
        topics = {t for t, _ in bucket.partitions}
        for pid in server.workers:  # each loaded (worker 0 may start its listener before)
            with _only(server, pid):
                _wait_for(lambda: set(_metadata(server)[1]) == topics, f"pid {pid}'s topics")
        return server
    except BaseException:
        stop(proc)
        raise


def _worker_listeners(log: Path) -> Iterator[tuple[int, int]]:
    """(pid, port) of each worker that logged its Kafka listener."""
    for found in _WORKER_KAFKA.finditer(log.read_bytes()):
        yield int(found.group(2)), int(found.group(1))


@contextlib.contextmanager
def _only(server: Server, pid: int) -> Iterator[None]:
    """The other workers stopped (SIGSTOP): only ``pid`` can accept a connection."""
    others = [w for w in server.workers if w != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


def _connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    if server.tls is None:
        return sock
    return server.tls.wrap_socket(sock, server_hostname="127.0.0.1")


def _metadata(server: Server) -> tuple[list[tuple[int, str, int]], list[str]]:
    """A Metadata v1 answer (all topics) on a new connection: the brokers (node id, host, port)
    and the topics with no error."""
    with _connect(server) as sock:
        sock.sendall(struct.pack(">i", len(_METADATA_V1)) + _METADATA_V1)
        reply = _read_frame(sock)
    response = MetadataResponse[1].decode(reply[4:], version=1)
    brokers = [(b.node_id, b.host, b.port) for b in response.brokers]
    return brokers, [t.name for t in response.topics if t.error_code == 0]


def _kafka_metrics(server: Server, pid: int) -> dict[str, float]:
    """Worker ``pid``'s listener counters from its own ``/metrics`` (the other workers
    stopped meanwhile, so it answers): connections accepted, Fetch requests."""
    scheme = "http" if server.tls is None else "https"
    verify: ssl.SSLContext | bool = server.tls if server.tls is not None else True
    with _only(server, pid), httpx.Client(verify=verify, timeout=30) as client:
        response = client.get(f"{scheme}://127.0.0.1:{server.http}/metrics")
    assert response.status_code == 200, response.text
    assert _served_by(response) == pid
    counts = {"accepted": 0.0, "fetches": 0.0}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "tiered_gateway_kafka_connections_accepted_total":
                counts["accepted"] += sample.value
            elif sample.name == "tiered_gateway_kafka_requests_total":
                counts["fetches"] += sample.value if sample.labels["api"] == "Fetch" else 0
    return counts


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> IndependentBucket:
    return _bucket(tmp_path_factory.mktemp("kafka-listener-workers"))


@pytest.fixture(scope="module")
def server(bucket: IndependentBucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = _start(bucket, tmp_path_factory.mktemp("kafka-listener-workers-log") / "serve.log")
    try:
        yield started
    finally:
        stop(started.proc)


def test_several_consumers_at_once_read_every_partition_as_written(
    server: Server, bucket: IndependentBucket
) -> None:
    reads = [(w, isolation) for w in bucket.partitions.values() for isolation in ISOLATION]
    with ThreadPoolExecutor(max_workers=4) as pool:  # four consumers at a time, each its own
        futures = [
            (w, isolation, pool.submit(_confluent_read, server.port, w, isolation, RD_SIZES[1]))
            for w, isolation in reads
        ]
        for w, isolation, future in futures:
            assert future.result() == _expected(w, isolation), (w.topic, w.partition, isolation)


def test_each_worker_alone_serves_a_consumer_and_advertises_the_bound_port(
    server: Server, bucket: IndependentBucket
) -> None:
    written = bucket.partitions[(TOPICS[1].name, 0)]
    for pid in sorted(server.workers):
        before = _kafka_metrics(server, pid)
        with _only(server, pid):
            assert _metadata(server)[0] == [(0, "127.0.0.1", server.port)]
            got = _confluent_read(server.port, written, "read_committed", RD_SIZES[0])
        after = _kafka_metrics(server, pid)
        assert got == _expected(written, "read_committed"), pid
        # its own counters: the Metadata connection and the consumer's, and the Fetches
        assert after["accepted"] >= before["accepted"] + 2, (pid, before, after)
        assert after["fetches"] > before["fetches"], (pid, before, after)


def test_tls_in_every_worker_and_sigterm_stops_them_all(tmp_path: Path) -> None:
    bucket = _bucket(tmp_path / "root", topics=TOPICS[:1])
    pki = Pki(tmp_path / "pki")
    cert = pki.server()
    tls = ssl.create_default_context(cafile=str(pki.ca))
    log = tmp_path / "serve.log"
    server = _start(bucket, log, "--tls-certfile", str(cert.cert), "--tls-keyfile", str(cert.key),
                    tls=tls)  # fmt: skip
    plain = Server(server.proc, server.http, server.port, server.workers, log)
    held: list[socket.socket] = []
    try:
        for pid in sorted(server.workers):
            with _only(server, pid):
                assert _metadata(server)[0] == [(0, "127.0.0.1", server.port)]
                with pytest.raises(ConnectionError):
                    _metadata(plain)  # a plain Kafka request to a TLS listener: no answer
                held.append(_connect(server))  # open in this worker when SIGTERM comes
                held[-1].sendall(struct.pack(">i", len(_METADATA_V1)) + _METADATA_V1)
                _read_frame(held[-1])
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0
        for sock in held:  # closed by the worker that held it
            assert sock.recv(1) == b""
    finally:
        for sock in held:
            sock.close()
        stop(server.proc)
    assert not [pid for pid in server.workers if _alive(pid)]
    text = log.read_text()
    assert text.count("Kafka listener closed") == 2, text
    assert text.count("Application shutdown complete") == 2, text
    assert "all 2 workers stopped" in text


def test_the_supervisor_binds_every_address_of_the_host_on_one_port() -> None:
    settings = settings_for(store="file:///", workers=2, kafka_listener="localhost:0")
    infos = socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets = bind_listener(settings, 16)
    try:
        assert sorted(s.getsockname()[0] for s in sockets) == sorted({i[4][0] for i in infos})
        assert len({s.getsockname()[1] for s in sockets}) == 1  # one port, taken by the first
        assert sockets[0].getsockname()[1] != 0
        assert all(s.get_inheritable() for s in sockets)  # for the workers
    finally:
        for s in sockets:
            s.close()


def test_serve_stops_when_the_kafka_port_is_taken(bucket: IndependentBucket) -> None:
    with bound_socket() as taken:
        listener = f"127.0.0.1:{port_of(taken)}"
        done = run_serve(
            [*bucket.serve_args((bucket.root / "bucket").as_uri()), "--workers", "2",
             "--port", "0", "--kafka-listener", listener]
        )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert f"cannot listen for Kafka on {listener}".encode() in done.stderr
    assert b"worker 0 starting" not in done.stderr  # no worker was started


def test_a_worker_started_again_serves_the_inherited_listener(tmp_path: Path) -> None:
    bucket = _bucket(tmp_path / "root", topics=TOPICS[:1])
    log = tmp_path / "serve.log"
    server = _start(bucket, log)
    try:
        victim = min(server.workers)
        os.kill(victim, signal.SIGKILL)
        _wait_for(lambda: len(dict(_worker_listeners(log))) == 3, "the new worker's listener")
        (new,) = set(dict(_worker_listeners(log))) - server.workers
        assert dict(_worker_listeners(log))[new] == server.port  # the same socket
        again = Server(
            server.proc, server.http, server.port, frozenset(_children(server.proc.pid)), log
        )
        assert again.workers == server.workers - {victim} | {new}
        with _only(again, new):  # it listens once loaded: the topics at once
            assert _metadata(again) == ([(0, "127.0.0.1", server.port)], [TOPICS[0].name])
    finally:
        stop(server.proc)
