"""The floor of the raw figure: a bare ASGI app on the same server stack as ``serve`` (uvicorn,
httptools, uvloop) answering every GET with a fixed body from memory, no framework and no
work. What it reaches per server CPU-second is the most any app on this stack can, so the
raw figure's ratio to nginx is read against this one's.

    python -m tests.bench.http_floor --bytes N   # serves on a free port (--port 0)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench.http_load import Conn, Step
from tests.fixtures.ports import LOCALHOST
from tests.integration.serve import start_listening


def start_floor(body_bytes: int, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The floor server as its own process, and its URL once it listens."""
    command = [sys.executable, "-m", "tests.bench.http_floor", "--bytes", str(body_bytes)]
    return start_listening(command, log_path, "the floor server")


def floor_walker(url: str, body_bytes: int) -> Callable[[int, int], tuple[Step, Conn]]:
    """GETs of the fixed body, its length checked."""

    def make(client: int, clients: int) -> tuple[Step, Conn]:
        conn = Conn(url)

        def step() -> int:
            status, _, body = conn.get("/", {})
            if status != 200 or len(body) != body_bytes:
                raise RuntimeError(f"floor: HTTP {status}, {len(body)} bytes")
            return len(body)

        return step, conn

    return make


def main() -> None:
    import uvicorn  # noqa: PLC0415 - only the server process needs it

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, required=True)
    args = ap.parse_args()
    body = bytes(args.bytes)
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-length", b"%d" % len(body))],
    }

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send(start)
            await send({"type": "http.response.body", "body": body})

    uvicorn.run(
        app, host=LOCALHOST, port=0, loop="uvloop", http="httptools", log_level="warning",
        access_log=False, lifespan="off",
    )  # fmt: skip


if __name__ == "__main__":
    main()
