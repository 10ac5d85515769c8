"""A real Kafka broker serving tiered history against the gateway's Kafka listener serving the
same bucket, to the same librdkafka consumer (issue: cold backfill and warm reads).

The bucket (:mod:`tests.bench.broker_bucket`): ``--mib`` of ~1 KB records in 8 partitions,
tiered by a real Kafka 4.1.1 broker with the real Aiven plugin (16 MiB segments, 4 MiB chunks,
uncompressed, unencrypted), cached under ``--cache``. Both servers read the very same objects
through :mod:`tests.bench.slow_s3` (20 ms to the first byte, 100 MiB/s per GET):

* **gateway**: ``tiered-gateway serve --store s3://... --kafka-listener 127.0.0.1:PORT`` at its
  defaults (workers = cores, 256 MiB chunk cache, 1 MiB readahead). Cold: a fresh process.
  Warm: a second process whose chunk cache holds the whole bucket in each worker (the cache is
  divided among the workers and a connection lands on either; its first pass is also reported
  as a cold pass with a bucket-sized cache), then passes until ``--rounds`` of them read
  nothing from the stand-in (only those count as warm).
* **broker**: :mod:`tests.bench.broker_kafka` (a memory chunk cache of the same size and
  prefetch as the gateway's, the plugin having none by default). Warm: the records still in
  its local log (page cache). Cold: local segments deleted, a restarted JVM, all through the
  plugin.

Each pass: a ``Consumer`` assigns all 8 partitions at offset 0 and reads to the tiered end
(:func:`tests.bench.broker_sides.read_all`: offsets contiguous, per-partition counts and
checksums equal to what was produced). Server CPU: utime + stime of the broker's JVM or of the
``serve`` process tree (``/proc``); client CPU: this process's.

    python -m tests.bench.bench_broker [--gb 1 | --mib 128] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import time
from pathlib import Path

import confluent_kafka

from tests.bench.broker_bucket import (
    CHUNK_BYTES,
    PARTITIONS,
    PLUGIN_DEFAULT,
    PLUGIN_ENV,
    SEGMENT_BYTES,
    Built,
    built_bucket,
    plugin_dir,
)
from tests.bench.broker_kafka import run_broker
from tests.bench.broker_sides import (
    FIRST_BYTE_MS,
    MIB_PER_S,
    Gateway,
    MiB,
    Pass,
    SlowS3,
    idle_cpu_ms_per_s,
    measured,
    read_all,
)

WARM_UP_MAX = 8


def run_gateway(built: Built, work: Path, s3: SlowS3, rounds: int, cold_args: list[str]
                ) -> tuple[Pass, Pass, Pass, list[Pass], list[str]]:  # fmt: skip
    """The cold pass and a second pass at the defaults; the warm passes with a cache holding
    the bucket in every worker; a note."""
    gw = Gateway(s3, work / "serve-cold.log", *cold_args)
    try:
        took = gw.wait_ready(built)
        print(f"  gateway ready (bucket scanned) in {took:.1f} s", flush=True)

        def read() -> int:
            return read_all(gw.bootstrap, built, "gateway")

        idle = idle_cpu_ms_per_s(gw.proc.pid)
        label = "cold (defaults)" if not cold_args else "cold (defaults + flags)"
        cold = measured("gateway", label, gw.proc.pid, s3, built, read)
        counters = gw.remote_counters()
        again = measured("gateway", "2nd pass (defaults)", gw.proc.pid, s3, built, read)
    finally:
        gw.close()
    workers = os.cpu_count() or 1
    # per worker (the budget is divided among them; a connection lands on either) twice the
    # bucket: 3/4 of a worker's share keeps verified runs (gateway/service/open.py
    # VERIFIED_SHARE), and an LRU smaller than a sequential scan keeps nothing of it
    cache = workers * (2 * built.log_bytes + 128 * MiB)
    gw = Gateway(s3, work / "serve-warm.log", "--chunk-cache-bytes", str(cache))
    try:
        gw.wait_ready(built)
        big = measured("gateway", "cold (bucket-sized cache)", gw.proc.pid, s3, built, read)
        warm: list[Pass] = []
        skipped = 0
        for i in range(rounds + WARM_UP_MAX):  # a pass landing on a worker not yet warm: again
            p = measured("gateway", f"warm {i + 1} (chunk cache)", gw.proc.pid, s3, built, read)
            if p.s3_gets == 0:
                warm.append(p)
            else:
                skipped += 1
            if len(warm) == rounds:
                break
        if not warm:
            raise RuntimeError(f"no gateway pass without GETs in {rounds + WARM_UP_MAX}")
    finally:
        gw.close()
    seen = "; ".join(
        f"{who}: {c.get('remote_gets_total', 0):.0f} GETs, "
        f"{c.get('remote_get_hedges_total', 0):.0f} hedges, "
        f"{c.get('remote_bytes_fetched_total', 0) / MiB:.0f} MiB fetched; chunk cache "
        f"{c.get('chunk_cache_hits_total', 0):.0f} hits, "
        f"{c.get('chunk_cache_misses_total', 0):.0f} misses, "
        f"{c.get('chunk_cache_evictions_total', 0):.0f} evictions, "
        f"{c.get('chunk_cache_readahead_chunks_total', 0):.0f} read ahead"
        for who, c in sorted(counters.items())
    )
    notes = [f"gateway idle before the cold pass: {idle:.0f} ms CPU per s; after the cold pass, "
             f"/metrics per worker: {seen}"]  # fmt: skip
    note = (f"gateway warm: --chunk-cache-bytes {cache} ({cache // MiB} MiB for {workers} "
            f"workers); passes that still read from the stand-in (a worker not warm yet; not "
            f"counted): {skipped}")  # fmt: skip
    return cold, again, big, warm, [*notes, note]


def _median(passes: list[Pass], key: str) -> float:
    return statistics.median(float(getattr(p, key)) for p in passes)


def table(built: Built, broker_cold: Pass, broker_warm: list[Pass], gw_cold: Pass,
          gw_again: Pass, gw_big: Pass, gw_warm: list[Pass], notes: list[str],
          load: tuple[str, str], args: argparse.Namespace) -> str:  # fmt: skip
    gb = built.log_bytes / 1e9
    bw_rate = [p.per_server_cpu_s for p in broker_warm]
    gw_rate = [p.per_server_cpu_s for p in gw_warm]
    rows = [
        ("cold: wall s", f"{broker_cold.wall_s:.2f}", f"{gw_cold.wall_s:.2f}",
         f"broker/gateway **{broker_cold.wall_s / gw_cold.wall_s:.2f}x** (goal ≥ 3)"),
        ("cold: wall s per GB", f"{broker_cold.wall_s / gb:.2f}", f"{gw_cold.wall_s / gb:.2f}", ""),
        ("cold: server CPU-s per GB", f"{broker_cold.server_cpu_s / gb:.2f}",
         f"{gw_cold.server_cpu_s / gb:.2f}",
         f"broker/gateway {broker_cold.server_cpu_s / gw_cold.server_cpu_s:.2f}x"),
        ("cold: client CPU-s per GB", f"{broker_cold.client_cpu_s / gb:.2f}",
         f"{gw_cold.client_cpu_s / gb:.2f}", ""),
        ("cold: stand-in GETs / MiB sent", f"{broker_cold.s3_gets} / {broker_cold.s3_bytes // MiB}",
         f"{gw_cold.s3_gets} / {gw_cold.s3_bytes // MiB}", ""),
        ("gateway 2nd pass at defaults: wall s, server CPU-s/GB, GETs / MiB", "",
         f"{gw_again.wall_s:.2f}, {gw_again.server_cpu_s / gb:.2f}, "
         f"{gw_again.s3_gets} / {gw_again.s3_bytes // MiB}", ""),
        ("cold, gateway with a bucket-sized chunk cache: wall s, server CPU-s/GB, GETs / MiB",
         "", f"{gw_big.wall_s:.2f}, {gw_big.server_cpu_s / gb:.2f}, "
         f"{gw_big.s3_gets} / {gw_big.s3_bytes // MiB}",
         f"broker/gateway wall {broker_cold.wall_s / gw_big.wall_s:.2f}x"),
        ("warm: records per server CPU-s (median)", f"{statistics.median(bw_rate):,.0f}",
         f"{statistics.median(gw_rate):,.0f}",
         f"gateway/broker **{statistics.median(gw_rate) / statistics.median(bw_rate):.2f}x** "
         f"(goal ≥ 0.5)"),
        ("warm: records per server CPU-s (best)", f"{max(bw_rate):,.0f}", f"{max(gw_rate):,.0f}",
         f"gateway/broker {max(gw_rate) / max(bw_rate):.2f}x"),
        ("warm: server CPU-s per GB (median)",
         f"{_median(broker_warm, 'server_cpu_s') / gb:.2f}",
         f"{_median(gw_warm, 'server_cpu_s') / gb:.2f}", ""),
        ("warm: wall s (median)", f"{_median(broker_warm, 'wall_s'):.2f}",
         f"{_median(gw_warm, 'wall_s'):.2f}", ""),
        ("warm: client CPU-s per GB (median)",
         f"{_median(broker_warm, 'client_cpu_s') / gb:.2f}",
         f"{_median(gw_warm, 'client_cpu_s') / gb:.2f}", ""),
    ]  # fmt: skip
    lines = [
        "# Broker vs gateway Kafka listener: tiered backfill to one librdkafka consumer",
        "",
        f"- {built.records:,} records ({built.log_bytes / MiB:.0f} MiB of log, "
        f"{gb:.3f} GB) in {PARTITIONS} partitions; {SEGMENT_BYTES // MiB} MiB segments, "
        f"{CHUNK_BYTES // MiB} MiB chunks, uncompressed; tiered by Kafka 4.1.1 with the Aiven "
        f"plugin ({plugin_dir()})",
        f"- S3 stand-in (tests/bench/slow_s3.py): {FIRST_BYTE_MS:g} ms first byte, "
        f"{MIB_PER_S:g} MiB/s per GET; the same objects for both",
        f"- cores: {os.cpu_count()}; load average before {load[0]}, after {load[1]}; "
        f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka "
        f"{confluent_kafka.libversion()[0]}); warm rounds: {args.rounds}",
        f"- broker plugin read cache: MemoryChunkCache {args.broker_chunk_cache_mib} MiB, "
        f"prefetch {args.broker_prefetch_mib} MiB; broker heap {args.broker_heap}; gateway cold "
        f"pass flags beyond its defaults: {args.gateway_cold_args or 'none'}",
        "",
        "| figure | broker | gateway | ratio |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        "",
        *(f"- {n}" for n in notes),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--gb", type=float, help="tiered history in GiB (default 1)")
    size.add_argument("--mib", type=int, help="tiered history in MiB")
    ap.add_argument("--rounds", type=int, default=3, help="measured warm passes per side")
    ap.add_argument("--out", type=Path, default=Path("build/bench-broker/result.md"))
    ap.add_argument("--cache", type=Path, default=Path("build/bench-broker"), help="builds")
    ap.add_argument("--broker-chunk-cache-mib", type=int, default=256, help="0: none")
    ap.add_argument("--broker-prefetch-mib", type=int, default=8)
    ap.add_argument("--broker-heap", default="2g")
    ap.add_argument(
        "--gateway-cold-args",
        default="",
        help="more serve flags for the cold pass (default: none, its defaults)",
    )
    ap.add_argument(
        "--broker-no-restart",
        action="store_true",
        help="the broker's cold pass in the JVM of its warm passes (JIT warm)",
    )
    ap.add_argument("--skip", choices=["broker", "gateway"], help="debugging: one side only")
    args = ap.parse_args()
    if plugin_dir() is None:  # the plugin is not on Maven Central: built by hand, or skipped
        print(
            f"bench_broker: skipped, no Aiven plugin (set {PLUGIN_ENV} to the folder of its "
            f"jars, or put them in {PLUGIN_DEFAULT})",
            flush=True,
        )
        return
    mib = args.mib if args.mib else int((args.gb or 1.0) * 1024)
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} cores, load {load0}; {mib} MiB of tiered history", flush=True)
    built = built_bucket(args.cache, mib)
    print(f"bucket {built.where.name}: {built.records} records, {built.log_bytes / MiB:.0f} MiB",
          flush=True)  # fmt: skip
    from tests.bench.broker_bucket import BenchBroker  # noqa: PLC0415

    BenchBroker.heap = args.broker_heap
    notes: list[str] = []
    work = args.cache / "work"  # logs of the last run, kept
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    s3 = SlowS3(built.bucket, work / "slow_s3.log")
    try:
        if args.skip != "gateway":
            gw_cold, gw_again, gw_big, gw_warm, more = run_gateway(
                built, work, s3, args.rounds, shlex.split(args.gateway_cold_args)
            )
            notes += more
        if args.skip != "broker":
            br_warm, br_cold, note = run_broker(
                built, work, s3, args.rounds, args.broker_chunk_cache_mib * MiB,
                args.broker_prefetch_mib * MiB, restart=not args.broker_no_restart,
            )  # fmt: skip
            notes.append(note)
    finally:
        s3.close()
    if args.skip:
        return
    notes.append(
        "broker warm: the records read from its local log (the build kept every tiered segment "
        "local too: local.retention.ms -2), after one unmeasured pass; cold comes after, once "
        "local.retention.bytes 1 deleted them (then a restart unless --broker-no-restart)"
    )
    notes.append("identical records on both sides: per partition count, contiguous offsets "
                 "and a checksum of (offset, key, value) equal to what was produced")  # fmt: skip
    load1 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = table(built, br_cold, br_warm, gw_cold, gw_again, gw_big, gw_warm, notes,
                 (load0, load1), args)  # fmt: skip
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out} at {time.strftime('%H:%M:%S')}")


if __name__ == "__main__":
    main()
