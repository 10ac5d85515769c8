"""Kafka tiered-storage index formats and lookups.

Readers and encoders for the files a KIP-405 remote segment carries next to its ``.log``: the
offset index, time index and transaction index, the leader-epoch checkpoint (with the
``LeaderEpochFileCache`` rules) and the producer snapshot. Pure code: no I/O, buffers in,
values out; corrupt input raises :class:`gateway.errors.CorruptIndexError` or
:class:`gateway.errors.CorruptCheckpointError`.

On top of them, :class:`RemoteIndexCache`: a byte-bounded, single-flight LRU of each remote
segment's indexes (:class:`SegmentIndexes`) in front of an injected loader, with an optional
disk tier (:class:`DiskTier`).
"""

from indexcache.cache import (
    DEFAULT_DISK_MAX_BYTES,
    DEFAULT_MAX_BYTES,
    CacheStats,
    RemoteIndexCache,
)
from indexcache.disk import DiskScan, DiskStats, DiskTier
from indexcache.epoch import (
    EpochEntry,
    LeaderEpochCache,
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
)
from indexcache.offset_index import OffsetIndex, OffsetPosition, encode_offset_index
from indexcache.producer_snapshot import (
    ProducerSnapshotEntry,
    encode_producer_snapshot,
    parse_producer_snapshot,
)
from indexcache.segment import IndexLoader, SegmentIndexBytes, SegmentIndexes, SegmentKey
from indexcache.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset, encode_time_index
from indexcache.txn_index import (
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
    encode_txn_index,
)

__all__ = [
    "DEFAULT_DISK_MAX_BYTES",
    "DEFAULT_MAX_BYTES",
    "NO_TIMESTAMP",
    "AbortedTxn",
    "CacheStats",
    "DiskScan",
    "DiskStats",
    "DiskTier",
    "EpochEntry",
    "IndexLoader",
    "LeaderEpochCache",
    "OffsetIndex",
    "OffsetPosition",
    "ProducerSnapshotEntry",
    "RemoteIndexCache",
    "SegmentIndexBytes",
    "SegmentIndexes",
    "SegmentKey",
    "TimeIndex",
    "TimestampOffset",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "encode_offset_index",
    "encode_producer_snapshot",
    "encode_time_index",
    "encode_txn_index",
    "format_leader_epoch_checkpoint",
    "parse_leader_epoch_checkpoint",
    "parse_producer_snapshot",
]
