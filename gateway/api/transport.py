"""The HTTP connection guard: uvicorn's httptools protocol with the limits it lacks (issue 16).

uvicorn bounds neither the time a client may take to send a request's head nor the head's
size: a probe with 400 half-sent requests held 400 sockets open indefinitely, and 1 MiB of
headers was accepted. :func:`guarded_protocol` makes a subclass of
:class:`~uvicorn.protocols.http.httptools_impl.HttpToolsProtocol` that:

* closes a connection whose request head (request line and headers) is not complete within
  ``header_timeout_s`` of its first byte, or of the connection's opening when nothing comes
  (every head of a keep-alive connection, pipelined ones included; between requests uvicorn's
  own keep-alive timeout applies);
* answers ``431 Request Header Fields Too Large`` and closes once one head passes
  ``max_header_bytes``. Heads are measured on the bytes as they arrive, before the parser sees
  them (so a value never finished counts too), each from the end of the one before to its
  blank line; this API's requests carry no body (one would count towards the next head).
* puts the TLS peer certificate into the request scope (``scope["extensions"]["tls"]``,
  ASGI's TLS extension: ``client_cert_dict``, the dict of :meth:`ssl.SSLSocket.getpeercert`),
  where the mTLS authenticator reads the subject.

The connection limit is uvicorn's own (``limit_concurrency``: 503 beyond it).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.api.coalesce import CoalescingTransport

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
        self._head_bytes = 0  # bytes of the head being received (since the last head's end)
        self._tail = b""  # the last 3 bytes seen: a head's end may straddle two reads

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
        # a response's head goes out with its body (gateway.api.coalesce)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]
        self._arm()  # a connection that never sends a byte is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._head_bytes:  # a next head began meanwhile: its clock runs from now at least
            self._arm()

    # --- the head's size -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if not self._heads_fit(data):
            self._too_large()
            return
        if self._head_bytes:  # inside a head: from its first byte it has header_timeout_s
            self._arm()
        else:  # every head so far is whole: the request (or keep-alive) rules the time
            self._disarm()
        super().data_received(data)

    def _heads_fit(self, data: bytes) -> bool:
        """Count ``data`` into the heads it continues, ends and begins (a head ends at its
        blank line, ``CRLF CRLF``; this API's requests carry no body); whether each fits."""
        view = self._tail + data
        count = self._head_bytes - len(self._tail)  # + an index in view: bytes of the head
        at = 0
        while (end := view.find(b"\r\n\r\n", at)) >= 0:
            if count + end + 4 > self.max_header_bytes:
                return False
            at = end + 4
            count = -at  # the next head begins after this one's blank line
        self._head_bytes = count + len(view)
        self._tail = view[-3:]
        return self._head_bytes <= self.max_header_bytes

    def _too_large(self) -> None:
        self._disarm()
        body = _BODY % self.max_header_bytes
        self.transport.write(_431 % (len(body), body))
        self.transport.close()

    def on_headers_complete(self) -> None:
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
