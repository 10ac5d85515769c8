"""The first `export` after install against the next ones (issue 18, point 6): the compiled
record loops (numba) are compiled on first use and cached on disk, so only the first run of an
installation pays for it. Each run is its own process, as a user's would be; the cache starts
empty (a fresh ``NUMBA_CACHE_DIR``), then is reused.

    python -m tests.bench.bench_first_run [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _export(bucket: Path, prefix: str, out: Path, cache: Path) -> tuple[float, float, int]:
    """One export in its own process: (wall s, the job's own s, records)."""
    env = os.environ | {"NUMBA_CACHE_DIR": str(cache), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_PYTHON", None)
    command = [sys.executable, "-m", "gateway.cli", "export", "--store", bucket.as_uri(),
               "--key-prefix", prefix, "--topic", "orders", "--output", str(out),
               "--master", "local[2]", "--quiet"]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return wall, float(summary["seconds"]), int(summary["records"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs after the first")
    args = ap.parse_args()
    from gateway.demo import write_demo_bucket  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="bench-first-run-") as tmp:
        work = Path(tmp)
        demo = write_demo_bucket(work / "demo")
        cache = work / "numba-cache"
        runs = [
            _export(demo.root / "bucket", demo.key_prefix, work / f"out-{i}", cache)
            for i in range(args.runs + 1)
        ]
        cached = sum(1 for _ in cache.rglob("*") if _.is_file())
    first, later = runs[0], runs[1:]
    best = min(later, key=lambda r: r[0])
    print(f"{os.cpu_count()} cores; export of the demo's orders ({first[2]} records), local[2]")
    print(f"  first run (empty numba cache): {first[0]:.1f} s wall, job {first[1]:.1f} s")
    print(f"  later runs (cache filled, {cached} files): best {best[0]:.1f} s wall, "
          f"job {best[1]:.1f} s")  # fmt: skip
    print(f"  the first run's extra: {first[0] - best[0]:.1f} s wall")


if __name__ == "__main__":
    main()
