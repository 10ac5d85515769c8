"""S3 data-plane benchmark: ranged GETs with aioboto3 ``get_object``, aiohttp and httpx, in one run.

A bucket folder is served by a local nginx (static files, Range support) in the S3 path-style
layout ``/<bucket>/<key>``; nginx ignores the signatures, which is fine: the clients are what
is measured, each doing its full per-request work (signing, request, reading the body).

- ``aioboto3``: ``get_object(Range=...)`` and ``Body.read()``, as the control plane does it;
- ``aiohttp signed``: :class:`~gateway.storage.s3_http.S3AiohttpReader` (SigV4 in the
  headers; the default data plane);
- ``httpx signed``: :class:`~gateway.storage.s3_http.S3HttpReader` (SigV4 in the headers);
- ``httpx presigned``: the same pooled httpx client, a URL presigned per GET (SigV4 in the
  query) with botocore's ``S3SigV4QueryAuth``.

Ranged GETs of 64 KiB, 1 MiB and 8 MiB at random offsets of a 64 MiB object, at concurrency 1
and 8; best of ``--repeat`` runs, clients interleaved. moto is never timed (it reads the whole
object on every ranged GET).

    python -m tests.bench.bench_s3 [--repeat 3] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aioboto3
import httpx
from aiobotocore.config import AioConfig
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest

from gateway.storage.s3_http import (
    HttpOptions,
    S3AiohttpReader,
    S3HttpReader,
    StaticCredentials,
)
from tests.bench.http_procs import Nginx, nginx_binary
from tests.bench.http_procs import start_nginx as start_nginx_on

BUCKET = "bench-bucket"
KEY = "topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log"
OBJECT_SIZE = 64 * 1024 * 1024
REGION = "us-east-1"
CREDS = StaticCredentials("bench-access-key", "bench-secret-key")
# (range size, requests per run at scale 1): ~128-384 MiB per run
SIZES = [(64 * 1024, 2000), (1024 * 1024, 256), (8 * 1024 * 1024, 48)]
CONCURRENCY = [1, 8]

Get = Callable[[int, int], Awaitable[bytes]]


def start_nginx(nginx: str, work: Path, data: bytes) -> Nginx:
    """nginx on 127.0.0.1 serving ``work/root`` (``/<bucket>/<key>``, path style)."""
    root = work / "root"
    obj = root / BUCKET / KEY
    obj.parent.mkdir(parents=True)
    obj.write_bytes(data)
    for d in [work, *root.rglob("*"), root]:
        d.chmod(0o755 if d.is_dir() else 0o644)  # nginx workers may run as another user
    return start_nginx_on(nginx, root, work / "prefix", workers=1)


async def run_gets(get: Get, offsets: list[int], size: int, concurrency: int) -> float:
    """Seconds to fetch every ``[offset, offset + size)`` with ``concurrency`` workers."""
    todo = iter(offsets)

    async def worker() -> None:
        for off in todo:
            body = await get(off, off + size)
            if len(body) != size:
                raise AssertionError(f"got {len(body)} bytes, expected {size}")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def presigned_get(client: httpx.AsyncClient, endpoint: str) -> Get:
    url = f"{endpoint}/{BUCKET}/{KEY}"

    async def get(start: int, end: int) -> bytes:
        request = AWSRequest(method="GET", url=url)
        S3SigV4QueryAuth(CREDS, "s3", REGION, expires=3600).add_auth(request)
        response = await client.get(request.url, headers={"Range": f"bytes={start}-{end - 1}"})
        if response.status_code != 206:
            raise AssertionError(f"status {response.status_code}")
        return response.content

    return get


def signing_cost() -> tuple[float, float]:
    """Microseconds per header signature and per presigned URL (botocore's signers)."""
    url = f"http://127.0.0.1/{BUCKET}/{KEY}"
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        r = AWSRequest(method="GET", url=url, headers={"Range": "bytes=0-65535"})
        S3SigV4Auth(CREDS, "s3", REGION).add_auth(r)
    t1 = time.perf_counter()
    for _ in range(n):
        r = AWSRequest(method="GET", url=url)
        S3SigV4QueryAuth(CREDS, "s3", REGION, expires=3600).add_auth(r)
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


async def run(repeat: int, scale: float, endpoint: str, data: bytes) -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", CREDS.access_key)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", CREDS.secret_key)
    config = AioConfig(
        retries={"max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"},
        max_pool_connections=64,
    )
    session = aioboto3.Session()
    async with session.client(
        "s3", endpoint_url=endpoint, region_name=REGION, config=config
    ) as boto:
        options = HttpOptions(BUCKET, REGION, endpoint, path_style=True)
        reader = S3HttpReader(options, CREDS)
        aio_reader = S3AiohttpReader(options, CREDS)
        presign_client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
            headers={"Accept-Encoding": "identity"},
        )

        async def boto_get(start: int, end: int) -> bytes:
            resp: dict[str, Any] = await boto.get_object(
                Bucket=BUCKET, Key=KEY, Range=f"bytes={start}-{end - 1}"
            )
            async with resp["Body"] as body:
                out: bytes = await body.read()
            return out

        async def http_get(start: int, end: int) -> bytes:
            return await reader.get_range(KEY, start, end)

        clients: dict[str, Get] = {
            "aioboto3": boto_get,
            "aiohttp signed": lambda start, end: aio_reader.get_range(KEY, start, end),
            "httpx signed": http_get,
            "httpx presigned": presigned_get(presign_client, endpoint),
        }
        try:
            for name, get in clients.items():  # correctness, and warm the pools
                if await get(12_345, 12_345 + 100_000) != data[12_345:112_345]:
                    raise AssertionError(f"{name}: wrong bytes")
                await run_gets(get, [0] * 16, 1024, 8)
            await report(clients, repeat, scale)
        finally:
            await reader.aclose()
            await aio_reader.aclose()
            await presign_client.aclose()


