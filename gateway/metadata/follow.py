"""Follow a cluster's ``__remote_log_metadata`` topic into the RLMM, as a broker's
``ConsumerTask`` does (``remote-read-semantics.md`` §6.6).

A :class:`MetadataFollower` runs on a thread of its own. It assigns itself every partition of
the metadata topic, or only those the served topics' partitions map to (§6.5, by topic id), and
hands each record to :func:`gateway.metadata.replay.replay`: the same serde and the same KIP-405
state machine as every other source, so a segment becomes visible at COPY_SEGMENT_FINISHED,
stops being served at DELETE_SEGMENT_STARTED, and a partition delete removes the partition.

* **Position.** The next offset of each metadata partition is written in the transaction of the
  events it follows (:meth:`~gateway.metadata.manager.RemoteLogMetadataManager.
  set_follow_position`): with a durable catalog (``--state-dir``) a restart resumes exactly
  after the last applied record, never applying one twice or skipping one.
* **Caught up.** The follower reads the end offsets of its partitions once connected, and is
  *caught up* when its positions reach them: only then does the catalog stand for the cluster
  (until then ``serve`` answers 503 ``not_ready``, never an empty catalog).
* **Faults.** A cluster that cannot be reached, or a consumer error, is counted, kept as the
  last error, and retried with backoff on a new consumer; the catalog keeps what it had. A
  record whose value does not decode stops that metadata partition for good, as the broker's
  consumer task stops (its error is kept; the other partitions go on).

The Kafka client is kafka-python's ``KafkaConsumer`` (and its admin client, for the served
topics' ids and partition counts); :class:`Consumer` is the part of it used here.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.errors import CorruptMetadataRecordError, MetadataUnavailableError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import (
    MetadataEvent,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from gateway.metadata.partitioner import metadata_partition
from gateway.metadata.replay import ReplayStats, replay

__all__ = [
    "METADATA_TOPIC",
    "Consumer",
    "FollowConfig",
    "FollowStatus",
    "MetadataFollower",
    "catch_up",
    "served_metadata_partitions",
]

log = logging.getLogger(__name__)

METADATA_TOPIC = "__remote_log_metadata"


class Consumer(Protocol):
    """What the follower uses of a Kafka consumer (kafka-python's ``KafkaConsumer``), with
    partitions as plain ints of the one metadata topic."""

    def partitions(self) -> list[int]:
        """Every partition of the metadata topic (raises while the cluster cannot say)."""
        ...

    def served_partitions(self, topics: Iterable[str], count: int) -> set[int]:
        """The metadata partitions the partitions of ``topics`` map to (§6.5)."""
        ...

    def assign(self, partitions: dict[int, int]) -> None:
        """Read each partition from its offset."""
        ...

    def end_offsets(self, partitions: list[int]) -> dict[int, int]: ...

    def poll(self, timeout_ms: int) -> dict[int, list[tuple[int, bytes | None]]]:
        """Records by partition, each ``(offset, value)`` in offset order."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class FollowConfig:
    """Where to follow from: bootstrap servers, the client's security settings (kafka-python
    names: ``security_protocol``, ``sasl_mechanism``, ``ssl_cafile``, ...), the topic."""

    bootstrap: str
    topic: str = METADATA_TOPIC
    served_topics: tuple[str, ...] = ()
    """Follow only the metadata partitions of these topics (empty: every partition)."""
    client: Mapping[str, Any] = field(default_factory=dict)
    poll_timeout_ms: int = 500
    max_backoff_s: float = 30.0
    end_offsets_every_s: float = 5.0
    """How often the end offsets are asked again (the lag in ``/readyz`` and ``/metrics``)."""


@dataclass(slots=True)
class FollowStatus:
    """What the follower has done so far (read by ``/readyz`` and ``/metrics``)."""

    topic: str = METADATA_TOPIC
    partitions: tuple[int, ...] = ()
    positions: dict[int, int] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)
    """The newest end offset seen of each partition."""
    start_targets: dict[int, int] | None = None
    """The end offsets seen at the first connection: caught up once the positions reach them."""
    caught_up: bool = False
    connected: bool = False
    records: int = 0
    applied: int = 0
    dropped: int = 0
    errors: int = 0
    last_error: str | None = None
    failed: dict[int, str] = field(default_factory=dict)
    """Metadata partitions stopped by a record that does not decode, with the error."""

    @property
    def lag(self) -> int:
        """Records the follower has not applied yet, as far as it knows."""
        return sum(
            max(0, end - self.positions.get(p, 0))
            for p, end in self.end_offsets.items()
            if p not in self.failed
        )


