"""Prometheus text exposition of the core's counters (remote GETs, bytes, retries, caches).

Rendered from the counters the components already keep, at scrape time: no registry, no
global state, one service per process or per test alike. The HTTP layer appends its own
request histograms.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from gateway.remote.reader import LATENCY_BUCKETS

if TYPE_CHECKING:
    from gateway.metadata.scan import BucketScanner
    from gateway.service.core import GatewayService


def _metric(lines: list[str], name: str, kind: str, help_text: str, value: float) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines.append(f"{name} {value}")


def render_metrics(service: GatewayService) -> bytes:
    lines: list[str] = []
    reads = service.reader.counters
    m = "tiered_gateway_remote_get_seconds"
    lines += [f"# HELP {m} Latency of ranged GETs to the store", f"# TYPE {m} histogram"]
    # ReadCounters' buckets are already cumulative: each counts the GETs at or under its bound.
    for bound, count in zip(LATENCY_BUCKETS, reads.get_latency_buckets, strict=True):
        lines.append(f'{m}_bucket{{le="{bound}"}} {count}')
    lines.append(f'{m}_bucket{{le="+Inf"}} {reads.gets}')
    lines.append(f"{m}_sum {reads.get_seconds_total}")
    lines.append(f"{m}_count {reads.gets}")
    _metric(lines, "tiered_gateway_remote_gets_total", "counter", "GETs to the store", reads.gets)
    _metric(
        lines,
        "tiered_gateway_remote_bytes_fetched_total",
        "counter",
        "Bytes downloaded from the store",
        reads.bytes_fetched,
    )
    _metric(
        lines,
        "tiered_gateway_remote_bytes_returned_total",
        "counter",
        "Original segment bytes produced from downloads",
        reads.bytes_returned,
    )
    amplification = reads.bytes_fetched / reads.bytes_returned if reads.bytes_returned else 0.0
    _metric(
        lines,
        "tiered_gateway_download_amplification",
        "gauge",
        "Bytes fetched / bytes returned since start",
        amplification,
    )
    _metric(
        lines,
        "tiered_gateway_chunks_decoded_total",
        "counter",
        "Chunks decrypted and decompressed",
        reads.chunks_decoded,
    )
    retries = service.retrier.counters
    for field in ("attempts", "retries", "timeouts", "deadline_exceeded", "failures"):
        _metric(
            lines,
            f"tiered_gateway_store_{field}_total",
            "counter",
            f"Store operation {field.replace('_', ' ')}",
            getattr(retries, field),
        )
    chunk = service.source.chunks.stats()
    for field in ("hits", "misses", "loads", "load_failures", "evictions", "readahead_chunks"):
        _metric(
            lines,
            f"tiered_gateway_chunk_cache_{field}_total",
            "counter",
            f"Decoded-chunk cache {field.replace('_', ' ')}",
            getattr(chunk, field),
        )
    _metric(lines, "tiered_gateway_chunk_cache_bytes", "gauge", "Bytes held", chunk.bytes_held)
    disk = service.source.chunks.disk
    if disk is not None:
        held = disk.stats()
        for field in ("hits", "misses", "evictions", "corrupt_removed", "write_failures"):
            _metric(
                lines,
                f"tiered_gateway_chunk_disk_{field}_total",
                "counter",
                f"Decoded-chunk disk tier {field.replace('_', ' ')}",
                getattr(held, field),
            )
        _metric(lines, "tiered_gateway_chunk_disk_bytes", "gauge", "Bytes on disk", held.bytes)
    index = service.source.indexes_cache.stats()
    for field in ("hits", "misses", "loads", "load_failures", "disk_hits", "evictions"):
        _metric(
            lines,
            f"tiered_gateway_index_cache_{field}_total",
            "counter",
            f"Index cache {field.replace('_', ' ')}",
            getattr(index, field),
        )
    _metric(lines, "tiered_gateway_index_cache_bytes", "gauge", "Bytes held", index.bytes_held)
    source = service.source
    _metric(
        lines,
        "tiered_gateway_manifest_cache_hits_total",
        "counter",
        "Manifest cache hits",
        source.manifest_hits,
    )
    _metric(
        lines,
        "tiered_gateway_manifest_cache_misses_total",
        "counter",
        "Manifest cache misses",
        source.manifest_misses,
    )
    _metric(
        lines,
        "tiered_gateway_ready",
        "gauge",
        "1 once the catalog is loaded",
        int(service.ready()),
    )
    scanner = service.scanner
    if scanner is not None:
        _scan_metrics(lines, scanner)
    return ("\n".join(lines) + "\n").encode()


def _scan_metrics(lines: list[str], scanner: BucketScanner) -> None:
    """Bucket scans: passes done and aborted by store faults, and the manifests that cannot be
    read (a gauge per topic and partition; no sample when there are none)."""
    _metric(
        lines,
        "tiered_gateway_bucket_scans_total",
        "counter",
        "Bucket scans that completed",
        scanner.counters.scans,
    )
    _metric(
        lines,
        "tiered_gateway_rescans_aborted_total",
        "counter",
        "Bucket scans aborted by a store fault (listing or read failed; catalog left as it was)",
        scanner.counters.aborted,
    )
    m = "tiered_gateway_unreadable_manifests"
    lines.append(f"# HELP {m} Listed .rsm-manifest objects that cannot be read, per partition")
    lines.append(f"# TYPE {m} gauge")
    per_partition = Counter((tp.topic, tp.partition) for tp, _ in scanner.unreadable_all())
    for (topic, partition), count in sorted(per_partition.items()):
        lines.append(f'{m}{{topic="{topic}",partition="{partition}"}} {count}')
