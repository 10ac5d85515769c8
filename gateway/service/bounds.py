"""The catalog side of the use cases: which topics and partitions exist, and a partition's
checked bounds (computed in one place, :meth:`PartitionCatalog.bounds`, for fetches, offset
lookups, the last stable offset and the partition info alike)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Final

from gateway.deadline import Deadline
from gateway.errors import (
    CorruptCheckpointError,
    CorruptManifestError,
    DeadlineExceededError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.manifests import UnreadableSegment
from gateway.metadata.model import TopicIdPartition
from gateway.metadata.scan import BucketScanner
from gateway.service.fetch import Fetcher
from gateway.service.listing import segment_infos
from gateway.service.locate import read_inline, remote_bounds
from gateway.service.offsets import OffsetFinder, check_epochs
from gateway.service.types import PartitionInfo, SegmentInfo

BOUNDS_TIMEOUT_S: Final = 30.0
"""The deadline of :meth:`PartitionCatalog.partition` when its caller gives none."""


class PartitionCatalog:
    """Topics, partitions and their bounds, from the RLMM and the scanner's unreadable
    manifests (a partition they alone name fails, naming them, rather than vanishing)."""

    def __init__(
        self,
        rlmm: RemoteLogMetadataManager,
        scanner: BucketScanner,
        fetcher: Fetcher,
        offsets: OffsetFinder,
        require_ready: Callable[[], None],
    ) -> None:
        self._rlmm = rlmm
        self._scanner = scanner
        self._fetcher = fetcher
        self._offsets = offsets
        self._require_ready = require_ready

    def unreadable(
        self, topic: str | None = None
    ) -> Sequence[tuple[TopicIdPartition, UnreadableSegment]]:
        """The manifests the scanner could not read (of ``topic`` when given)."""
        found = self._scanner.unreadable_all()
        return found if topic is None else [e for e in found if e[0].topic == topic]

    async def tp(self, topic: str, partition: int) -> TopicIdPartition:
        if partition < 0:
            raise InvalidRequestError(f"partition {partition} is negative", "partition")
        self._require_ready()
        try:
            # Point reads: inline unless a writer holds the RLMM (gateway.service.locate).
            return await read_inline(self._rlmm, self._rlmm.partition, topic, partition)
        except UnknownTopicOrPartitionError:
            # Known only from manifests that cannot be read: they claim its offsets.
            claims = [e for e in self.unreadable(topic) if e[0].partition == partition]
            if claims:
                raise unreadable_error(claims) from None
            raise

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        self._require_ready()
        topics = await asyncio.to_thread(self._rlmm.topics)
        for tp, _ in self.unreadable():  # a topic whose manifests are all unreadable still is
            ids = topics.setdefault(tp.topic, [])
            if tp.topic_id not in ids:
                ids.append(tp.topic_id)
        return topics

    async def bounds(
        self, tp: TopicIdPartition, deadline: Deadline, *, answered: bool = False
    ) -> tuple[int, int]:
        """A partition's checked bounds, the one place they are computed: (log start, log end)
        from the catalog, checked by :meth:`check_bounds`."""
        start, end = await read_inline(self._rlmm, remote_bounds, self._rlmm, tp)
        await self.check_bounds(tp, start, end, deadline, answered=answered)
        return start, end

    async def check_bounds(
        self, tp: TopicIdPartition, start: int, end: int, deadline: Deadline, *,
        answered: bool = False,
    ) -> None:  # fmt: skip
        """A segment whose manifest cannot be read before the first or after the last readable
        one makes the bounds unknown (502 naming it, never a shorter log); the end must be one
        the last segment's bytes keep (:meth:`Fetcher.check_tail`, once per end).
        ``answered``: the caller holds batches read before ``deadline``, which are its answer
        when the deadline passes during the tail check (the next fetch checks it)."""
        self._offsets.claim_outside(tp, start, end)
        try:
            await self._fetcher.check_tail(tp, end, deadline)
        except DeadlineExceededError:
            if not answered:
                raise

    def _info(self, tp: TopicIdPartition, start: int, end: int) -> PartitionInfo:
        rlmm = self._rlmm
        return PartitionInfo(
            tp.topic,
            tp.topic_id,
            tp.partition,
            start,
            end,
            rlmm.remote_log_size(tp),
            rlmm.segment_count(tp),
            self._lineage(tp),
        )

    def _lineage(self, tp: TopicIdPartition) -> tuple[tuple[int, int], ...]:
        """The leader epochs a partition's info shows: none while they are in doubt
        (:func:`~gateway.service.offsets.check_epochs`; Metadata then says leader epoch -1,
        unknown to clients, rather than one a damaged epoch map gave)."""
        try:
            check_epochs(self._rlmm, tp)
        except CorruptCheckpointError:
            return ()
        return tuple((e.epoch, e.start_offset) for e in self._rlmm.epoch_lineage(tp))

    async def partitions(self, topic: str) -> list[PartitionInfo]:
        """The partitions of the topic's newest incarnation; a partition of it known only from
        manifests that cannot be read fails the listing (502, naming them) rather than being
        left out of it."""
        self._require_ready()
        claims = self.unreadable(topic)

        def read() -> list[PartitionInfo]:
            try:
                topic_id = self._rlmm.resolve_topic(topic)
            except UnknownTopicOrPartitionError:
                if claims:
                    raise unreadable_error(claims) from None
                raise
            infos = []
            for tp in self._rlmm.partitions(topic_id):
                start, end = remote_bounds(self._rlmm, tp)
                self._offsets.claim_outside(tp, start, end)
                infos.append(self._info(tp, start, end))
            listed = {i.partition for i in infos}
            missing = [
                e for e in claims if e[0].topic_id == topic_id and e[0].partition not in listed
            ]
            if missing:
                raise unreadable_error(missing)
            return infos

        return await asyncio.to_thread(read)

    async def partition(
        self, topic: str, partition: int, deadline: Deadline | None = None
    ) -> PartitionInfo:
        """The partition's checked bounds (:meth:`bounds`, as a fetch reports them), within
        ``deadline`` (default: :data:`BOUNDS_TIMEOUT_S`)."""
        tp = await self.tp(topic, partition)
        deadline = deadline or Deadline.after(BOUNDS_TIMEOUT_S)
        start, end = await self.bounds(tp, deadline)
        return await asyncio.to_thread(self._info, tp, start, end)

    async def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        tp = await self.tp(topic, partition)
        return await asyncio.to_thread(segment_infos, self._rlmm, tp)


def unreadable_error(
    claims: Sequence[tuple[TopicIdPartition, UnreadableSegment]],
) -> CorruptManifestError:
    """The error for partitions that only unreadable manifests name (502, naming them)."""
    parts = sorted({f"{tp.topic}-{tp.partition}" for tp, _ in claims})
    named = "; ".join(f"{u.key} ({u.reason})" for _, u in claims[:5])
    more = f" and {len(claims) - 5} more" if len(claims) > 5 else ""
    return CorruptManifestError(
        f"{', '.join(parts)}: the remote segments are claimed by manifests that cannot be "
        f"read: {named}{more}"
    )
