"""A slow S3 stand-in for the cold figure of the end-to-end HTTP benchmark: serves a bucket
folder over path-style S3 (ListObjectsV2, GET with Range, HEAD; signatures not checked),
answering every GET's first byte after ``--first-byte-ms`` and its body at ``--mib-per-s`` per
GET. Its own process, so its CPU is not the client's; moto reads whole objects per ranged GET
and cannot add latency, so it is never used for speed.

    python -m tests.bench.slow_s3 --root DIR --bucket NAME [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import hashlib
import os
import re
import time
from pathlib import Path
from typing import Final
from xml.sax.saxutils import escape

from aiohttp import web

PIECE: Final = 1024 * 1024  # paced per piece: fewer, larger pieces cost less CPU
_RANGE: Final = re.compile(r"bytes=(\d+)-(\d*)$")


class SlowBucket:
    def __init__(self, root: Path, bucket: str, first_byte_s: float, bandwidth: float) -> None:
        self.root, self.bucket = root.resolve(), bucket
        self.first_byte_s, self.bandwidth = first_byte_s, bandwidth
        self.gets = 0
        self.bytes = 0
        self.late_s = 0.0  # the most a GET ended after its planned end: the stand-in's own lag
        self.in_flight = 0
        self.max_in_flight = 0  # GETs at once: how much of the store's concurrency was used

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise web.HTTPForbidden()
        if not path.is_file():
            raise web.HTTPNotFound(text=_error("NoSuchKey", key), content_type="application/xml")
        return path

    async def list(self, request: web.Request) -> web.Response:
        if request.match_info["bucket"] != self.bucket:
            raise web.HTTPNotFound(text=_error("NoSuchBucket", ""), content_type="application/xml")
        prefix = request.query.get("prefix", "")
        keys = sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())
        contents = "".join(
            f"<Contents><Key>{escape(k)}</Key><Size>{(self.root / k).stat().st_size}</Size>"
            f"<LastModified>{_iso((self.root / k).stat().st_mtime)}</LastModified>"
            f"<ETag>&quot;{_etag(k)}&quot;</ETag><StorageClass>STANDARD</StorageClass></Contents>"
            for k in keys
            if k.startswith(prefix)
        )
        encoding = request.query.get("encoding-type")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{self.bucket}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{contents.count('<Contents>')}</KeyCount><MaxKeys>1000</MaxKeys>"
            + (f"<EncodingType>{escape(encoding)}</EncodingType>" if encoding else "")
            + f"<IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
        )
        return web.Response(text=body, content_type="application/xml")

    async def head(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        stat = self._path(key).stat()
        return web.Response(headers=_headers(key, stat.st_size, stat.st_mtime))

    async def get(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        key = request.match_info["key"]
        path = self._path(key)
        stat = path.stat()
        first, end, status = 0, stat.st_size, 200
        match = _RANGE.match(request.headers.get("Range", ""))
        if match:
            first = int(match[1])
            end = min(stat.st_size, int(match[2]) + 1) if match[2] else stat.st_size
            status = 206
        headers = _headers(key, stat.st_size, stat.st_mtime) | {"Content-Length": str(end - first)}
        if status == 206:
            headers["Content-Range"] = f"bytes {first}-{end - 1}/{stat.st_size}"
        self.gets += 1
        self.bytes += end - first
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(max(0.0, started + self.first_byte_s - time.monotonic()))
            response = web.StreamResponse(status=status, headers=headers)
            await response.prepare(request)
            body_start = time.monotonic()
            with path.open("rb") as f:
                sent = 0
                while sent < end - first:
                    piece = os.pread(f.fileno(), min(PIECE, end - first - sent), first + sent)
                    await response.write(piece)
                    sent += len(piece)
                    planned = body_start + sent / self.bandwidth
                    await asyncio.sleep(max(0.0, planned - time.monotonic()))
            await response.write_eof()
        finally:
            self.in_flight -= 1
        planned = started + self.first_byte_s + (end - first) / self.bandwidth
        self.late_s = max(self.late_s, time.monotonic() - planned)
        return response

    async def stats(self, _: web.Request) -> web.Response:
        return web.json_response(
            {"gets": self.gets, "bytes": self.bytes, "late_s": self.late_s,
             "max_in_flight": self.max_in_flight}
        )  # fmt: skip


def _etag(key: str) -> str:
    return hashlib.md5(key.encode()).hexdigest()


def _iso(mtime: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(mtime))


def _headers(key: str, size: int, mtime: float) -> dict[str, str]:
    return {
        "ETag": f'"{_etag(key)}"',
        "Last-Modified": email.utils.formatdate(mtime, usegmt=True),
        "Content-Length": str(size),
        "Accept-Ranges": "bytes",
        "Content-Type": "application/octet-stream",
    }


def _error(code: str, key: str) -> str:
    return f"<?xml version='1.0'?><Error><Code>{code}</Code><Key>{escape(key)}</Key></Error>"


def app(bucket: SlowBucket) -> web.Application:
    application = web.Application()
    application.router.add_get("/_stats", bucket.stats)
    application.router.add_get("/{bucket}", bucket.list)
    application.router.add_get("/{bucket}/", bucket.list)
    application.router.add_head("/{bucket}/{key:.+}", bucket.head)
    application.router.add_get("/{bucket}/{key:.+}", bucket.get, allow_head=False)
    return application


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--first-byte-ms", type=float, default=20.0)
    ap.add_argument("--mib-per-s", type=float, default=100.0, help="bandwidth of one GET")
    args = ap.parse_args()
    bucket = SlowBucket(args.root, args.bucket, args.first_byte_ms / 1000, args.mib_per_s * 2**20)
    web.run_app(app(bucket), host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
