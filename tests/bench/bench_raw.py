"""Raw-batches benchmark: warm ``application/octet-stream`` fetches through the ASGI app,
in process, per CPU-second of this process, for the working tree and a tree given with
``--before`` (e.g. ``git archive HEAD gateway indexcache | tar -x -C /tmp/before``), in the
same run.

Each side runs in its own process (``PYTHONPATH`` selects the tree) over the same bucket
(:mod:`tests.bench.http_bucket`, tiered uncompressed into a filesystem store), with the chunk
cache large enough to hold it: one pass warms the caches, then random offsets are fetched
with ``max_bytes`` pages through the whole app (routing, middleware, service, response); the
server's send is a sink that counts bytes (no socket: the kernel copy both sides would pay is
left out). Reported: MB of body per CPU-second (``time.process_time``, all threads) and
thread hand-offs per fetch. Also the cost of the RLMM reads a fetch makes on the event loop
(:func:`gateway.service.locate.held`) against one ``asyncio.to_thread`` hop, on the SQLite
backend (``--state-dir``) and in memory.

    python -m tests.bench.bench_raw [--records N] [--max-bytes N] [--fetches N]
                                    [--before PATH]

Both sides run with the catalog in memory (the default) and in SQLite (``--state-dir``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "bench.http"


class _Lifespan:
    """Runs an ASGI app's lifespan by hand: the state its requests see."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._queue: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self._started = asyncio.Event()

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"].startswith("lifespan.startup"):
            self._started.set()
            if message["type"] == "lifespan.startup.failed":
                raise RuntimeError(message.get("message"))

    async def __aenter__(self) -> dict[str, Any]:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self.state}
        await self._queue.put({"type": "lifespan.startup"})
        self._task = asyncio.create_task(self.app(scope, self._queue.get, self._send))
        await self._started.wait()
        return self.state

    async def __aexit__(self, *exc: object) -> None:
        await self._queue.put({"type": "lifespan.shutdown"})
        await self._task