async def report(clients: dict[str, Get], repeat: int, scale: float) -> None:
    rng = random.Random(11)
    print(f"{'range':>7s} {'conc':>4s} | " + " | ".join(f"{n:>22s}" for n in clients), end="")
    print(" | aiohttp / aioboto3 | httpx / aioboto3 | CPU ms per GET, same order")
    print(f"{'':>7s} {'':>4s} | " + " | ".join(f"{'MB/s':>10s} {'GETs/s':>11s}" for _ in clients))
    for size, count in SIZES:
        n = max(8, int(count * scale))
        offsets = [rng.randrange(0, OBJECT_SIZE - size) for _ in range(n)]
        for conc in CONCURRENCY:
            best = dict.fromkeys(clients, float("inf"))
            cpu = dict.fromkeys(clients, float("inf"))
            for _ in range(repeat):
                for name, get in clients.items():
                    before = time.process_time()
                    best[name] = min(best[name], await run_gets(get, offsets, size, conc))
                    cpu[name] = min(cpu[name], (time.process_time() - before) / n * 1e3)
            cells = [f"{n * size / t / 1e6:10.0f} {n / t:11.0f}" for t in best.values()]
            aio = best["aioboto3"] / best["aiohttp signed"]
            ratio = best["aioboto3"] / best["httpx signed"]
            label = f"{size // 1024} KiB" if size < 1024 * 1024 else f"{size // 2**20} MiB"
            costs = " ".join(f"{c:.2f}" for c in cpu.values())
            print(
                f"{label:>7s} {conc:4d} | " + " | ".join(cells)
                + f" | {aio:.2f}x | {ratio:.2f}x | {costs}"
            )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the GET counts")
    args = parser.parse_args()
    nginx = nginx_binary()
    if nginx is None:
        print(
            "bench_s3: nginx is not installed, so there is nothing to serve the bucket; "
            "install it (Debian/Ubuntu: `apt-get install -y nginx`, macOS: `brew install "
            "nginx`) and run again. No numbers."
        )
        return
    print(f"cores: {os.cpu_count()}  python {sys.version.split()[0]}  object: 64 MiB via nginx")
    sign_us, presign_us = signing_cost()
    print(f"botocore signing, per GET: headers {sign_us:.0f} us, presigned URL {presign_us:.0f} us")
    data = random.Random(5).randbytes(OBJECT_SIZE)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_nginx(nginx, Path(tmp), data)
        try:
            asyncio.run(run(args.repeat, args.scale, server.url, data))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
