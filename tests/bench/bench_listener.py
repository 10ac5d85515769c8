"""Kafka listener against the HTTP raw endpoint (issue 19): records a librdkafka consumer reads
from ``serve --kafka-listener`` against the same records over ``GET .../records`` with
``Accept: application/octet-stream``, per CPU-second of the server, in the same run, on the
same ``serve`` process.

One ``serve --workers 1 --kafka-listener 127.0.0.1:0`` process per bucket (the end-to-end HTTP
benchmark's bucket, :mod:`tests.bench.http_bucket`: one partition of ~200 B records in ~16 KiB
batches, uncompressed; and, unless ``--zstd-records 0``, the same shape zstd-compressed by the
gateway's encoder), its chunk cache large enough to hold the bucket, warmed by one HTTP pass,
no periodic rescan. Then rounds, alternating which side goes first, each side reading the whole
partition from offset 0 to the remote end once:

* **listener**: a confluent-kafka ``Consumer`` (librdkafka, C) ``assign()``s the partition at
  ``OFFSET_BEGINNING`` and ``consume()``s batches of messages until ``_PARTITION_EOF``, CRCs
  checked by librdkafka (``check.crcs``), ``max.partition.fetch.bytes`` = ``--fetch-bytes``,
  ``fetch.max.bytes`` 50 MiB (the default: one partition, so the partition bound rules),
  ``fetch.wait.max.ms`` 500 (only waited at the end), ``queued.max.messages.kbytes`` 64 MiB
  (the default prefetch), ``fetch.queue.backoff.ms`` 10 (wall only). The consumer is created
  and closed inside the measured span.
* **HTTP raw**: one keep-alive ``http.client`` connection (:class:`tests.bench.http_load.Conn`,
  the fastest client of the HTTP benchmark) walks ``max_bytes`` = ``--fetch-bytes`` pages by
  ``X-Next-Offset``; each body is decoded by aiokafka's C record reader (the reference peer
  decoder of ``bench_decode``): every batch's CRC validated, every record materialised.

Both sides check every record the same way (offsets contiguous from 0, each key the one the
bucket wrote), then the count and the sum of offsets against the bucket: a fast wrong side
cannot score. Server CPU-seconds are utime + stime of the ``serve`` process tree from
``/proc`` before and after each side; client CPU is this process's (every thread: librdkafka's
included). Reported: records per server CPU-second per side, best and median of the rounds,
and the ratio listener / HTTP (best over best, median over median, and the median of each
round's own ratio); client CPU and wall beside them.

    python -m tests.bench.bench_listener [--records 1500000] [--rounds 5] [--fetch-bytes N]
                                         [--zstd-records 1500000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import confluent_kafka
import httpx
from aiokafka.record._crecords.memory_records import MemoryRecords as AioMemoryRecords

from gateway.kafka.batch import iter_batches
from gateway.kafka.codecs import Codec
from gateway.kafka.writer import SegmentWriter
from tests.bench import http_bucket
from tests.bench.bench_decode import make_segment
from tests.bench.http_bucket import KEY, KEY_PREFIX, TOPIC, BenchBucket, bench_bucket
from tests.bench.http_load import RECORDS, Conn, MiB, warm_pass
from tests.bench.http_procs import self_cpu_s, tree_cpu_s
from tests.fixtures.ports import LOCALHOST, listening_ports
from tests.integration.serve import start_serve, stop, wait_ready

CONSUME_BATCH: Final = 10_000  # messages per Consumer.consume() call
PORTS_TIMEOUT_S: Final = 60.0
IDLE_S: Final = 3.0


@dataclass(frozen=True, slots=True)
class Read:
    """One side's read of the whole partition."""

    records: int
    server_cpu_s: float
    client_cpu_s: float
    wall_s: float

    @property
    def per_server_cpu_s(self) -> float:
        return self.records / self.server_cpu_s

    @property
    def per_client_cpu_s(self) -> float:
        return self.records / self.client_cpu_s


