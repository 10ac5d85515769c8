"""The core's counters as a Prometheus collector: remote GETs, bytes, retries, caches, scans.

:class:`CoreCollector` holds the components (not the service) and reads the counters they
already keep at scrape time: no global registry, one service per process or per test alike.
It emits no ``_created`` series. The HTTP layer registers it beside its own request metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.cache.segments import SegmentSource
from gateway.cache.shared_runs import SharedRunArena
from gateway.metadata.follow import FollowStatus, MetadataFollower
from gateway.metadata.scan import BucketScanner
from gateway.remote.reader import LATENCY_BUCKETS, ReadCounters
from gateway.service.admission import ByteBudget, RequestGate
from gateway.storage.retry import RetryCounters

PREFIX = "tiered_gateway_"
_RETRY_FIELDS = ("attempts", "retries", "timeouts", "deadline_exceeded", "failures")
_CHUNK_FIELDS = (
    "hits",
    "misses",
    "loads",
    "load_failures",
    "evictions",
    "readahead_chunks",
    "readahead_wasted",
)
_DISK_FIELDS = ("hits", "misses", "evictions", "corrupt_removed", "write_failures")
_SHARED_FIELDS = ("hits", "misses", "torn", "published", "bytes_published", "dropped")
_INDEX_FIELDS = ("hits", "misses", "loads", "load_failures", "disk_hits", "evictions")


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=value)


def _fields(prefix: str, what: str, stats: object, fields: tuple[str, ...]) -> Iterator[Metric]:
    for field in fields:
        doc = f"{what} {field.replace('_', ' ')}"
        yield _counter(f"{prefix}_{field}_total", doc, getattr(stats, field))


@dataclass(frozen=True, slots=True)
class CoreCollector(Collector):
    """The counters of one service's components, read at each scrape."""

    reads: ReadCounters
    retries: RetryCounters
    source: SegmentSource
    scanner: BucketScanner
    ready: Callable[[], bool]
    follower: MetadataFollower | None = None

    def collect(self) -> Iterator[Metric]:
        yield from self._reads()
        yield from _fields("store", "Store operation", self.retries, _RETRY_FIELDS)
        yield from self._caches()
        yield _gauge("ready", "1 once the catalog is loaded", int(self.ready()))
        yield from self._scans()
        if self.follower is not None:
            yield from _follow(self.follower.status)

    def _reads(self) -> Iterator[Metric]:
        reads = self.reads
        # ReadCounters' buckets are already cumulative: each counts the GETs at or under it.
        buckets: list[tuple[str, float]] = [
            (str(bound), count)
            for bound, count in zip(LATENCY_BUCKETS, reads.get_latency_buckets, strict=True)
        ]
        buckets.append(("+Inf", reads.gets))
        yield HistogramMetricFamily(
            PREFIX + "remote_get_seconds",
            "Latency of ranged GETs to the store",
            buckets=buckets,
            sum_value=reads.get_seconds_total,
        )
        yield _counter("remote_gets", "GETs to the store", reads.gets)
        yield _counter(
            "remote_bytes_fetched", "Bytes downloaded from the store", reads.bytes_fetched
        )
        yield _counter(
            "remote_bytes_returned",
            "Original segment bytes produced from downloads",
            reads.bytes_returned,
        )
        returned = reads.bytes_returned
        yield _gauge(
            "download_amplification",
            "Bytes fetched / bytes returned since start",
            reads.bytes_fetched / returned if returned else 0.0,
        )
        yield _counter("chunks_decoded", "Chunks decrypted and decompressed", reads.chunks_decoded)
        yield _counter(
            "remote_get_hedges", "Ranged GETs sent again because the first straggled", reads.hedges
        )
        yield _counter(
            "remote_get_hedge_wins", "Hedged GETs answered before the first", reads.hedge_wins
        )

    def _caches(self) -> Iterator[Metric]:
        source = self.source
        chunk = source.chunks.stats()
        yield from _fields("chunk_cache", "Decoded-chunk cache", chunk, _CHUNK_FIELDS)
        yield _gauge("chunk_cache_bytes", "Bytes held", chunk.bytes_held)
        disk = source.chunks.disk
        if disk is not None:
            held = disk.stats()
            yield from _fields("chunk_disk", "Decoded-chunk disk tier", held, _DISK_FIELDS)
            yield _gauge("chunk_disk_bytes", "Bytes on disk", held.bytes)
        shared = source.runs.shared
        if isinstance(shared, SharedRunArena):  # serve --workers N
            what = "Verified runs shared by the workers:"
            arena = shared.stats()
            yield from _fields("shared_runs", what, arena, _SHARED_FIELDS)
            yield _gauge("shared_runs_max_bytes", "Bytes of the shared run arena", arena.max_bytes)
            yield _gauge("shared_runs_pending", "Runs waiting to be published", arena.pending)
        index = source.indexes_cache.stats()
        yield from _fields("index_cache", "Index cache", index, _INDEX_FIELDS)
        yield _gauge("index_cache_bytes", "Bytes held", index.bytes_held)
        yield _counter("manifest_cache_hits", "Manifest cache hits", source.manifest_hits)
        yield _counter("manifest_cache_misses", "Manifest cache misses", source.manifest_misses)

    def _scans(self) -> Iterator[Metric]:
        """Bucket scans done and aborted by store faults, and the manifests that cannot be
        read (a gauge per topic and partition; no sample when there are none)."""
        counters = self.scanner.counters
        yield _counter("bucket_scans", "Bucket scans that completed", counters.scans)
        yield _counter(
            "rescans_aborted",
            "Bucket scans aborted by a store fault (listing or read failed; catalog left as "
            "it was)",
            counters.aborted,
        )
        unreadable = GaugeMetricFamily(
            PREFIX + "unreadable_manifests",
            "Listed .rsm-manifest objects that cannot be read, per partition",
            labels=["topic", "partition"],
        )
        per_partition = Counter((tp.topic, tp.partition) for tp, _ in self.scanner.unreadable_all())
        for (topic, partition), count in sorted(per_partition.items()):
            unreadable.add_metric([topic, str(partition)], count)
        yield unreadable