class _Filtered:
    """The manager, taking events of the served topics only."""

    def __init__(self, rlmm: RemoteLogMetadataManager, topics: frozenset[str]) -> None:
        self._rlmm, self._topics = rlmm, topics
        self.changed: set[TopicIdPartition] = set()

    def apply(self, event: MetadataEvent) -> None:
        if isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
            tp = event.segment_id.partition
        else:
            tp = event.partition
        if self._topics and tp.topic not in self._topics:
            return
        self._rlmm.apply(event)
        if isinstance(event, RemoteLogSegmentMetadataUpdate):
            self.changed.add(tp)


class MetadataFollower:
    """Keeps ``rlmm`` in step with a metadata topic; :meth:`run` on a thread of its own."""

    def __init__(
        self,
        rlmm: RemoteLogMetadataManager,
        config: FollowConfig,
        connect: Callable[[FollowConfig], Consumer],
        *,
        on_change: Callable[[set[TopicIdPartition]], None] | None = None,
    ) -> None:
        """``connect`` makes a consumer (:func:`gateway.metadata.follow_kafka.connect`);
        ``on_change`` is called (on the follower's thread) with the partitions whose segments
        changed state in a batch just committed."""
        self._rlmm, self.config, self._connect = rlmm, config, connect
        self._on_change = on_change
        self.status = FollowStatus(config.topic)
        self._stats: dict[int, ReplayStats] = {}
        self._caught_up = threading.Event()

    def wait_caught_up(self, timeout: float | None = None) -> bool:
        return self._caught_up.wait(timeout)

    def run(self, stop: threading.Event) -> None:
        """Follow until ``stop`` is set: connect, read, and on any fault count it, keep it as
        the last error, and connect again after a backoff (1 s, doubling to the maximum)."""
        delay = 1.0
        while not stop.is_set():
            consumer: Consumer | None = None
            try:
                consumer = self._connect(self.config)
                self._follow(consumer, stop)
                return
            except Exception as exc:  # the cluster, the network, the client: try again
                self.status.errors += 1
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "following %s failed (again in %.0f s): %s",
                    self.config.topic,
                    delay,
                    self.status.last_error,
                )
            finally:
                self.status.connected = False
                if consumer is not None:
                    try:
                        consumer.close()
                    except Exception:  # closing a broken consumer: nothing left to do
                        log.debug("closing the metadata consumer failed", exc_info=True)
            stop.wait(delay)
            delay = min(delay * 2, self.config.max_backoff_s)

    def _assignment(self, consumer: Consumer) -> list[int]:
        every = consumer.partitions()
        if not self.config.served_topics:
            return sorted(every)
        return sorted(consumer.served_partitions(self.config.served_topics, len(every)))

    def _follow(self, consumer: Consumer, stop: threading.Event) -> None:
        status = self.status
        parts = self._assignment(consumer)
        stored = self._rlmm.follow_positions(self.config.topic)
        positions = {p: stored.get(p, 0) for p in parts}
        ends = consumer.end_offsets(parts)
        status.partitions, status.end_offsets = tuple(parts), dict(ends)
        status.positions = dict(positions)
        if status.start_targets is None:
            status.start_targets = dict(ends)
        consumer.assign({p: o for p, o in positions.items() if p not in status.failed})
        status.connected = True
        log.info(
            "following %s partitions %s from %s (end offsets %s)",
            self.config.topic,
            parts,
            positions,
            ends,
        )
        self._check_caught_up()
        asked = time.monotonic()
        while not stop.is_set():
            batches = consumer.poll(self.config.poll_timeout_ms)
            for partition, records in sorted(batches.items()):
                if records and partition not in status.failed:
                    self._apply(partition, records)
            if time.monotonic() - asked >= self.config.end_offsets_every_s:
                status.end_offsets.update(consumer.end_offsets(parts))  # for the lag
                asked = time.monotonic()
            self._check_caught_up()

    def _apply(self, partition: int, records: list[tuple[int, bytes | None]]) -> None:
        status = self.status
        stats = self._stats.setdefault(partition, ReplayStats())
        sink = _Filtered(self._rlmm, frozenset(self.config.served_topics))
        before = stats.records
        before_dropped = stats.dropped
        try:
            with self._rlmm.batch():
                try:
                    replay(sink, records, stats)
                except CorruptMetadataRecordError as exc:
                    status.failed[partition] = str(exc)
                    status.errors += 1
                    status.last_error = f"{self.config.topic}-{partition}: {exc}"
                    log.error(
                        "%s-%d: a record that does not decode: this partition is no longer "
                        "followed (as a broker's consumer task stops): %s",
                        self.config.topic,
                        partition,
                        exc,
                    )
                if stats.last_offset is not None:  # what was applied before it stands
                    self._rlmm.set_follow_position(
                        self.config.topic, partition, stats.last_offset + 1
                    )
        except BaseException:
            stats.records, stats.last_offset = before, None  # rolled back: read them again
            raise
        if stats.last_offset is not None:
            status.positions[partition] = stats.last_offset + 1
            end = status.end_offsets.get(partition, 0)
            status.end_offsets[partition] = max(end, stats.last_offset + 1)
        status.records += stats.records - before
        status.dropped += stats.dropped - before_dropped
        status.applied = sum(s.applied for s in self._stats.values())
        if sink.changed and self._on_change is not None:
            self._on_change(sink.changed)

    def _check_caught_up(self) -> None:
        status = self.status
        if status.caught_up or status.start_targets is None:
            return
        if all(
            status.positions.get(p, 0) >= end or p in status.failed
            for p, end in status.start_targets.items()
        ):
            status.caught_up = True
            self._caught_up.set()
            log.info(
                "%s: caught up with the end offsets seen at start (%d records applied)",
                self.config.topic,
                status.applied,
            )