class Checker:
    """Every record of a read: offsets contiguous from 0, keys as the bucket wrote them; then
    the count and the sum of offsets against the bucket."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.next = 0
        self.offset_sum = 0

    def record(self, offset: int, key: bytes | None) -> None:
        if offset != self.next or key != KEY % offset:
            raise RuntimeError(f"{self.side}: record {offset} (key {key!r}), wanted {self.next}")
        self.next += 1
        self.offset_sum += offset

    def finish(self, records: int) -> int:
        want = records * (records - 1) // 2
        if self.next != records or self.offset_sum != want:
            raise RuntimeError(
                f"{self.side}: {self.next} records, offset sum {self.offset_sum}; "
                f"wanted {records} and {want}"
            )
        return self.next


def _measured(pid: int, read: Callable[[], int]) -> Read:
    server0, client0, wall0 = tree_cpu_s(pid), self_cpu_s(), time.perf_counter()
    records = read()
    wall = time.perf_counter() - wall0
    return Read(records, tree_cpu_s(pid) - server0, self_cpu_s() - client0, wall)


def read_listener(port: int, records: int, fetch_bytes: int) -> int:
    """The whole partition through librdkafka; the records read (checked)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": f"{LOCALHOST}:{port}",
            "group.id": "bench-listener",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "check.crcs": True,
            "fetch.max.bytes": 50 * MiB,
            "max.partition.fetch.bytes": fetch_bytes,
            "fetch.wait.max.ms": 500,
            "queued.max.messages.kbytes": 64 * 1024,
            "fetch.queue.backoff.ms": 10,  # the default 1 s idles a consumer behind its queue
        }
    )
    check = Checker("listener")
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            for message in consumer.consume(CONSUME_BATCH, timeout=1.0):
                error = message.error()
                offset = message.offset()
                if error is None and offset is not None:
                    check.record(offset, message.key())
                elif (
                    error is not None and error.code() == confluent_kafka.KafkaError._PARTITION_EOF
                ):
                    return check.finish(records)
                else:
                    raise RuntimeError(f"listener: {error}")
        raise RuntimeError(f"listener: no end of partition after {check.next} records")
    finally:
        consumer.close()


def read_http_raw(url: str, records: int, fetch_bytes: int) -> int:
    """The whole partition as raw pages, decoded by aiokafka's C reader; the records read."""
    conn, offset, check = Conn(url), 0, Checker("HTTP raw")
    accept = {"Accept": "application/octet-stream"}
    try:
        while offset < records:
            path = RECORDS.format(topic=TOPIC, offset=offset, max_bytes=fetch_bytes)
            status, headers, body = conn.get(path, accept)
            if status != 200:
                raise RuntimeError(f"HTTP raw: {status} at {offset}: {body[:300]!r}")
            batches = AioMemoryRecords(body)
            while (batch := batches.next_batch()) is not None:
                if not batch.validate_crc():
                    raise RuntimeError(f"HTTP raw: a batch at {offset} fails its CRC")
                for record in batch:
                    if record.offset >= check.next:  # a consumer skips what it has read
                        check.record(record.offset, record.key)
            following = int(headers["x-next-offset"])
            if following != check.next:
                raise RuntimeError(f"HTTP raw: X-Next-Offset {following} after {check.next}")
            offset = following
    finally:
        conn.close()
    return check.finish(records)


def _zstd_bucket(cache: Path, records: int, segment_mib: int) -> BenchBucket:
    """The benchmark bucket's shape zstd-compressed: ~16 KiB batches of 200 B values, key
    ``KEY % offset``, encoded by the gateway's builder (:func:`make_segment`), cut into
    segments and tiered as :mod:`tests.bench.http_bucket` tiers its own."""
    where = cache.resolve() / f"zstd-r{records}-s{segment_mib}MiB-v1"
    root = where / "bucket"
    if not (where / "done").exists():
        shutil.rmtree(where, ignore_errors=True)
        folder = where / "segments" / f"{TOPIC}-0"
        folder.mkdir(parents=True)
        writer = SegmentWriter(base_offset=0)
        for batch in iter_batches(make_segment(records, Codec.ZSTD)):
            raw = bytes(batch.view)
            if writer.log and len(writer.log) + len(raw) > segment_mib * MiB:
                writer.write(folder)
                writer = writer.next_segment()
            writer.append(raw)
        writer.write(folder)
        root.mkdir()
        asyncio.run(http_bucket._tier(folder, root))
        shutil.rmtree(where / "segments")
        (where / "done").write_text("ok\n")
    logs = sorted(root.rglob("*.log"), key=lambda p: int(p.name.split("-", 1)[0]))
    size = sum(p.stat().st_size for p in logs)
    return BenchBucket(root, records, len(logs), size, tuple(logs))


def _ports(proc: subprocess.Popen[bytes]) -> tuple[str, int]:
    """(HTTP base URL, Kafka listener port) of a ``serve`` told to bind port 0 for both: the
    one of its two listening ports that answers HTTP is the HTTP one."""
    deadline = time.monotonic() + PORTS_TIMEOUT_S
    while time.monotonic() < deadline:
        ports = listening_ports(proc.pid)
        if len(ports) == 2:
            for port in ports:
                try:
                    httpx.get(f"http://{LOCALHOST}:{port}/readyz", timeout=2)
                except httpx.TransportError:  # the listener closes a frame of 1.2 GB
                    continue
                (other,) = set(ports) - {port}
                return f"http://{LOCALHOST}:{port}", other
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"serve did not listen on two ports within {PORTS_TIMEOUT_S} s")


