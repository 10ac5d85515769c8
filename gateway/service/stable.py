"""The remote tier's last stable offset (LSO): where read_committed stops.

A broker serves read_committed consumers up to its last stable offset: the first offset of
the oldest transaction still open (``remote-read-semantics.md`` §12.1: ListOffsets LATEST is
the LSO for read_committed; a fetch reads up to it). The remote tier has the same point at its
end. The producer snapshot uploaded with a segment (``kafka-formats.md`` §12.1) is the
producer state after the segment's last offset; each entry's ``currentTxnFirstOffset`` is the
first offset of that producer's open transaction. So the remote LSO is the smallest of them in
the snapshot of the segment holding the remote end (at least the remote start), or the remote
end when none is open, no snapshot was uploaded, or no segment ends at the remote end.

Reading it costs one ranged GET of the snapshot piece per tail segment
(:meth:`SegmentSource.open_transaction` keeps the answer): a partition whose tail does not
move answers from memory. The snapshot only moves where reads stop: every transactional batch
returned is still proven against its marker (:mod:`gateway.service.committed`), so a wrong
snapshot can stop a read early, never change its records. One that fails its checks is a
typed error (``CorruptCheckpointError`` naming the ``.indexes`` object).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from gateway.cache.segments import SegmentSource
from gateway.deadline import Deadline
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.service.locate import held, read_inline, remote_bounds, resolve


class StableBounds(NamedTuple):
    """A partition's remote bounds with its last stable offset (start <= stable <= end)."""

    start: int
    end: int  # one past the highest remote offset
    stable: int


async def stable_bounds(
    rlmm: RemoteLogMetadataManager,
    source: SegmentSource,
    tp: TopicIdPartition,
    deadline: Deadline,
    check: Callable[[int, int], Awaitable[None]],
) -> StableBounds:
    """``tp``'s remote start, end and last stable offset (see the module docstring).
    ``check(start, end)`` runs first: the bounds must be known before a stable point inside
    them means anything (a manifest that cannot be read after the readable tail may hold the
    open transaction's marker; the service raises ``CorruptManifestError`` then)."""
    start, end = await read_inline(rlmm, remote_bounds, rlmm, tp)
    await check(start, end)
    if end <= start:
        return StableBounds(start, end, end)
    meta = await read_inline(rlmm, held, rlmm, tp, end - 1)
    if meta is None:
        meta = await asyncio.to_thread(resolve, rlmm, tp, end - 1)
    if meta is None or meta.end_offset != end - 1:
        return StableBounds(start, end, end)  # no segment ends there to read the state from
    first = await source.open_transaction(meta, deadline)
    stable = end if first is None else min(end, max(start, first))
    return StableBounds(start, end, stable)