async def _get(app: Any, state: dict[str, Any], path: str, query: str) -> tuple[int, int]:
    """(status, body bytes) of one GET with ``Accept: application/octet-stream``."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode(), "headers": [(b"accept", b"application/octet-stream")],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": dict(state),
    }  # fmt: skip
    status, size = 0, 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            size += len(message.get("body", b""))

    await app(scope, receive, send)
    return status, size


def _count_hops() -> list[int]:
    """Counts ``asyncio.to_thread``, ``run_in_executor`` and ``anyio.to_thread.run_sync`` (how
    Starlette runs a plain ``def`` dependency) calls from now on."""
    import anyio.to_thread  # noqa: PLC0415

    hops = [0]
    run_sync = anyio.to_thread.run_sync

    async def counted_run_sync(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops[0] += 1
        return await run_sync(fn, *args, **kwargs)

    anyio.to_thread.run_sync = counted_run_sync  # type: ignore[assignment]
    to_thread, run_in_executor = asyncio.to_thread, asyncio.BaseEventLoop.run_in_executor

    async def counted_to_thread(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        hops[0] += 1
        return await to_thread(fn, *args, **kwargs)

    def counted_run(self: Any, executor: Any, fn: Any, *args: Any) -> Any:
        hops[0] += 1
        return run_in_executor(self, executor, fn, *args)

    asyncio.to_thread = counted_to_thread
    asyncio.BaseEventLoop.run_in_executor = counted_run  # type: ignore[method-assign,assignment]
    return hops


async def _measure(
    bucket: Path, records: int, max_bytes: int, fetches: int, state_dir: Path | None
) -> dict[str, Any]:
    from gateway.api.app import create_app  # noqa: PLC0415 - from the tree PYTHONPATH selects
    from gateway.config import Settings  # noqa: PLC0415

    hops = _count_hops()
    settings = Settings(
        store=f"file://{bucket}", key_prefix="tiered/", chunk_cache_bytes=1 << 30,
        max_response_bytes=64 << 20, state_dir=state_dir,
    )  # fmt: skip
    app = create_app(settings)
    path = f"/v1/topics/{TOPIC}/partitions/0/records"
    rng = random.Random(15)
    async with _Lifespan(app) as state:
        await state["service"].wait_ready()
        offset = 0
        while offset < records:  # warm every chunk and index
            _, size = await _get(app, state, path, f"offset={offset}&max_bytes={8 << 20}")
            offset += (8 << 20) // 300  # records of ~230 B: pages overlap
        offsets = [rng.randrange(records) for _ in range(fetches)]
        before_hops = hops[0]
        cpu, wall, total = time.process_time(), time.perf_counter(), 0
        for offset in offsets:
            status, size = await _get(app, state, path, f"offset={offset}&max_bytes={max_bytes}")
            assert status == 200, status
            total += size
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "mb_per_cpu_s": total / 1e6 / cpu,
        "fetches_per_cpu_s": fetches / cpu,
        "hops_per_fetch": (hops[0] - before_hops) / fetches,
        "mb": total / 1e6,
        "wall_s": wall,
    }


def _lookup_costs(bucket: Path, records: int) -> dict[str, float]:
    """µs per ``held`` (the RLMM reads a fetch makes inline) on SQLite and in memory, and per
    ``asyncio.to_thread`` hop of a no-op."""
    from gateway.metadata.bucket import scan_bucket  # noqa: PLC0415
    from gateway.metadata.open import open_manager  # noqa: PLC0415
    from gateway.service.locate import held  # noqa: PLC0415

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as state:
        for name, where in (("memory", None), ("sqlite", Path(state))):
            rlmm = open_manager(where)
            asyncio.run(scan_bucket(rlmm, f"file://{bucket}", key_prefix="tiered/"))
            tp = rlmm.partition(TOPIC, 0)
            offsets = [random.Random(1).randrange(records) for _ in range(2000)]
            for o in offsets[:200]:
                held(rlmm, tp, o)
            start = time.perf_counter()
            for o in offsets:
                assert held(rlmm, tp, o) is not None
            out[f"held_{name}_us"] = (time.perf_counter() - start) / len(offsets) * 1e6
            rlmm.close()

    async def hops(n: int) -> float:
        start = time.process_time()
        for _ in range(n):
            await asyncio.to_thread(int)
        return (time.process_time() - start) / n * 1e6

    out["to_thread_cpu_us"] = asyncio.run(hops(2000))
    return out


def _side(
    tree: Path | None, args: argparse.Namespace, bucket: Path, sqlite: bool
) -> dict[str, Any]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, __file__, "--side", "--bucket", str(bucket),
               "--records", str(args.records), "--max-bytes", str(args.max_bytes),
               "--fetches", str(args.fetches)]  # fmt: skip
    with tempfile.TemporaryDirectory() as state:
        if sqlite:
            command += ["--state-dir", state]
        done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--segment-mib", type=int, default=16)
    parser.add_argument("--max-bytes", type=int, default=1 << 20)
    parser.add_argument("--fetches", type=int, default=400)
    parser.add_argument("--before", type=Path, help="a tree holding gateway/ and indexcache/")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--state-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        result = asyncio.run(
            _measure(args.bucket, args.records, args.max_bytes, args.fetches, args.state_dir)
        )
        print(json.dumps(result))
        return
    sys.path.insert(0, str(ROOT))
    from tests.bench.http_bucket import bench_bucket  # noqa: PLC0415

    bucket = bench_bucket(ROOT / "build" / "bench-http", args.records, args.segment_mib)
    print(f"bucket: {bucket.records} records, {bucket.segments} segments, "
          f"{bucket.log_bytes / 1e6:.1f} MB; {os.cpu_count()} cores; "
          f"{args.fetches} warm raw fetches of max_bytes={args.max_bytes}")  # fmt: skip
    sides = [("before", args.before)] if args.before else []
    for name, tree in [*sides, ("after", None)]:
        for catalog in ("memory", "SQLite"):
            r = _side(tree, args, bucket.root, catalog == "SQLite")
            print(f"{name:>7}, {catalog:>6} catalog: {r['mb_per_cpu_s']:8.1f} MB per CPU-s, "
                  f"{r['fetches_per_cpu_s']:7.0f} fetches per CPU-s, "
                  f"{r['hops_per_fetch']:.2f} thread hand-offs per fetch")  # fmt: skip
    costs = _lookup_costs(bucket.root, bucket.records)
    print("RLMM reads of a fetch (held), µs: "
          f"memory {costs['held_memory_us']:.1f}, SQLite {costs['held_sqlite_us']:.1f}; "
          f"one to_thread hop: {costs['to_thread_cpu_us']:.1f} µs of CPU")  # fmt: skip


if __name__ == "__main__":
    main()
