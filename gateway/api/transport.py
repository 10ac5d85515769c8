"""The HTTP connection guard: uvicorn's httptools protocol with the limits it lacks (issue 16).

uvicorn bounds neither the time a client may take to send a request's head nor the head's
size: a probe with 400 half-sent requests held 400 sockets open indefinitely, and 1 MiB of
headers was accepted. :func:`guarded_protocol` makes a subclass of
:class:`~uvicorn.protocols.http.httptools_impl.HttpToolsProtocol` that:

* closes a connection whose request head (request line and headers) is not complete within
  ``header_timeout_s`` of its first byte, or of the connection's opening when nothing comes
  (a keep-alive connection between requests stays under uvicorn's own keep-alive timeout);
* answers ``431 Request Header Fields Too Large`` and closes once the bytes received for a
  head pass ``max_header_bytes`` (counted as they arrive, before the parser sees them, so a
  value never finished counts too; a body sent in the same packet as its head counts as
  head, which only a request with a body, none of this API's, could meet);
* puts the TLS peer certificate into the request scope (``scope["extensions"]["tls"]``,
  ASGI's TLS extension: ``client_cert_dict``, the dict of :meth:`ssl.SSLSocket.getpeercert`),
  where the mTLS authenticator reads the subject.

The connection limit is uvicorn's own (``limit_concurrency``: 503 beyond it).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_431: Final = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\n"
    b"connection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
_BODY: Final = (
    b'{"error_code":"header_too_large","message":"the request line and headers exceed '
    b'%d bytes","retriable":false}'
)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """See the module docstring; the limits are class attributes set by
    :func:`guarded_protocol`."""

    header_timeout_s: float = 10.0
    max_header_bytes: int = 16 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0  # bytes received since the head began
        self._head_open = True  # between a response's end (or the connection's start) and a head

    # --- the head's time -------------------------------------------------------------------

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        busy = self.cycle is not None and not self.cycle.response_complete
        if not busy and not self.transport.is_closing():
            self.transport.close()  # a head never finished: the slow client's socket back

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a byte is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Between requests the keep-alive timeout rules; the next head arms the timer again.
        self._disarm()
        self._head_open, self._head_bytes = True, 0

    # --- the head's size -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._head_open:  # the bytes of a head as they come, before the parser sees them
            self._head_bytes += len(data)
            if self._head_bytes > self.max_header_bytes:
                self._too_large()
                return
        super().data_received(data)

    def _too_large(self) -> None:
        self._disarm()
        self._head_open = False
        body = _BODY % self.max_header_bytes
        self.transport.write(_431 % (len(body), body))
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._disarm()
        ssl_object = self.transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            cert = ssl_object.getpeercert()
            extensions = self.scope.setdefault("extensions", {})
            extensions["tls"] = {"client_cert_dict": cert or None}
        super().on_headers_complete()


def guarded_protocol(header_timeout_s: float, max_header_bytes: int) -> type[HttpToolsProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with these limits."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_timeout_s": header_timeout_s, "max_header_bytes": max_header_bytes},
    )
