"""A response's head and body in one system call.

uvicorn writes a response's head (status line and headers) to the transport as soon as the app
sends ``http.response.start``, then each body message as it comes: two ``send`` calls for every
response, and on loopback each one also wakes the reader. Profiled on warm 1 MiB raw answers
(issue 30, ``bench_http``, py-spy): the head's write alone was ~14 % of the server's samples,
the body's ~18 %.

:class:`CoalescingTransport` holds a small write (the head) until the next write of the same
turn of the event loop and hands both to the transport at once (``writelines``: one vectored
write, nothing joined); a held write that no other follows in that turn goes out on the loop's
next turn (``call_soon``), before any timer or I/O callback, so a streamed head is not delayed
behind anything but the callbacks already queued. Everything else is the wrapped transport's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

SMALL: Final = 4096
"""Writes shorter than this are held for the next one (a response head is a few hundred bytes)."""

Data = bytes | bytearray | memoryview


class CoalescingTransport:
    """``inner`` (a transport) whose small writes are held until the next write or the next turn
    of ``loop``; see the module docstring."""

    def __init__(self, inner: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._loop = loop
        self._held: Data | None = None
        self._flush_handle: asyncio.Handle | None = None

    def write(self, data: Data) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._inner.writelines((held, data))
        elif len(data) < SMALL and not self._inner.is_closing():
            self._held = data
            if self._flush_handle is None:
                self._flush_handle = self._loop.call_soon(self.flush)
        else:
            self._inner.write(data)

    def writelines(self, data: Iterable[Data]) -> None:
        self.flush()
        self._inner.writelines(data)

    def flush(self) -> None:
        """Write what is held now."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        held, self._held = self._held, None
        if held is not None and not self._inner.is_closing():
            self._inner.write(held)

    def write_eof(self) -> None:
        self.flush()
        self._inner.write_eof()

    def close(self) -> None:
        self.flush()
        self._inner.close()

    def abort(self) -> None:
        self._held = None
        self._inner.abort()

    def get_write_buffer_size(self) -> int:
        held = self._held
        return self._inner.get_write_buffer_size() + (len(held) if held is not None else 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
