"""Rebuild remote log metadata by replaying one ``__remote_log_metadata`` partition (spec §6.6).

Mirrors what ``ConsumerTask.processConsumerRecord`` and ``RemotePartitionMetadataStore`` do with
each record: deserialize the value (:mod:`gateway.metadata.serde`), hand the event to the
metadata cache, and

* drop, with a warning, an update of an unknown segment (``RemoteResourceNotFoundException``,
  caught by ``RemotePartitionMetadataStore.handleRemoteLogSegmentMetadataUpdate``) and an
  invalid state transition (``RemoteLogMetadataCache.checkStateTransition`` logs and returns);
* stop on a value that cannot be deserialized (the broker's consumer task closes on it): this
  module raises the typed error with the record's offset and applies nothing after it.

Records must come in offset order (offsets strictly increase; gaps are fine: compaction,
transaction markers). Any other error raised by the sink propagates unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import (
    CorruptDataError,
    CorruptMetadataRecordError,
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
)
from gateway.metadata.model import MetadataEvent
from gateway.metadata.serde import RemoteLogSegmentMetadataSnapshot, decode_metadata_record

__all__ = ["EventSink", "ReplayStats", "replay"]

log = logging.getLogger(__name__)


class EventSink(Protocol):
    """Where replayed events go (the metadata manager)."""

    def apply(self, event: MetadataEvent) -> None:
        """Apply one event; raise ``InvalidStateTransitionError`` for a transition Kafka does
        not allow and ``RemoteResourceNotFoundError`` for an update of an unknown segment."""


@dataclass(slots=True)
class ReplayStats:
    """What a replay did; updated record by record, so it is accurate even after an error."""

    records: int = 0
    """Records read, whatever became of them (the failing one excluded)."""
    applied: int = 0
    dropped_invalid_transition: int = 0
    dropped_unknown_segment: int = 0
    skipped_snapshots: int = 0
    last_offset: int | None = None
    """Offset of the last record read successfully."""

    @property
    def dropped(self) -> int:
        return self.dropped_invalid_transition + self.dropped_unknown_segment


def replay(
    manager: EventSink,
    records: Iterable[tuple[int, bytes | bytearray | memoryview | None]],
    stats: ReplayStats | None = None,
) -> ReplayStats:
    """Apply ``(offset, value)`` records of one metadata partition, in offset order, to
    ``manager``; returns the counts (``stats``, when given, is updated in place and returned).

    * An invalid state transition or an update of an unknown segment is logged at warning and
      dropped, as Kafka does; the replay continues.
    * Snapshot records (apiKey 3) are never produced to the topic (Kafka's former on-disk
      snapshot used them): they are counted in ``skipped_snapshots`` and skipped.
    * A value that does not decode (a null value included) raises
      :class:`~gateway.errors.CorruptMetadataRecordError` naming the offset; nothing after it
      is applied.
    * An offset that does not follow the previous one (or is negative) raises
      :class:`~gateway.errors.CorruptDataError`.
    """
    stats = ReplayStats() if stats is None else stats
    for offset, value in records:
        previous = stats.last_offset
        if offset < 0 or (previous is not None and offset <= previous):
            raise CorruptDataError(
                f"__remote_log_metadata offset {offset} after offset {previous}: "
                "offsets must be non-negative and strictly increasing"
            )
        if value is None:
            raise CorruptMetadataRecordError(f"__remote_log_metadata offset {offset}: null value")
        try:
            payload = decode_metadata_record(value).payload
        except CorruptMetadataRecordError as exc:
            raise CorruptMetadataRecordError(f"offset {offset}: {exc}") from exc
        stats.records += 1
        stats.last_offset = offset
        if isinstance(payload, RemoteLogSegmentMetadataSnapshot):
            stats.skipped_snapshots += 1
            continue
        try:
            manager.apply(payload)
        except InvalidStateTransitionError as exc:
            stats.dropped_invalid_transition += 1
            log.warning("__remote_log_metadata offset %d: dropped: %s", offset, exc)
        except RemoteResourceNotFoundError as exc:
            stats.dropped_unknown_segment += 1
            log.warning("__remote_log_metadata offset %d: dropped: %s", offset, exc)
        else:
            stats.applied += 1
    return stats