def served_metadata_partitions(topics: Mapping[str, tuple[uuid.UUID, int]], count: int) -> set[int]:
    """The metadata partitions (of ``count``) that the partitions of ``topics`` (name ->
    (topic id, partition count)) map to."""
    return {
        metadata_partition(topic_id, p, count)
        for topic_id, partitions in topics.values()
        for p in range(partitions)
    }


def catch_up(
    rlmm: RemoteLogMetadataManager,
    config: FollowConfig,
    connect: Callable[[FollowConfig], Consumer],
    timeout_s: float,
) -> FollowStatus:
    """Follow until the end offsets seen at start are applied, then stop (the batch commands:
    ``catalog follow``, the Spark driver). Not caught up within ``timeout_s``:
    :class:`~gateway.errors.MetadataUnavailableError` (retriable) with the last error."""
    stop = threading.Event()
    follower = MetadataFollower(rlmm, config, connect)
    thread = threading.Thread(target=follower.run, args=(stop,), name="rlmm-catch-up")
    thread.start()
    try:
        done = follower.wait_caught_up(timeout_s)
    finally:
        stop.set()
        thread.join()
    status = follower.status
    if not done:
        why = status.last_error or f"{status.lag} records still to apply"
        raise MetadataUnavailableError(
            f"{config.topic} at {config.bootstrap} was not read to its end within "
            f"{timeout_s:.0f} s: {why}"
        )
    return status
