"""Run an ASGI app on a real uvicorn server in a thread, on a free port of 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI

from tests.fixtures.ports import LOCALHOST, bound_socket, port_of


@contextmanager
def running(app: FastAPI, timeout_s: float = 30.0, **config_args: Any) -> Iterator[str]:
    """Serve ``app`` (lifespan on) until the block ends; yield its base URL (https when
    ``config_args`` has a certificate). ``config_args``: more of ``uvicorn.Config``."""
    with bound_socket() as sock:  # uvicorn serves on it: the port is ours from the start
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", **({"loop": "asyncio"} | config_args)
        )
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
            scheme = "https" if "ssl_certfile" in config_args else "http"
            yield f"{scheme}://{LOCALHOST}:{port_of(sock)}"
        finally:
            server.should_exit = True
            thread.join(timeout_s)
