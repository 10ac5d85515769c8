"""An HTTP proxy in front of the moto S3 server that logs every request and injects faults.

The gateway is pointed at the proxy as its S3 endpoint. Faults apply to GETs whose key ends
with ``Faults.suffix`` (``.log`` by default, so manifests and indexes still load):

* ``"503"``: an S3 ``SlowDown`` error, every time;
* ``"403"``: an S3 ``AccessDenied`` error, every time;
* ``"stall"``: no response while the fault lasts (at most a minute);
* ``"corrupt"``: the body of the real answer with one byte flipped (byte 100, inside
  the first batch or chunk of the answer);
* ``"corrupt_once"``: the same, for the next such GET only;
* ``"nobucket"``: S3's ``NoSuchBucket``, every time (the bucket deleted or renamed away).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Literal

import httpx
from fastapi import FastAPI, Request, Response

from tests.unit.api.server import running

Mode = Literal["503", "403", "stall", "corrupt", "corrupt_once", "nobucket"] | None
SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
NO_SUCH_BUCKET = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code>'
    b"<Message>The specified bucket does not exist</Message></Error>"
)
ACCESS_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)
_PASSED_HEADERS = ("content-type", "content-range", "etag", "last-modified", "accept-ranges")


@dataclass
class Faults:
    mode: Mode = None
    suffix: str = ".log"
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, range
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gets(self, suffix: str = ".log") -> list[tuple[str, str]]:
        """(path, range) of every GET of a key ending with ``suffix`` so far."""
        with self.lock:
            return [(p, r) for m, p, r in self.requests if m == "GET" and p.endswith(suffix)]

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()


def _app(upstream: str, faults: Faults) -> FastAPI:
    client = httpx.AsyncClient(base_url=upstream, timeout=30)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await client.aclose()

    app = FastAPI(lifespan=lifespan)

    @app.api_route("/{path:path}", methods=["GET", "HEAD", "PUT", "POST", "DELETE"])
    async def proxy(path: str, request: Request) -> Response:
        target = "/" + path
        with faults.lock:
            faults.requests.append((request.method, target, request.headers.get("range", "")))
        faulty = request.method == "GET" and target.endswith(faults.suffix)
        with faults.lock:
            mode = faults.mode if faulty else None
            if mode == "corrupt_once":  # claimed by this GET alone
                faults.mode = None
        if mode == "503":
            return Response(SLOW_DOWN, status_code=503, media_type="application/xml")
        if mode == "nobucket":
            return Response(NO_SUCH_BUCKET, status_code=404, media_type="application/xml")
        if mode == "403":
            return Response(ACCESS_DENIED, status_code=403, media_type="application/xml")
        if mode == "stall":  # held until the test lifts the fault (or a minute passes)
            for _ in range(1200):
                if faults.mode != "stall":
                    break
                await asyncio.sleep(0.05)
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        upstream_response = await client.request(
            request.method,
            target,
            params=request.query_params,
            headers=headers,
            content=await request.body(),
        )
        body = upstream_response.content
        if (
            mode in ("corrupt", "corrupt_once")
            and upstream_response.status_code in (200, 206)
            and body
        ):
            flipped = bytearray(body)
            flipped[min(100, len(flipped) // 2)] ^= 0x01
            body = bytes(flipped)
        passed = {
            k: v for k, v in upstream_response.headers.items() if k.lower() in _PASSED_HEADERS
        }
        return Response(body, status_code=upstream_response.status_code, headers=passed)

    return app


@contextlib.contextmanager
def fault_proxy(upstream: str) -> Iterator[tuple[str, Faults]]:
    """A running proxy to ``upstream``; yields its URL and the faults it injects."""
    faults = Faults()
    with running(_app(upstream, faults)) as url:
        yield url, faults
