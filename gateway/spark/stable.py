"""The remote tier's last stable offset: where read_committed may read up to.

A broker serves read_committed consumers up to its last stable offset (LSO): the first offset
of the oldest transaction still open. The remote tier has the same notion at its end. The
producer snapshot uploaded with a segment (the ``producerSnapshot`` piece of its ``.indexes``
object, ``kafka-formats.md``) is the producer state after the segment's last offset; each
entry's ``currentTxnFirstOffset`` is the first offset of that producer's open transaction
(-1: none). So the remote LSO is the smallest of them in the snapshot of the segment holding
the remote end, or the remote end when none is open.

A read to "latest" with read_committed (batch or streaming) stops there instead of failing
on a transaction whose marker is not tiered yet. The snapshot only moves the end: the records
up to it are still proven against their markers on the executors
(:mod:`gateway.spark.read`), so a wrong snapshot can fail a read, never change its records.
A snapshot that cannot be trusted (bad CRC, offsets outside the segment) is a typed error;
a segment uploaded without one (the piece absent or empty) gives no stable point before the
remote end.
"""

from __future__ import annotations

import functools

from gateway.errors import CorruptDataError, add_context
from gateway.kafka.producer_snapshot import open_transaction_first
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.remote.keys import Suffix
from gateway.remote.manifest import IndexType
from gateway.service.locate import remote_bounds, resolve
from gateway.service.types import IsolationLevel
from gateway.spark.plan import SegmentRef, segment_ref
from gateway.spark.segments import ReadContext, open_segment, sync_reader
from gateway.storage.sync import SyncStoreSpec


def stable_end(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, ctx: ReadContext) -> int:
    """One past the last offset read_committed may read of ``tp``'s remote tier (the remote
    LSO): the first offset of the oldest transaction open at the remote end, else the end."""
    start, end = remote_bounds(rlmm, tp)
    if end <= start:
        return end
    meta = resolve(rlmm, tp, end - 1)
    if meta is None or meta.end_offset != end - 1:
        return end  # no segment ends at the remote end: nothing to read the state from
    ref = segment_ref(meta, ctx.key_prefix, 0)
    first = _open_txn_first(ctx.store, ctx.key_pairs, ctx.key_prefix, ref)
    return max(start, end if first is None else first)


@functools.lru_cache(maxsize=256)
def _open_txn_first(
    store: SyncStoreSpec, key_pairs: tuple[str, ...], key_prefix: str, ref: SegmentRef
) -> int | None:
    """The first offset of the oldest transaction open at the end of segment ``ref`` (None:
    none, or no snapshot uploaded). A segment's snapshot never changes, so a streaming query
    reads it once, not at every trigger (a failure is not cached)."""
    ctx = ReadContext(store, key_prefix, key_pairs, False, IsolationLevel.READ_COMMITTED, 1)
    segment = open_segment(ctx, ref)
    data = sync_reader(ctx).read_index_piece(segment, IndexType.PRODUCER_SNAPSHOT)
    try:
        return open_transaction_first(data or b"", ref.end_offset)
    except CorruptDataError as exc:
        raise add_context(exc, segment.key.with_suffix(Suffix.INDEXES).key) from exc
