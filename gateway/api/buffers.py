"""A response whose body is a sequence of buffers sent one by one, never joined.

The raw fetch answers with the record batches as stored: views of the cached segment bytes.
Their sizes are known before the first byte is sent, so the response keeps its
``Content-Length``; each buffer goes to the server as its own ``http.response.body`` message
(the server's transport applies backpressure between them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class BuffersResponse(Response):
    """``buffers`` sent in order as the body; ``Content-Length`` is their total size."""

    def __init__(
        self,
        buffers: Sequence[bytes | memoryview],
        *,
        media_type: str,
        headers: Mapping[str, str] | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        self.buffers = [b for b in buffers if len(b)]
        length = sum(len(b) for b in self.buffers)
        super().__init__(
            None,
            media_type=media_type,
            headers={**(headers or {}), "content-length": str(length)},
            background=background,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        buffers = [] if scope.get("method") == "HEAD" else self.buffers
        for buffer in buffers[:-1]:
            await send({"type": "http.response.body", "body": buffer, "more_body": True})
        await send({"type": "http.response.body", "body": buffers[-1] if buffers else b""})
        if self.background is not None:
            await self.background()


class HeldResponse(Response):
    """``inner`` sent as is; ``release`` is called once when it is sent, failed or abandoned
    (the client went away): the response's share of the in-flight byte budget
    (:class:`gateway.service.admission.ByteBudget`) is held for exactly as long as its bytes."""

    def __init__(self, inner: Response, release: Callable[[], None]) -> None:
        # Not Response.__init__: the body, status and headers are the inner response's.
        self.inner = inner
        self.status_code = inner.status_code
        self.raw_headers = inner.raw_headers
        self.background = None
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.background is not None and self.inner.background is None:
            self.inner.background = self.background  # FastAPI's background tasks, if any
        try:
            await self.inner(scope, receive, send)
        finally:
            self._release()


def release_once(release: Callable[[], object]) -> Callable[[], None]:
    """``release()`` the first time the result is called, nothing after."""
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            release()

    return once
