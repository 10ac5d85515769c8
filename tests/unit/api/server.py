"""Run an ASGI app on a real uvicorn server in a thread, on a free port of 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from tests.fixtures.ports import LOCALHOST, bound_socket, port_of


@contextmanager
def running(app: FastAPI, timeout_s: float = 30.0) -> Iterator[str]:
    """Serve ``app`` (lifespan on) until the block ends; yield its base URL."""
    with bound_socket() as sock:  # uvicorn serves on it: the port is ours from the start
        config = uvicorn.Config(app, log_level="warning", lifespan="on", loop="asyncio")
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        try:
            yield f"http://{LOCALHOST}:{port_of(sock)}"
        finally:
            server.should_exit = True
            thread.join(timeout_s)
