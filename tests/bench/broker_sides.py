"""The two servers of the broker benchmark and the one consumer that reads them.

* :func:`read_all`: a confluent-kafka ``Consumer`` (librdkafka) ``assign()``s every partition
  at offset 0 and ``consume()``s until each partition's last tiered record, checking offsets
  contiguous and summing :func:`record_sum`; the same settings for both servers.
* :class:`SlowS3`: :mod:`tests.bench.slow_s3` over the bucket folder (20 ms to the first byte,
  100 MiB/s per GET), its GET counters read before and after each pass.
* :func:`measured`: one pass, with the server's process-tree CPU (``/proc``), this process's
  CPU (the client, librdkafka's threads included), the wall time and the stand-in's GETs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import confluent_kafka
import httpx

from tests.bench.broker_bucket import CHECK_MASK, PARTITIONS, TOPIC, Built, record_sum
from tests.bench.http_procs import end, self_cpu_s, tree_cpu_s
from tests.fixtures.ports import LOCALHOST, free_port, listening_port

BUCKET_NAME: Final = "bench-broker"
FIRST_BYTE_MS: Final = 20.0
MIB_PER_S: Final = 100.0
READ_TIMEOUT_S: Final = 1800.0
CONSUME_BATCH: Final = 10_000
MiB: Final = 2**20
METRICS: Final = ("tiered_gateway_remote_", "tiered_gateway_chunk_cache_")
EOF: Final = confluent_kafka.KafkaError._PARTITION_EOF
CONSUMER: Final = {
    "group.id": "bench-broker",  # required by the client; never joined (assign only)
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",  # never a silent jump to the end
    "check.crcs": True,
    "fetch.max.bytes": 50 * MiB,  # librdkafka's defaults, written out
    "max.partition.fetch.bytes": MiB,
    "fetch.wait.max.ms": 500,
    "queued.max.messages.kbytes": 64 * 1024,
    "fetch.queue.backoff.ms": 10,  # the default 1 s idles a consumer behind its queue
}


@dataclass(frozen=True)
class Pass:
    """One consumer's read of every partition to its tiered end."""

    side: str
    label: str
    records: int
    log_bytes: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float
    s3_gets: int
    s3_bytes: int
    s3_cpu_s: float

    @property
    def gb(self) -> float:
        return self.log_bytes / 1e9

    @property
    def per_server_cpu_s(self) -> float:
        return self.records / self.server_cpu_s if self.server_cpu_s > 0 else float("inf")


class ReadError(RuntimeError):
    """The consumer saw an error or the wrong records."""


