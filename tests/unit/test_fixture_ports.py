"""The port helpers of tests/fixtures: a process's own port found from /proc, a taken port
retried."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.fixtures.ports import (
    LOCALHOST,
    PortTakenError,
    bound_socket,
    listening_port,
    port_of,
    start_on_free_port,
)

# Listens on two sockets: a free port of 127.0.0.1 (printed) and a UDP one (ignored).
_SERVER = """
import socket, sys
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", 0))
tcp = socket.socket(); tcp.bind(("127.0.0.1", 0)); tcp.listen()
print(tcp.getsockname()[1], flush=True)
sys.stdin.read()
"""


def test_listening_port_is_the_one_the_process_bound() -> None:
    with bound_socket() as stranger:  # another listener on 127.0.0.1 is not mistaken for it
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            told = int(proc.stdout.readline())
            assert listening_port(proc, timeout_s=30) == told != port_of(stranger)
            with socket.create_connection((LOCALHOST, told), timeout=5):
                pass
        finally:
            proc.kill()
            proc.wait()


def test_listening_port_of_a_process_that_exits_is_an_error() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="exited with 3"):
        listening_port(proc, timeout_s=30)


def test_a_taken_port_is_tried_again_on_another() -> None:
    tried: list[int] = []

    def start(port: int) -> int:
        tried.append(port)
        if len(tried) < 3:
            raise PortTakenError(f"{port} taken")
        return port

    assert start_on_free_port(start) == tried[-1]
    assert len(tried) == 3

    def always_taken(port: int) -> int:
        raise PortTakenError(f"{port} taken")

    with pytest.raises(PortTakenError):
        start_on_free_port(always_taken, attempts=2)
