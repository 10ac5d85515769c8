"""The end-to-end HTTP benchmark keeps working: its S3 stand-in speaks enough S3 for the
project's own S3 store, and a tiny whole run prints every figure against a real ``serve``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.errors import ObjectNotFoundError
from gateway.storage.factory import open_store
from tests.bench import http_report
from tests.bench import slow_s3 as slow_s3_module
from tests.fixtures.ports import LOCALHOST, listening_port


@pytest.fixture
def slow_s3(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "bucket"
    (root / "p" / "q").mkdir(parents=True)
    (root / "p" / "q" / "a.log").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    (root / "p" / "b.log").write_bytes(b"bee")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.slow_s3", "--root", str(root), "--bucket", "bk"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://{LOCALHOST}:{listening_port(proc)}", root
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_slow_s3_serves_the_s3_store(
    slow_s3: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint, root = slow_s3
    data = (root / "p" / "q" / "a.log").read_bytes()

    async def check() -> None:
        store = await open_store(
            "s3://bk", endpoint_url=endpoint, region="us-east-1", path_style=True
        )
        try:
            listed = {o.key: o.size for o in [o async for o in store.list("p/")]}
            assert listed == {"p/q/a.log": len(data), "p/b.log": 3}
            t0 = time.perf_counter()
            assert await store.get_range("p/q/a.log", 1000, 300_000) == data[1000:300_000]
            # 20 ms to the first byte, then 299 000 bytes at 100 MiB/s. The stand-in paces by
            # sleeping after each piece it writes, so the last piece reaches the client before
            # its pacing sleep: what it guarantees is the time of all but the last piece.
            paced = max(0, 299_000 - slow_s3_module.PIECE) / (100 * 2**20)
            assert time.perf_counter() - t0 >= 0.020 + paced
            assert await store.get("p/b.log") == b"bee"
            assert (await store.head("p/b.log")).size == 3
            with pytest.raises(ObjectNotFoundError):
                await store.get("p/missing.log")
        finally:
            await store.close()

    asyncio.run(check())


@pytest.mark.slow  # 20-50 s: a bucket, four servers, every figure
def test_tiny_run_prints_every_figure(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n")
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.bench_http", "--records", "40000", "--segment-mib",
         "2", "--window-mib", "4", "--seconds", "0.3", "--repeats", "1", "--cold-reads", "8",
         "--cold-kib", "64",
         "--cache", str(tmp_path / "cache"), "--docs", str(docs)],
        check=False, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("TIERED_GATEWAY_")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = docs.read_text()
    assert http_report.BEGIN in text
    for what in ("warm JSON", "warm NDJSON", "warm raw", "cold reads"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {what}"))
        assert row.rstrip(" |").endswith(("pass**", "fail")), row  # measured, whatever the verdict
