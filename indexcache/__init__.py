"""The caching of remote indexes: what a read needs from a segment's indexes, held in memory.

:class:`RemoteIndexCache` is a byte-bounded, single-flight LRU of each remote segment's indexes
(:class:`SegmentIndexes`) in front of an injected loader, with an optional disk tier
(:class:`DiskTier`); :mod:`indexcache.validate` checks loaded indexes against the segment's
metadata before they are trusted. The index formats themselves (offset, time and transaction
indexes, leader-epoch checkpoint, producer snapshot) are Kafka's log formats and live in
:mod:`gateway.kafka`.
"""

from indexcache.cache import (
    DEFAULT_DISK_MAX_BYTES,
    DEFAULT_MAX_BYTES,
    CacheStats,
    RemoteIndexCache,
)
from indexcache.disk import DiskScan, DiskStats, DiskTier
from indexcache.segment import IndexLoader, SegmentIndexBytes, SegmentIndexes, SegmentKey

__all__ = [
    "DEFAULT_DISK_MAX_BYTES",
    "DEFAULT_MAX_BYTES",
    "CacheStats",
    "DiskScan",
    "DiskStats",
    "DiskTier",
    "IndexLoader",
    "RemoteIndexCache",
    "SegmentIndexBytes",
    "SegmentIndexes",
    "SegmentKey",
]