def read_all(bootstrap: str, built: Built, side: str) -> int:
    """Every partition from offset 0 to its tiered end; the records read (checked: offsets
    contiguous, per-partition count and checksum as written)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, **CONSUMER})
    ends = built.ends
    nexts = dict.fromkeys(range(PARTITIONS), 0)
    sums = dict.fromkeys(range(PARTITIONS), 0)
    todo = {p for p in range(PARTITIONS) if ends[p] > 0}
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while todo:
            if time.monotonic() > deadline:
                raise ReadError(f"{side}: not at the end after {READ_TIMEOUT_S} s: {nexts}")
            for m in consumer.consume(CONSUME_BATCH, timeout=1.0):
                error = m.error()
                if error is not None:
                    if error.retriable() or error.code() == EOF:
                        print(f"    {side}: {error}", flush=True)
                        continue
                    raise ReadError(f"{side}: {error} at {nexts}")
                p, offset = m.partition() or 0, m.offset() or 0
                if offset >= ends[p]:
                    continue  # the trailer (broker): not tiered, not counted
                if offset != nexts[p]:
                    raise ReadError(f"{side}: partition {p} offset {offset}, wanted {nexts[p]}")
                nexts[p] = offset + 1
                sums[p] = (sums[p] + record_sum(offset, m.key(), m.value())) & CHECK_MASK
                if nexts[p] == ends[p]:
                    todo.discard(p)
    finally:
        consumer.close()
    if sums != built.sums:
        bad = [p for p in sums if sums[p] != built.sums[p]]
        raise ReadError(f"{side}: checksums of partitions {bad} differ from what was written")
    return sum(nexts.values())


class SlowS3:
    """:mod:`tests.bench.slow_s3` over ``root`` as bucket ``BUCKET_NAME``."""

    def __init__(self, root: Path, log: Path) -> None:
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.slow_s3", "--root", str(root), "--bucket",
             BUCKET_NAME, "--first-byte-ms", str(FIRST_BYTE_MS), "--mib-per-s", str(MIB_PER_S)],
            stdout=self._out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.endpoint = f"http://{LOCALHOST}:{listening_port(self.proc, timeout_s=30)}"

    def stats(self) -> tuple[int, int, float]:
        """(GETs, bytes, CPU-s) so far."""
        s = httpx.get(f"{self.endpoint}/_stats", timeout=10).json()
        return int(s["gets"]), int(s["bytes"]), tree_cpu_s(self.proc.pid)

    def close(self) -> None:
        end(self.proc)
        self._out.close()


def measured(side: str, label: str, pid: int, s3: SlowS3, built: Built,
             read: Callable[[], int]) -> Pass:  # fmt: skip
    gets0, bytes0, s3cpu0 = s3.stats()
    server0, client0, wall0 = tree_cpu_s(pid), self_cpu_s(), time.perf_counter()
    records = read()
    wall = time.perf_counter() - wall0
    server, client = tree_cpu_s(pid) - server0, self_cpu_s() - client0
    gets1, bytes1, s3cpu1 = s3.stats()
    result = Pass(side, label, records, built.log_bytes, wall, server, client,
                  gets1 - gets0, bytes1 - bytes0, s3cpu1 - s3cpu0)  # fmt: skip
    print(f"  {side:8} {label:26}: {records} records in {wall:6.2f} s, server "
          f"{server:6.2f} CPU-s, client {client:5.2f} CPU-s, S3 {result.s3_gets} GETs "
          f"{result.s3_bytes / MiB:.0f} MiB ({result.s3_cpu_s:.1f} CPU-s)", flush=True)  # fmt: skip
    return result


def idle_cpu_ms_per_s(pid: int, seconds: float = 3.0) -> float:
    """What a server spends doing nothing: ms of CPU per s of wall over ``seconds``."""
    before = tree_cpu_s(pid)
    time.sleep(seconds)
    return (tree_cpu_s(pid) - before) / seconds * 1e3


class Gateway:
    """``tiered-gateway serve`` over the stand-in at its defaults (workers, caches, readahead),
    with the Kafka listener on a loopback port; ``extra`` adds flags."""

    def __init__(self, s3: SlowS3, log: Path, *extra: str) -> None:
        self.kafka_port, self.http_port = free_port(), free_port()
        exe = Path(sys.executable).with_name("tiered-gateway")
        command = [str(exe), "serve", "--store", f"s3://{BUCKET_NAME}", "--s3-endpoint-url",
                   s3.endpoint, "--s3-path-style", "--s3-region", "us-east-1",
                   "--kafka-listener", f"{LOCALHOST}:{self.kafka_port}", "--host", LOCALHOST,
                   "--port", str(self.http_port), "--log-level", "warning", *extra]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_GATEWAY_")}
        env |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT, env=env)

    @property
    def bootstrap(self) -> str:
        return f"{LOCALHOST}:{self.kafka_port}"

    def wait_ready(self, built: Built, timeout_s: float = 180.0) -> float:
        """Until every partition's tiered end is served over HTTP; the seconds it took."""
        url = f"http://{LOCALHOST}:{self.http_port}"
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")  # fmt: skip
            try:
                info = [httpx.get(f"{url}/v1/topics/{TOPIC}/partitions/{p}", timeout=5).json()
                        for p in range(PARTITIONS)]  # fmt: skip
                ends = {p: i.get("remote_log_end_offset") for p, i in enumerate(info)}
                if ends == built.ends:
                    return time.monotonic() - started
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"serve not ready in {timeout_s} s: {self.log.read_text()[-2000:]}")

    def remote_counters(self, tries: int = 12) -> dict[str, dict[str, float]]:
        """Per worker answering a ``/metrics`` scrape (``X-Served-By``), its ``remote_*``
        and ``chunk_cache_*`` counters (GETs, hedges, bytes, hits, misses, evictions)."""
        out: dict[str, dict[str, float]] = {}
        for _ in range(tries):
            r = httpx.get(f"http://{LOCALHOST}:{self.http_port}/metrics", timeout=10)
            rows = {}
            for line in r.text.splitlines():
                name, _, value = line.partition(" ")
                if name.startswith(METRICS) and name.endswith("_total"):
                    rows[name.removeprefix("tiered_gateway_")] = float(value)
            out[r.headers.get("x-served-by", "?")] = rows
        return out

    def close(self) -> None:
        end(self.proc, timeout_s=30)
        self._out.close()
