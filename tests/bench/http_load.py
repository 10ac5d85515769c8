"""Clients of the end-to-end HTTP benchmark: threads on keep-alive ``http.client`` connections
(cheap on the client's CPU), each walking its share of a window of the partition; every answer
is checked (status, offsets contiguous, byte counts) so a fast wrong server cannot score.

A walker returns the units of one request (records or bytes); :func:`drive` runs walkers for a
while and reads the CPU seconds of the server (its process tree) and of this process."""

from __future__ import annotations

import base64
import http.client
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import orjson

from tests.bench.http_bucket import KEY
from tests.bench.http_procs import self_cpu_s, tree_cpu_s

MiB: Final = 1024 * 1024
RECORDS: Final = "/v1/topics/{topic}/partitions/0/records?offset={offset}&max_bytes={max_bytes}"


class Conn:
    """One keep-alive connection to ``url``'s host."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._conn = http.client.HTTPConnection(self._host, self._port, timeout=60)

    def get(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            try:
                self._conn.request("GET", path, headers=headers)
                r = self._conn.getresponse()
                body = r.read()
                return r.status, {k.lower(): v for k, v in r.getheaders()}, body
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._conn.close()
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._conn.close()


Step = Callable[[], int]


def _expect(status: int, want: int, body: bytes) -> None:
    if status != want:
        raise RuntimeError(f"HTTP {status}, wanted {want}: {body[:300]!r}")


@dataclass(slots=True)
class Window:
    """Offsets ``[0, end)`` of the partition, and the same bytes as ranges of the logs."""

    topic: str
    end: int
    max_bytes: int

    def start(self, client: int, clients: int) -> int:
        return self.end * client // clients


_FULL_CHECK_EVERY: Final = 8  # JSON pages parsed whole (keys checked); the others are counted


def _check_json(body: bytes, offset: int) -> int:
    """Parse a whole page: offsets contiguous from ``offset``, keys as the bucket wrote them."""
    records = orjson.loads(body)["records"]
    for i, record in enumerate(records):
        if record["offset"] != offset + i or base64.b64decode(record["key"]) != KEY % (offset + i):
            raise RuntimeError(f"JSON page at {offset}: record {i} is {record}")
    return len(records)


def _json_page(body: bytes, offset: int, full: bool) -> tuple[int, int]:
    """(records, next_offset) of a JSON page."""
    following = orjson.loads(b"{" + body[body.rindex(b'"next_offset":') :])["next_offset"]
    n = _check_json(body, offset) if full else body.count(b'{"offset":')
    first = body.find(b'{"offset":%d,' % offset)
    if not n or following != offset + n or not 0 <= first < 200:
        raise RuntimeError(f"JSON page at {offset}: {n} records, next {following}")
    return n, following


def _ndjson_page(body: bytes, offset: int, full: bool) -> tuple[int, int]:
    """(records, next_offset) of an NDJSON stream: record lines, then the trailer."""
    last = body.rindex(b"\n", 0, len(body) - 1) + 1
    following = orjson.loads(body[last:])["next_offset"]
    if full:
        n = _check_json(b'{"records":[' + body[: last - 1].replace(b"\n", b",") + b"]}", offset)
    else:
        n = body.count(b"\n") - 1
    if n <= 0 or following != offset + n or not body.startswith(b'{"offset":%d,' % offset):
        raise RuntimeError(f"NDJSON page at {offset}: {n} records, next {following}")
    return n, following


def _page_walker(
    accept: str, page: Callable[[bytes, int, bool], tuple[int, int]]
) -> Callable[[str, Window, int, int], tuple[Step, Conn]]:
    def walker(url: str, w: Window, client: int, clients: int) -> tuple[Step, Conn]:
        conn, offset, pages = Conn(url), w.start(client, clients), 0

        def step() -> int:
            nonlocal offset, pages
            path = RECORDS.format(topic=w.topic, offset=offset, max_bytes=w.max_bytes)
            status, _, body = conn.get(path, {"Accept": accept})
            _expect(status, 200, body)
            pages += 1
            n, following = page(body, offset, pages % _FULL_CHECK_EVERY == 0)
            offset = following if following < w.end else 0
            return n

        return step, conn

    return walker


json_walker = _page_walker("application/json", _json_page)
ndjson_walker = _page_walker("application/x-ndjson", _ndjson_page)


_BASE: Final = struct.Struct(">qi")  # base offset, batch length


def raw_walker(url: str, w: Window, client: int, clients: int) -> tuple[Step, Conn]:
    conn, offset = Conn(url), w.start(client, clients)

    def step() -> int:
        nonlocal offset
        path = RECORDS.format(topic=w.topic, offset=offset, max_bytes=w.max_bytes)
        status, headers, body = conn.get(path, {"Accept": "application/octet-stream"})
        _expect(status, 200, body)
        base, length = _BASE.unpack_from(body)
        following = int(headers["x-next-offset"])
        if not base <= offset < following or len(body) < 12 + length:
            raise RuntimeError(f"raw page at {offset}: base {base}, next {following}")
        offset = following if following < w.end else 0
        return len(body)

    return step, conn


def range_walker(
    url: str, root: Path, logs: tuple[Path, ...], window_bytes: int, page: int
) -> Callable[[int, int], tuple[Step, Conn]]:
    """Sequential ``Range`` GETs of ``page`` bytes over the first ``window_bytes`` of the logs
    (as nginx serves them: a range never crosses a file's end)."""
    spans: list[tuple[str, int, int]] = []  # path, first byte, end
    left = window_bytes
    for log in logs:
        size = min(log.stat().st_size, left)
        for first in range(0, size, page):
            spans.append(("/" + str(log.relative_to(root)), first, min(first + page, size)))
        left -= size
        if left <= 0:
            break

    def make(client: int, clients: int) -> tuple[Step, Conn]:
        conn, i = Conn(url), len(spans) * client // clients

        def step() -> int:
            nonlocal i
            path, first, end = spans[i]
            status, _, body = conn.get(path, {"Range": f"bytes={first}-{end - 1}"})
            _expect(status, 206, body)
            if len(body) != end - first:
                raise RuntimeError(f"range of {path}: {len(body)} bytes, wanted {end - first}")
            i = (i + 1) % len(spans)
            return len(body)

        return step, conn

    return make


@dataclass(frozen=True, slots=True)
class Measured:
    units: int
    requests: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float

    @property
    def per_server_cpu_s(self) -> float:
        return self.units / self.server_cpu_s if self.server_cpu_s else 0.0

    @property
    def per_client_cpu_s(self) -> float:
        return self.units / self.client_cpu_s if self.client_cpu_s else 0.0


def drive(
    make: Callable[[int, int], tuple[Step, Conn]], clients: int, seconds: float, server_pid: int
) -> Measured:
    """``clients`` threads, each running its walker in a loop for ``seconds``."""
    walkers = [make(c, clients) for c in range(clients)]
    units, requests = [0] * clients, [0] * clients
    errors: list[BaseException] = []
    stop = threading.Event()

    def loop(c: int) -> None:
        step = walkers[c][0]
        try:
            while not stop.is_set():
                units[c] += step()
                requests[c] += 1
        except BaseException as e:  # reported after the run
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in range(clients)]
    server0, client0, wall0 = tree_cpu_s(server_pid), self_cpu_s(), time.perf_counter()
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall0
    server, client = tree_cpu_s(server_pid) - server0, self_cpu_s() - client0
    for _, conn in walkers:
        conn.close()
    if errors:
        raise errors[0]
    return Measured(sum(units), sum(requests), wall, server, client)


def warm_pass(url: str, topic: str, end: int, page: int) -> int:
    """One raw walk over offsets ``[0, end)``, to fill the server's caches; bytes read."""
    conn, offset, total = Conn(url), 0, 0
    try:
        while offset < end:
            path = RECORDS.format(topic=topic, offset=offset, max_bytes=page)
            status, headers, body = conn.get(path, {"Accept": "application/octet-stream"})
            _expect(status, 200, body)
            offset, total = int(headers["x-next-offset"]), total + len(body)
    finally:
        conn.close()
    return total
