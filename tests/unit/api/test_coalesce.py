"""A response's head and body in one write (:mod:`gateway.api.coalesce`)."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.api.coalesce import SMALL, CoalescingTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n"
BODY = b"x" * 5000


class Recorder(asyncio.Transport):
    """A transport that records each call that would reach the socket."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, data: Any) -> None:
        self.calls.append(("writelines", [bytes(d) for d in data]))

    def close(self) -> None:
        self.closing = True
        self.calls.append(("close", None))

    def abort(self) -> None:
        self.calls.append(("abort", None))

    def write_eof(self) -> None:
        self.calls.append(("write_eof", None))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 9)}.get(name, default)


async def _turn() -> None:
    """Let the loop run the callbacks already queued."""
    await asyncio.sleep(0)


async def test_a_head_goes_out_with_the_body_that_follows_it_in_one_vectored_write() -> None:
    inner = Recorder()
    t = CoalescingTransport(inner, asyncio.get_running_loop())
    t.write(HEAD)
    assert inner.calls == [] and t.get_write_buffer_size() == 7 + len(HEAD)
    t.write(BODY)
    assert inner.calls == [("writelines", [HEAD, BODY])]
    await _turn()
    assert inner.calls == [("writelines", [HEAD, BODY])]  # nothing more on the next turn


async def test_a_held_write_alone_goes_out_on_the_next_turn_of_the_loop() -> None:
    inner = Recorder()
    t = CoalescingTransport(inner, asyncio.get_running_loop())
    t.write(HEAD)  # a streamed response's head: its first chunk comes later
    await _turn()
    assert inner.calls == [("write", HEAD)]
    t.write(b"x" * SMALL)  # not small: straight through
    t.write(b"tiny")
    t.write(b"tail")  # two small writes: the second sends both
    assert inner.calls[1:] == [("write", b"x" * SMALL), ("writelines", [b"tiny", b"tail"])]


async def test_close_eof_and_writelines_send_what_is_held_first_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    for end, want in (("close", "close"), ("write_eof", "write_eof")):
        inner = Recorder()
        t = CoalescingTransport(inner, loop)
        t.write(HEAD)
        getattr(t, end)()
        assert inner.calls == [("write", HEAD), (want, None)]
    inner = Recorder()
    t = CoalescingTransport(inner, loop)
    t.write(HEAD)
    t.writelines([BODY])
    assert inner.calls == [("write", HEAD), ("writelines", [BODY])]
    t.write(HEAD)
    t.abort()
    await _turn()
    assert inner.calls[2:] == [("abort", None)]


async def test_nothing_is_held_once_closing_and_the_rest_is_the_transports() -> None:
    inner = Recorder()
    t = CoalescingTransport(inner, asyncio.get_running_loop())
    inner.closing = True
    t.write(HEAD)
    assert inner.calls == [("write", HEAD)]
    assert t.is_closing() and t.get_extra_info("peername") == ("127.0.0.1", 9)