def _follow(status: FollowStatus) -> Iterator[Metric]:
    """The followed ``__remote_log_metadata``: lag, records, errors, state."""
    yield _gauge("metadata_follow_lag", "Metadata records not applied yet", status.lag)
    yield _counter("metadata_follow_records", "Metadata records read", status.records)
    yield _counter(
        "metadata_follow_dropped",
        "Metadata records dropped as Kafka drops them (invalid transition, unknown segment)",
        status.dropped,
    )
    yield _counter(
        "metadata_follow_errors", "Consumer errors (each retried on a new consumer)", status.errors
    )
    yield _gauge("metadata_follow_connected", "1 while the consumer is connected", status.connected)
    yield _gauge(
        "metadata_follow_caught_up",
        "1 once the end offsets seen at start were reached",
        status.caught_up,
    )
    yield _gauge(
        "metadata_follow_failed_partitions",
        "Metadata partitions stopped by a record that does not decode",
        len(status.failed),
    )


@dataclass(frozen=True, slots=True)
class AdmissionCollector(Collector):
    """Admission (:mod:`gateway.service.admission`) as the worker answering the scrape sees
    it: the byte budget, the gate of pages, the event loop's lag; what was shed and why."""

    budget: ByteBudget
    gate: RequestGate

    def collect(self) -> Iterator[Metric]:
        budget, gate = self.budget, self.gate
        yield _gauge("inflight_bytes", "Response bytes reserved now", budget.in_use)
        yield _gauge(
            "inflight_bytes_limit", "This worker's share of inflight_bytes", budget.capacity
        )
        yield _gauge("inflight_waiting", "Requests waiting for response bytes", budget.waiting)
        stats = budget.stats
        yield _counter("inflight_admitted", "Requests given their bytes at once", stats.admitted)
        yield _counter("inflight_waited", "Requests given their bytes after waiting", stats.waited)
        yield _counter("inflight_refused", "Requests refused (503 overloaded)", stats.refused)
        yield _gauge("pages_active", "JSON/NDJSON pages decoded and written now", gate.running)
        yield _gauge("pages_active_limit", "This worker's share of max_active_pages", gate.active)
        yield _gauge("pages_waiting", "Pages waiting for their turn", gate.waiting)
        turns = gate.stats
        yield _counter("pages_admitted", "Page turns given at once", turns.admitted)
        yield _counter("pages_waited", "Page turns given after waiting", turns.waited)
        yield _counter(
            "pages_refused", "Requests refused by the gate (503 overloaded)", turns.refused
        )
        yield _counter(
            "pages_refused_late",
            "Of those, refused because the event loop ran late",
            turns.refused_late,
        )
        yield _gauge("event_loop_lag_seconds", "How late the event loop stays", gate.lag.lag_s)
