"""Decode benchmark: a 100 000-record segment of 200-byte values, uncompressed and zstd, CRC
checked, against kafka-python's reader and aiokafka's C reader in the same run.

Every reader does the same work per batch: validate the CRC, decompress, materialise every
record object into a list. One core (this process, no threads). Best of N runs.

    python -m tests.bench.bench_decode [--records N] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable

from aiokafka.record._crecords.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords

from gateway.kafka import fast
from gateway.kafka.batch import iter_batches
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.codecs import Codec

BATCH_BYTES = 16 * 1024  # the Java producer's default batch.size


def make_segment(n: int, codec: Codec) -> bytes:
    rng = random.Random(42)
    out, offset, ts = [], 0, 1_700_000_000_000
    per_batch = BATCH_BYTES // 220
    while offset < n:
        count = min(per_batch, n - offset)
        recs = []
        for i in range(count):
            head = f'{{"id":{offset + i},"user":"user-{rng.randrange(1000)}","data":"'.encode()
            tail = rng.randbytes((200 - len(head) - 2) // 2).hex().encode()
            value = (head + tail + b'"}').ljust(200, b" ")
            recs.append(RecordInput(value, key=b"user-%d" % (offset + i), timestamp=ts + i))
        out.append(build_batch(offset, recs, codec=codec, partition_leader_epoch=0))
        offset += count
        ts += count
    return b"".join(out)


def ours(seg: bytes) -> int:
    n = 0
    for batch in iter_batches(seg):
        n += len(batch.records())
    return n


def ours_reference(seg: bytes) -> int:
    saved = fast._CBatch
    fast._CBatch = None
    try:
        return ours(seg)
    finally:
        fast._CBatch = saved


def aiokafka_c(seg: bytes) -> int:
    n = 0
    mr = AioMemoryRecords(seg)
    while (batch := mr.next_batch()) is not None:
        if not batch.validate_crc():
            raise RuntimeError("crc")
        n += len(list(batch))
    return n


def kafka_python(seg: bytes) -> int:
    n = 0
    mr = KafkaPythonMemoryRecords(seg)
    while (batch := mr.next_batch()) is not None:
        if not batch.validate_crc():
            raise RuntimeError("crc")
        n += len(list(batch))
    return n


def best_rate(fn: Callable[[bytes], int], seg: bytes, expected: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = fn(seg)
        dt = time.perf_counter() - t0
        if got != expected:
            raise RuntimeError(f"{fn.__name__} decoded {got} records, expected {expected}")
        best = min(best, dt)
    return expected / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}  records: {args.records}  value: 200 B  batch: ~16 KiB")
    print(f"fast path available: {fast.AVAILABLE}")
    for codec in (Codec.NONE, Codec.ZSTD):
        seg = make_segment(args.records, codec)
        rates = {
            "tiered-gateway": best_rate(ours, seg, args.records, args.repeat),
            "tiered-gateway (reference, pure Python)": best_rate(
                ours_reference, seg, args.records, max(1, args.repeat // 3)
            ),
            "aiokafka C reader": best_rate(aiokafka_c, seg, args.records, args.repeat),
            "kafka-python reader": best_rate(
                kafka_python, seg, args.records, max(1, args.repeat // 3)
            ),
        }
        print(f"\n{codec.label}: segment {len(seg) / 1e6:.1f} MB")
        for name, rate in rates.items():
            print(f"  {name:42s} {rate / 1e6:6.2f} M records/s")
        mine = rates["tiered-gateway"]
        print(f"  ratio vs aiokafka C:     {mine / rates['aiokafka C reader']:.2f}x")
        print(f"  ratio vs kafka-python:   {mine / rates['kafka-python reader']:.2f}x")


if __name__ == "__main__":
    main()