def _rate(r: Read) -> str:
    return (
        f"{r.per_server_cpu_s / 1e6:5.2f} M rec/server-CPU-s ({r.server_cpu_s:5.2f} s), "
        f"client {r.per_client_cpu_s / 1e6:5.2f} M rec/CPU-s ({r.client_cpu_s:5.2f} s), "
        f"wall {r.records / r.wall_s / 1e6:5.2f} M rec/s"
    )


def run_bucket(label: str, bucket: BenchBucket, args: argparse.Namespace, work: Path) -> None:
    cache = max(2 * bucket.log_bytes, 256 * MiB)
    serve_args = ["--store", bucket.store_url, "--key-prefix", KEY_PREFIX,
                  "--kafka-listener", f"{LOCALHOST}:0", "--rescan-interval-s", "0",
                  "--chunk-cache-bytes", str(cache)]  # fmt: skip
    log = work / f"serve-{label}.log"
    proc, _ = start_serve(serve_args, log)
    try:
        url, port = _ports(proc)
        wait_ready(url, proc, log)
        warm_pass(url, TOPIC, bucket.records, 8 * MiB)
        idle0 = tree_cpu_s(proc.pid)
        time.sleep(IDLE_S)  # what the server spends doing nothing, charged to both sides
        idle = (tree_cpu_s(proc.pid) - idle0) / IDLE_S
        print(f"{label}: {bucket.records} records, {bucket.segments} segments, "
              f"{bucket.log_bytes / MiB:.0f} MiB of log; chunk cache {cache / MiB:.0f} MiB, "
              f"warm; server idle: {idle * 1e3:.1f} ms of CPU per s", flush=True)  # fmt: skip
        sides: dict[str, Callable[[], int]] = {
            "listener": lambda: read_listener(port, bucket.records, args.fetch_bytes),
            "HTTP raw": lambda: read_http_raw(url, bucket.records, args.fetch_bytes),
        }
        runs: dict[str, list[Read]] = {name: [] for name in sides}
        for i in range(args.rounds):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for name in order:
                r = _measured(proc.pid, sides[name])
                runs[name].append(r)
                print(f"  round {i + 1} {name:8}: {_rate(r)}", flush=True)
        _summary(runs)
    finally:
        stop(proc)


def _summary(runs: dict[str, list[Read]]) -> None:
    rates = {name: [r.per_server_cpu_s for r in rs] for name, rs in runs.items()}
    clients = {name: [r.per_client_cpu_s for r in rs] for name, rs in runs.items()}
    for name in runs:
        print(f"  {name:8}: records per server CPU-s best {max(rates[name]) / 1e6:.2f} M, "
              f"median {statistics.median(rates[name]) / 1e6:.2f} M; per client CPU-s best "
              f"{max(clients[name]) / 1e6:.2f} M, median "
              f"{statistics.median(clients[name]) / 1e6:.2f} M")  # fmt: skip
    a, b = rates["listener"], rates["HTTP raw"]
    paired = [x / y for x, y in zip(a, b, strict=True)]  # one round's two sides: same conditions
    print(f"  ratio listener / HTTP raw, per server CPU-s: best {max(a) / max(b):.2f}, "
          f"median {statistics.median(a) / statistics.median(b):.2f}, "
          f"median of the rounds' ratios {statistics.median(paired):.2f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_500_000, help="uncompressed bucket")
    ap.add_argument("--segment-mib", type=int, default=96, help="segment size")
    ap.add_argument("--zstd-records", type=int, default=1_500_000, help="zstd bucket (0: none)")
    ap.add_argument("--rounds", type=int, default=5, help="reads per side and bucket")
    ap.add_argument("--fetch-bytes", type=int, default=MiB, help="bytes asked per fetch")
    ap.add_argument("--cache", type=Path, default=Path("build/bench-http"), help="bucket cache")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores; confluent-kafka {confluent_kafka.version()[0]} "
          f"(librdkafka {confluent_kafka.libversion()[0]}); {args.fetch_bytes} bytes per fetch; "
          f"{args.rounds} rounds, alternating which side goes first", flush=True)  # fmt: skip
    buckets = [("uncompressed", bench_bucket(args.cache, args.records, args.segment_mib))]
    if args.zstd_records:
        buckets.append(("zstd", _zstd_bucket(args.cache, args.zstd_records, args.segment_mib)))
    with tempfile.TemporaryDirectory(prefix="bench-listener-") as tmp:
        for label, bucket in buckets:
            run_bucket(label, bucket, args, Path(tmp))


if __name__ == "__main__":
    main()
