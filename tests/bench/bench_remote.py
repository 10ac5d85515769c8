"""Remote read benchmark: GETs and bytes to read a 64 MiB segment (whole, and random 1 MiB
ranges) with our coalescing reader against the plugin's one-GET-per-chunk strategy computed on
the same manifest; and chunk decode throughput (zstd + AES-GCM) against raw zstandard.

The store is the local filesystem (moto reads whole objects per ranged GET; never time it).

    python -m tests.bench.bench_remote [--mib 64] [--ranges 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import zstandard
from Crypto.PublicKey import RSA

from gateway.deadline import Deadline
from gateway.kafka.builder import RecordInput, build_batch
from gateway.remote.keyring import KeyRing
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.remote.tiering import (
    LocalSegment,
    TieringOptions,
    build_segment_objects,
    segment_metadata,
    upload_segment,
)
from gateway.remote.transforms import detransform_chunk
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.retry import Retrier

CHUNK = 4 * 1024 * 1024
ASK = 1024 * 1024


def make_log(mib: int) -> bytes:
    rng = random.Random(7)
    out, offset, size = [], 0, 0
    while size < mib * 1024 * 1024:
        recs = [
            RecordInput(
                (f'{{"id":{offset + i},"user":"u{rng.randrange(999)}","d":"'.encode()
                 + rng.randbytes(60).hex().encode() + b'"}').ljust(200),
                key=b"user-%d" % (offset + i),
                timestamp=1_700_000_000_000 + offset + i,
            )
            for i in range(74)
        ]  # fmt: skip
        batch = build_batch(offset, recs, partition_leader_epoch=0)
        out.append(batch)
        size += len(batch)
        offset += 74
    return b"".join(out)


def plugin_cost(remote: RemoteSegment, start: int, end: int) -> tuple[int, int]:
    chunks = remote.manifest.chunk_index.chunks_for_range(start, end)
    return len(chunks), sum(c.transformed_size for c in chunks)


async def run(mib: int, n_ranges: int) -> None:
    log = make_log(mib)
    segment = LocalSegment(0, log, b"", b"", b"", b"0\n1\n0 0\n", None)
    meta = segment_metadata(segment, topic="bench", topic_id=uuid.uuid4(), partition=0)
    tmp = Path(tempfile.mkdtemp())
    pem = tmp / "k.pem"
    pem.write_bytes(RSA.generate(2048).export_key(format="PEM", pkcs=8))
    keys = KeyRing.from_specs([f"k={pem}"])
    store = FilesystemStore(tmp / "bucket")
    rng = random.Random(3)
    ranges = [(s, s + ASK) for s in (rng.randrange(0, len(log) - ASK) for _ in range(n_ranges))]
    print(f"cores: {os.cpu_count()}  segment: {len(log) / 2**20:.1f} MiB  chunk: 4 MiB")
    print(f"{'layout':24s} {'max GET':>8s} | {'whole: GETs ours/plugin':>24s} | "
          f"{'1 MiB ranges: GETs/range ours, plugin':>38s} | amplification ours, plugin"
          )  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        for label, options in [
            ("plain", TieringOptions(chunk_size=CHUNK)),
            ("zstd", TieringOptions(chunk_size=CHUNK, compression=True)),
            ("encrypted", TieringOptions(chunk_size=CHUNK, encrypt_with="k")),
            (
                "zstd+encrypted",
                TieringOptions(chunk_size=CHUNK, compression=True, encrypt_with="k"),
            ),
        ]:
            objects = build_segment_objects(
                segment, meta, key_prefix="", options=options, keys=keys
            )
            await upload_segment(store, objects)
            remote = RemoteSegment.open(objects.key, objects.manifest, keys)
            for max_get in (8 << 20, 16 << 20):
                whole = SegmentReader(store, Retrier(), pool, max_get_bytes=max_get)
                assert await whole.read_range(remote, 0, remote.size, Deadline.after(60)) == log
                p_gets, _ = plugin_cost(remote, 0, remote.size)
                rr = SegmentReader(store, Retrier(), pool, max_get_bytes=max_get)
                p_gets_r = p_bytes_r = 0
                for s, e in ranges:
                    assert await rr.read_range(remote, s, e, Deadline.after(60)) == log[s:e]
                    g, b = plugin_cost(remote, s, e)
                    p_gets_r, p_bytes_r = p_gets_r + g, p_bytes_r + b
                asked = ASK * len(ranges)
                print(
                    f"{label:24s} {max_get >> 20:>6d}Mi | {whole.counters.gets:>10d} / {p_gets:<4d}"
                    f" ({p_gets / whole.counters.gets:.1f}x fewer) | "
                    f"{rr.counters.gets / len(ranges):>16.2f}, {p_gets_r / len(ranges):<8.2f}"
                    f"           | {rr.counters.bytes_fetched / asked:.2f}, {p_bytes_r / asked:.2f}"
                )
            # decode throughput on this layout's stored chunks vs raw zstandard
            if options.compression:
                chunks = remote.manifest.chunk_index.chunks()
                stored = [objects.log[c.transformed_position : c.transformed_end] for c in chunks]
                t0 = time.perf_counter()
                for c, data in zip(chunks, stored, strict=True):
                    detransform_chunk(data, c.original_size, remote.transform)
                ours = len(log) / (time.perf_counter() - t0) / 1e6
                frames = [zstandard.ZstdCompressor(level=3).compress(log[i : i + CHUNK])
                          for i in range(0, len(log), CHUNK)]  # fmt: skip
                d = zstandard.ZstdDecompressor()
                t0 = time.perf_counter()
                for f in frames:
                    d.decompress(f)
                raw = len(log) / (time.perf_counter() - t0) / 1e6
                print(f"{'':24s} decode {label}: {ours:.0f} MB/s; raw zstandard: {raw:.0f} MB/s "
                      f"({ours / raw:.2f}x)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--ranges", type=int, default=200)
    args = ap.parse_args()
    asyncio.run(run(args.mib, args.ranges))


if __name__ == "__main__":
    main()
