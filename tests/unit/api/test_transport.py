"""The connection guard (issue 16) on a real uvicorn server: slow heads are closed, oversized
heads get 431, a Host not on the list gets 400 invalid_host; others keep being served."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.api import create_app
from gateway.api.hosts import HostAllowList, allowed_hosts, host_name
from gateway.api.transport import guarded_protocol
from gateway.config import Settings
from gateway.errors import ConfigurationError
from tests.fakes.service import FakeService
from tests.unit.api.server import running

WAIT_S = 30.0  # how long a test waits for the server to close a socket: never a verdict


def _connect(base: str) -> socket.socket:
    parts = urlsplit(base)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=WAIT_S)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (a test failure if it has not after WAIT_S)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_half_sent_heads_are_closed_and_others_are_served(
    settings: Settings, fake: FakeService
) -> None:
    protocol = guarded_protocol(header_timeout_s=0.2, max_header_bytes=16 * 1024)
    with running(create_app(settings, fake.factory()), http=protocol) as base:
        idle = [_connect(base) for _ in range(20)]  # connect and say nothing
        half = [_connect(base) for _ in range(20)]
        for s in half:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        with httpx.Client(base_url=base) as client:  # served while they hang
            for _ in range(5):
                assert client.get("/healthz").status_code == 200
        for s in idle + half:
            assert _read_all(s) == b""  # closed by the server, nothing answered
            s.close()
        with httpx.Client(base_url=base) as client:
            assert client.get("/healthz").status_code == 200


def test_a_keep_alive_connection_is_not_cut_by_the_head_timer(
    settings: Settings, fake: FakeService
) -> None:
    protocol = guarded_protocol(header_timeout_s=0.2, max_header_bytes=16 * 1024)
    with running(create_app(settings, fake.factory()), http=protocol) as base:
        sock = _connect(base)
        for _ in range(3):  # whole heads on one connection: each answered
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = b""
            while b'"ok"' not in data:
                chunk = sock.recv(65536)
                assert chunk, "closed while requests were whole"
                data += chunk
            assert data.startswith(b"HTTP/1.1 200")
        sock.close()


def test_an_oversized_head_gets_431(settings: Settings, fake: FakeService) -> None:
    protocol = guarded_protocol(header_timeout_s=10.0, max_header_bytes=4096)
    with running(create_app(settings, fake.factory()), http=protocol) as base:
        sock = _connect(base)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 8192)
        answer = _read_all(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert b'"error_code":"header_too_large"' in answer
        with httpx.Client(base_url=base) as client:
            big = client.get("/healthz", headers={"X-Fine": "a" * 3000})
            assert big.status_code == 200


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1", True),
        ("127.0.0.1:8080", True),
        ("localhost:1", True),
        ("[::1]:8080", True),
        ("LOCALHOST.", True),
        ("evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("10.1.2.3:8080", True),  # an address, never a rebinding name: probes, scrapes
        ("[2001:db8::7]:8080", True),
        ("0x7f.1", False),
        ("", False),
    ],
)
def test_the_loopback_allow_list(host: str, ok: bool) -> None:
    allowed = HostAllowList(allowed_hosts(Settings(store="file:///x")))
    assert allowed.allows(host) is ok


def test_configured_names_and_wildcards() -> None:
    allowed = HostAllowList(["gw.example.com", "*.internal.example"])
    assert allowed.allows("gw.example.com:443")
    assert allowed.allows("a.internal.example")
    assert not allowed.allows("internal.example")
    assert not allowed.allows("localhost")
    assert allowed.allows("10.244.1.7:8080")  # a pod address
    assert HostAllowList(["*"]).allows("anything")
    assert host_name("[2001:db8::1]:80") == "2001:db8::1"


def test_a_non_loopback_bind_needs_names() -> None:
    with pytest.raises(ConfigurationError, match="--allowed-host"):
        allowed_hosts(Settings(store="file:///x", host="0.0.0.0"))
    names = allowed_hosts(Settings(store="file:///x", host="0.0.0.0", allowed_hosts=["gw"]))
    assert names == ["gw"]


def test_a_rebinding_host_is_refused_before_anything_runs(
    settings: Settings, fake: FakeService
) -> None:
    with running(create_app(settings, fake.factory())) as base, httpx.Client() as client:
        url = f"{base}/v1/topics"
        refused = client.get(url, headers={"Host": "evil.example"})
        assert refused.status_code == 400
        assert refused.json()["error_code"] == "invalid_host"
        assert client.get(url).status_code == 200


def test_a_second_head_on_keep_alive_has_the_timeout_too(
    settings: Settings, fake: FakeService
) -> None:
    protocol = guarded_protocol(header_timeout_s=0.2, max_header_bytes=16 * 1024)
    with running(create_app(settings, fake.factory()), http=protocol) as base:
        sock = _connect(base)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while b'"ok"' not in first:
            chunk = sock.recv(65536)
            assert chunk
            first += chunk
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # then nothing
        assert _read_all(sock) == b""  # closed by the server (a hang fails after WAIT_S)
        sock.close()


def test_pipelined_small_requests_are_not_one_big_head(
    settings: Settings, fake: FakeService
) -> None:
    protocol = guarded_protocol(header_timeout_s=10.0, max_header_bytes=1024)
    one = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    n = 40  # 40 x 41 bytes in one send: more than max_header_bytes together
    with running(create_app(settings, fake.factory()), http=protocol) as base:
        sock = _connect(base)
        sock.sendall(
            one * (n - 1) + b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        answer = _read_all(sock)
        sock.close()
    assert answer.count(b"HTTP/1.1 200 ") == n
    assert b"HTTP/1.1 431" not in answer


def test_a_head_that_straddles_reads_is_measured_whole(
    settings: Settings, fake: FakeService
) -> None:
    protocol = guarded_protocol(header_timeout_s=10.0, max_header_bytes=2048)
    with running(create_app(settings, fake.factory()), http=protocol) as base:
        sock = _connect(base)
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-A: " + b"a" * 1500 + b"\r"
        sock.sendall(head)
        sock.sendall(b"\n" + b"X-B: " + b"b" * 1500 + b"\r\n\r\n")  # one head, 3 KiB
        answer = _read_all(sock)
        sock.close()
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_two_host_headers_are_refused(settings: Settings, fake: FakeService) -> None:
    with running(create_app(settings, fake.factory())) as base:
        sock = _connect(base)
        sock.sendall(
            b"GET /v1/topics HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"
            b"Connection: close\r\n\r\n"
        )
        answer = _read_all(sock)
        sock.close()
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"invalid_host" in answer


def test_a_loopback_bind_answers_its_own_address() -> None:
    allowed = HostAllowList(allowed_hosts(Settings(store="file:///x", host="127.0.0.2")))
    assert allowed.allows("127.0.0.2:8080")
    assert allowed.allows("localhost")
