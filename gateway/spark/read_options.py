"""The typed values one read is planned from: :class:`ReadOptions` and its bounds,
subscription and streaming limits (frozen, pure, no pyspark). The reader options' strings are
parsed into these once on the driver (:func:`gateway.spark.options.parse_options`); inside the
package a read is described by these values, never by option strings.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gateway.errors import ConfigurationError
from gateway.service.types import IsolationLevel
from gateway.storage.sync import SyncStoreSpec

DEFAULT_MAX_BYTES_PER_PARTITION: Final = 128 * 1024 * 1024
DEFAULT_MAX_ROWS_PER_BATCH: Final = 65536


class BoundKind(StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a partition's range before the driver resolves it to an offset."""

    kind: BoundKind
    value: int = 0


EARLIEST: Final = Bound(BoundKind.EARLIEST)
LATEST: Final = Bound(BoundKind.LATEST)


@dataclass(frozen=True, slots=True)
class Bounds:
    """A bound for every partition: the listed ones (topic, partition, bound), else
    ``default``."""

    default: Bound
    per_partition: tuple[tuple[str, int, Bound], ...] = ()

    def for_partition(self, topic: str, partition: int) -> Bound:
        for t, p, bound in self.per_partition:
            if p == partition and t == topic:
                return bound
        return self.default


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which topics a read takes: named ones (``topic``, ``subscribe``, ``assign``) or those
    matching ``pattern`` (``subscribePattern``, the whole name, as Java's ``matches``)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, tuple[int, ...]], ...] = ()  # assign: its partitions per topic

    def select(self, names: Iterable[str]) -> list[str]:
        """The subscribed topics among ``names`` (sorted), for a pattern; else the named ones."""
        if self.pattern is None:
            return list(self.topics)
        regex = re.compile(self.pattern)
        return sorted(n for n in set(names) if regex.fullmatch(n))

    def includes(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def assigned_partitions(self, topic: str) -> tuple[int, ...] | None:
        for t, parts in self.assigned:
            if t == topic:
                return parts
        return None

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        return ", ".join(repr(t) for t in self.topics)


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Streaming admission control, per micro-batch (Spark's Kafka source's names)."""

    max_offsets: int | None = None
    min_offsets: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000


@dataclass(frozen=True, slots=True)
class ReadOptions:
    store: SyncStoreSpec
    key_prefix: str
    key_pairs: tuple[str, ...]
    subscription: Subscription
    topic_id: uuid.UUID | None = None
    partitions: tuple[int, ...] | None = None  # the ``partitions`` option, of every topic
    start: Bounds = Bounds(EARLIEST)
    end: Bounds = Bounds(LATEST)
    start_timestamp_strategy: str = "error"
    include_headers: bool = False
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH
    catalog: str | None = None
    metadata_bootstrap: str | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    limits: StreamLimits = StreamLimits()
    ending_given: bool = False  # an ending bound was given (a streaming query refuses one)

    @property
    def topic(self) -> str:
        """The one topic of a read that names exactly one."""
        sub = self.subscription
        if sub.pattern is not None or len(sub.topics) != 1:
            raise ConfigurationError(f"this needs exactly one topic, not {sub.describe()}")
        return sub.topics[0]

    def partitions_of(self, topic: str) -> tuple[int, ...] | None:
        """The partitions asked of ``topic`` (None: every partition with remote data)."""
        assigned = self.subscription.assigned_partitions(topic)
        return assigned if assigned is not None else self.partitions
