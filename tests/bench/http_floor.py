"""The floor of the raw figure: a bare ASGI app on the same server stack as ``serve`` (uvicorn,
httptools, uvloop) answering every GET with a fixed body from memory, no framework and no
work. What it reaches per server CPU-second is the most any app on this stack can, so the
raw figure's ratio to nginx is read against this one's.

With ``--log PATH`` the body is the whole record batches at the start of that segment file,
and every answer first does the least a gateway that never serves unchecked bytes must do:
walk the batches (one length read each) and check each one's CRC-32C, one call per batch.
No framework, no lookup, no copy: the ceiling of a checked raw answer on this stack.

With ``--fastapi`` as well, the same checked answer comes from a FastAPI route shaped like
the records route (path and query parameters validated, a ``Response``): the ceiling of a
checked raw answer on the stack the product is built on, before any lookup or read.

    python -m tests.bench.http_floor --bytes N [--log PATH [--fastapi]]   # on a free port
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final

import crc32c
from fastapi import FastAPI, Query, Response
from fastapi import Path as InPath

from tests.bench.http_load import Conn, Step
from tests.fixtures.ports import LOCALHOST
from tests.integration.serve import start_listening

_LENGTH: Final = struct.Struct(">i")  # batchLength, at byte 8 of a batch
_CRC: Final = struct.Struct(">I")  # at byte 17
_CRC_START: Final = 21
_LOG_OVERHEAD: Final = 12


def whole_batches(log: Path, at_most: int) -> bytes:
    """The record batches at the start of ``log`` that fit ``at_most`` bytes (one at least)."""
    with log.open("rb") as f:
        data = f.read(at_most + 2 * 1024 * 1024)
    end = 0
    while end + _LOG_OVERHEAD <= len(data):
        size = _LOG_OVERHEAD + _LENGTH.unpack_from(data, end + 8)[0]
        if end + size > len(data) or (end and end + size > at_most):
            break
        end += size
    return data[:end]


def check_batches(body: memoryview) -> int:
    """Walk ``body``'s batches and check every CRC; the number of batches."""
    at, n = 0, 0
    while at < len(body):
        end = at + _LOG_OVERHEAD + _LENGTH.unpack_from(body, at + 8)[0]
        if crc32c.crc32c(body[at + _CRC_START : end]) != _CRC.unpack_from(body, at + 17)[0]:
            raise ValueError(f"CRC mismatch in the batch at byte {at}")
        at, n = end, n + 1
    return n


ROUTE: Final = "/v1/topics/t/partitions/0/records?offset=0&max_bytes={max_bytes}"


def start_floor(
    body_bytes: int, log_path: Path, checked: Path | None = None, *, fastapi: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    """The floor server as its own process, and its URL once it listens; with ``checked``
    (a segment file), the checked variant answering that file's first batches, from a
    FastAPI route when ``fastapi``."""
    command = [sys.executable, "-m", "tests.bench.http_floor", "--bytes", str(body_bytes)]
    if checked is not None:
        command += ["--log", str(checked)] + (["--fastapi"] if fastapi else [])
    return start_listening(command, log_path, "the floor server")


def floor_walker(url: str, body_bytes: int) -> Callable[[int, int], tuple[Step, Conn]]:
    """GETs of the fixed body, its length checked (any path: the bare apps ignore it)."""
    path = ROUTE.format(max_bytes=body_bytes)

    def make(client: int, clients: int) -> tuple[Step, Conn]:
        conn = Conn(url)

        def step() -> int:
            status, _, body = conn.get(path, {})
            if status != 200 or len(body) != body_bytes:
                raise RuntimeError(f"floor: HTTP {status}, {len(body)} bytes")
            return len(body)

        return step, conn

    return make


def _fastapi_app(view: memoryview) -> Any:
    """A FastAPI app whose one route is shaped like the records route (its annotations are
    resolved in this module's globals, hence the imports at the top)."""
    app = FastAPI()

    @app.get("/v1/topics/{topic}/partitions/{partition}/records")
    async def records(
        topic: Annotated[str, InPath(min_length=1, max_length=249)],
        partition: Annotated[int, InPath(ge=0)],
        offset: Annotated[int, Query(ge=0)],
        max_bytes: Annotated[int, Query(ge=1)],
    ) -> Response:
        check_batches(view)
        return Response(view, media_type="application/octet-stream")

    return app


def main() -> None:
    import uvicorn  # noqa: PLC0415 - only the server process needs it

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--log", type=Path, help="check the CRCs of this segment's first batches")
    ap.add_argument("--fastapi", action="store_true", help="answer from a FastAPI route")
    args = ap.parse_args()
    body = bytes(args.bytes) if args.log is None else whole_batches(args.log, args.bytes)
    view = None if args.log is None else memoryview(body)
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-length", b"%d" % len(body))],
    }

    async def bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if view is not None:
                check_batches(view)
            await send(start)
            await send({"type": "http.response.body", "body": body})

    app: Any = bare
    if args.fastapi and view is not None:
        app = _fastapi_app(view)
    uvicorn.run(
        app, host=LOCALHOST, port=0, loop="uvloop", http="httptools", log_level="warning",
        access_log=False, lifespan="off",
    )  # fmt: skip


if __name__ == "__main__":
    main()
