"""Structured Streaming on the driver: offsets, triggers and micro-batch plans (no pyspark).

``spark.readStream.format("tiered-kafka")`` (:class:`gateway.spark.source.TieredKafkaStreamReader`)
hands every call to a :class:`StreamPlanner`:

* offsets are Spark's Kafka source's JSON, ``{"topic": {"partition": next offset}}``, plus
  ``"$topicIds"``: each topic's id, so a topic deleted and re-created under the query is seen.
  They are what a checkpoint holds, so a query restarted from its checkpoint continues exactly
  where its last committed micro-batch ended;
* the initial offset is a constant, ``{"$initial": true}`` (Spark asks for it more than once, and
  again after a restart before the first commit: a rescan could answer differently each time).
  The first micro-batch resolves ``startingOffsets`` / ``…Timestamp`` / ``…ByTimestamp``
  (:func:`gateway.spark.driver.resolve_starts`) as its *end* and reads nothing, so the resolved
  starts are written to the offset log once and never resolved again; an ending bound is
  refused, as Spark refuses one in a streaming query;
* every trigger brings the metadata up to date (:mod:`gateway.spark.rescan`: an incremental
  bucket scan, or the ``catalog`` reopened), so segments tiered since the last trigger, and
  topics a ``subscribePattern`` newly matches, are picked up. A partition seen for the first
  time enters the offsets at its remote log start (as Spark starts new partitions at their
  earliest offset) in a micro-batch that reads nothing of it, so where it starts is in the
  offset log before anything is read; named topics not tiered yet are waited for;
* the latest offset of a partition is its remote log end, or with read_committed its remote last
  stable offset (:mod:`gateway.spark.stable`), the way a broker bounds a read_committed
  consumer;
* ``maxOffsetsPerTrigger`` caps a micro-batch, shared among partitions in proportion to what
  each has to read; ``minOffsetsPerTrigger`` waits for that many new offsets, for at most
  ``maxTriggerDelay`` since the last micro-batch (the first trigger does not wait);
  ``Trigger.AvailableNow`` reads what is tiered when it starts, ignoring the minimum;
* a micro-batch plans its splits with the batch planner
  (:func:`gateway.spark.driver.plan_ranges`), so records are read, checked and proven exactly
  as by a batch read. Offsets a checkpoint asks for that the remote tier no longer holds (a
  segment deleted by retention under a running query, a hole in the lineage) fail the query
  with :class:`~gateway.errors.RemoteGapError` naming them, or with ``failOnDataLoss=false``
  are skipped with a warning on the driver's log, as Spark's Kafka source does. So are a
  partition that disappeared from the metadata, one whose remote log now ends before the
  query's offset, and a topic whose id changed (re-created): with ``false`` the query goes on
  from the partition's new remote log start.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from gateway.errors import ConfigurationError, RemoteGapError
from gateway.kafka.uuids import encode_uuid
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.service.locate import Claim, remote_bounds
from gateway.service.types import IsolationLevel
from gateway.spark.dataloss import missing
from gateway.spark.driver import (
    ReadPlan,
    check_ends,
    context_of,
    plan_ranges,
    resolve_starts,
    subscribed_partitions,
)
from gateway.spark.read_options import ReadOptions, StreamLimits
from gateway.spark.rescan import Rescan
from gateway.spark.rlmm import Claims
from gateway.spark.stable import stable_end

log = logging.getLogger("gateway.spark.driver")

Key = tuple[str, int]
Offsets = dict[str, object]
"""Spark's JSON form: ``{"topic": {"partition": offset}, "$topicIds": {"topic": "id"}}``."""

INITIAL: Final = "$initial"
TOPIC_IDS: Final = "$topicIds"


def to_json(offsets: Mapping[Key, int], ids: Mapping[str, str] | None = None) -> Offsets:
    out: dict[str, dict[str, object]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    if ids:
        return {**out, TOPIC_IDS: dict(sorted(ids.items()))}
    return dict(out)


def from_json(offsets: Mapping[str, object]) -> dict[Key, int]:
    """A checkpoint's offsets, checked: a malformed one is a :class:`ConfigurationError`."""
    out: dict[Key, int] = {}
    for topic, parts in offsets.items():
        if topic.startswith("$"):  # not a topic name: Kafka allows [a-zA-Z0-9._-] only
            continue
        if not isinstance(parts, Mapping):
            raise ConfigurationError(f"stream offsets: {topic!r} does not map partitions")
        for partition, offset in parts.items():
            if not str(partition).isdigit() or isinstance(offset, bool):
                raise ConfigurationError(f"stream offsets: {topic}/{partition}: {offset!r}")
            if not isinstance(offset, int) or offset < 0:
                raise ConfigurationError(f"stream offsets: {topic}/{partition}: {offset!r}")
            out[topic, int(partition)] = offset
    return out


def ids_from_json(offsets: Mapping[str, object]) -> dict[str, str]:
    ids = offsets.get(TOPIC_IDS, {})
    if not isinstance(ids, Mapping) or not all(isinstance(v, str) for v in ids.values()):
        raise ConfigurationError(f"stream offsets: {TOPIC_IDS} must map topics to ids")
    return dict(ids)


def share(lags: Mapping[Key, int], limit: int) -> dict[Key, int]:
    """How many offsets each partition reads when ``limit`` caps their sum: in proportion to
    each one's lag, rounded down, then the remainder one by one to the partitions that got
    nothing (no partition starves behind a large one, as Spark's rule) and then to the
    largest lags; never more than a partition's lag, exactly ``min(limit, sum of lags)``."""
    total = sum(lags.values())
    if total <= limit:
        return dict(lags)
    taken = {k: lag * limit // total for k, lag in lags.items()}
    left = limit - sum(taken.values())
    for k in sorted(lags, key=lambda k: (taken[k] > 0, -(lags[k] - taken[k]), k)):
        if left == 0:
            break
        extra = min(left, lags[k] - taken[k], 1 if taken[k] == 0 else left)
        taken[k] += extra
        left -= extra
    for k in sorted(lags, key=lambda k: (-(lags[k] - taken[k]), k)):
        if left == 0:
            break
        extra = min(left, lags[k] - taken[k])
        taken[k] += extra
        left -= extra
    return taken


def admit(
    start: Mapping[Key, int],
    latest: Mapping[Key, int],
    limits: StreamLimits,
    waited_ms: float,
) -> dict[Key, int]:
    """The end offsets of the next micro-batch for the partitions of ``start``: ``latest``,
    capped by ``maxOffsetsPerTrigger``; ``start`` itself (no batch) while fewer than
    ``minOffsetsPerTrigger`` new offsets wait and ``maxTriggerDelay`` has not passed since the
    last batch."""
    lags = {k: max(0, latest[k] - start[k]) for k in start if k in latest}
    new = sum(lags.values())
    ends = {k: max(latest.get(k, v), v) for k, v in start.items()}
    waiting = limits.min_offsets is not None and new < limits.min_offsets
    if waiting and waited_ms < limits.max_trigger_delay_ms:
        return dict(start)
    if limits.max_offsets is not None and new > limits.max_offsets:
        for k, n in share(lags, limits.max_offsets).items():
            ends[k] = start[k] + n
    return ends


class StreamPlanner:
    """One streaming query's driver side (lives as long as the query's reader; Spark calls it
    from one process, in the order initialOffset, latestOffset, partitions, commit)."""

    def __init__(self, opts: ReadOptions, clock: Callable[[], float] = time.monotonic) -> None:
        if opts.ending_given:
            raise ConfigurationError(
                "endingOffsets, endingTimestamp and endingOffsetsByTimestamp are not valid in a "
                "streaming query (it reads as segments are tiered); use a batch read"
            )
        self.opts = opts
        self._clock = clock
        self._last_batch = -math.inf  # the first trigger never waits for minOffsetsPerTrigger
        self._rescan = Rescan(opts)
        self._loaded: tuple[RemoteLogMetadataManager, Claims] | None = None
        self._target: dict[Key, int] | None = None  # Trigger.AvailableNow's ends

    # --- metadata ---

    def _reload(self) -> tuple[RemoteLogMetadataManager, Claims]:
        """Fresh metadata: what was tiered (or deleted) since the last trigger."""
        self._loaded = self._rescan.refresh()
        return self._loaded

    def close(self) -> None:
        self._loaded = None
        self._rescan.close()

    def _current(self) -> dict[Key, TopicIdPartition]:
        rlmm, claims = self._loaded if self._loaded is not None else self._reload()
        return {
            (tp.topic, tp.partition): tp
            for tp in subscribed_partitions(rlmm, self.opts, claims, streaming=True)
        }

    def _end(self, tp: TopicIdPartition) -> int:
        """Where a micro-batch may read ``tp`` up to now: the remote end, with read_committed
        the remote last stable offset, within Trigger.AvailableNow's target."""
        rlmm = self._rlmm()
        if self.opts.isolation is IsolationLevel.READ_COMMITTED:
            end = stable_end(rlmm, tp, context_of(self.opts))
        else:
            end = remote_bounds(rlmm, tp)[1]
        if self._target is not None:
            end = min(end, self._target.get((tp.topic, tp.partition), end))
        return end

    def _rlmm(self) -> RemoteLogMetadataManager:
        return (self._loaded if self._loaded is not None else self._reload())[0]

    # --- offsets ---

    def initial(self) -> Offsets:
        return {INITIAL: True}

    def freeze(self) -> None:
        """Trigger.AvailableNow: read what is tiered now, nothing tiered later."""
        self._reload()
        self._target = {key: self._end(tp) for key, tp in self._current().items()}

    def latest(self, start_json: Mapping[str, object], limits: StreamLimits) -> Offsets:
        """The end offsets of the next micro-batch from ``start`` (the previous one's end)."""
        self._reload()
        current = self._current()
        ids = {key[0]: encode_uuid(tp.topic_id) for key, tp in current.items()}
        if start_json.get(INITIAL):  # the first micro-batch: the resolved starts, no records
            rlmm, claims = self._loaded or self._reload()
            starts = resolve_starts(self.opts, rlmm, claims)
            return to_json({(tp.topic, tp.partition): lo for tp, lo in starts}, ids)
        start = from_json(start_json)
        known_ids = ids_from_json(start_json)
        rlmm = self._rlmm()
        ends: dict[Key, int] = {}
        moved: dict[Key, int] = {}  # data loss skipped: where the partition goes on from
        for key, tp in current.items():
            if self._target is not None and key not in self._target:
                continue  # appeared after the AvailableNow target was taken
            first = remote_bounds(rlmm, tp)[0]
            if key not in start:  # new: enters at its earliest, nothing of it read yet
                check_ends(self.opts, tp, claims_of(self._loaded, tp), bounds=(first, first),
                           lo=first, hi=-1)  # fmt: skip
                moved[key] = first
                continue
            end = self._end(tp)
            old_id = known_ids.get(key[0])
            if old_id is not None and old_id != ids[key[0]]:
                self._lost(tp, start[key], f"the topic was re-created (id {old_id} is now "
                           f"{ids[key[0]]})")  # fmt: skip
                moved[key] = first
            elif end < start[key] and remote_bounds(rlmm, tp)[1] < start[key]:
                self._lost(tp, start[key], f"its remote log now ends at {end}, before the "
                           "query's offset: the partition was truncated or re-created")  # fmt: skip
                moved[key] = first
            else:
                ends[key] = end
        for key in sorted(set(start) - set(current)):
            if self._target is None or key in self._target:
                self._lost_partition(key)
        waiting = {k: v for k, v in start.items() if k in ends}
        admitted = admit(waiting, ends, self._limits(limits), self._waited_ms())
        result = {**start, **admitted, **moved}
        if result != start:
            self._last_batch = self._clock()
        return to_json(result, {**known_ids, **ids})

    def _limits(self, limits: StreamLimits) -> StreamLimits:
        if self._target is not None:  # AvailableNow must reach its target: no minimum
            return StreamLimits(limits.max_offsets, None, limits.max_trigger_delay_ms)
        return limits

    def _waited_ms(self) -> float:
        return (self._clock() - self._last_batch) * 1000

    def _lost(self, tp: TopicIdPartition, offset: int, reason: str) -> None:
        missing(tp, offset, offset, f"{reason}; with failOnDataLoss=false the query goes on "
                "from its remote log start", fail=self.opts.fail_on_data_loss)  # fmt: skip

    def _lost_partition(self, key: Key) -> None:
        message = (
            f"partition {key[1]} of {key[0]} is no longer in the remote tier (deleted under "
            "the running query)"
        )
        if self.opts.fail_on_data_loss:
            raise RemoteGapError(f"{message} (failOnDataLoss=false skips it)", -1, -1)
        log.warning("%s: skipped (failOnDataLoss=false)", message)

    def plan(self, start_json: Mapping[str, object], end_json: Mapping[str, object]) -> ReadPlan:
        """The splits of the micro-batch ``[start, end)``: partitions new in ``end`` read
        nothing (they enter at their start), ranges that go backwards (data loss already
        reported by :meth:`latest`) read nothing."""
        start = {} if start_json.get(INITIAL) else from_json(start_json)
        end = from_json(end_json)
        current = self._current()
        rlmm, claims = self._loaded or self._reload()
        ranges = []
        for key, hi in sorted(end.items()):
            lo = start.get(key, hi)
            tp = current.get(key)
            if lo >= hi or tp is None:
                continue
            ranges.append((tp, lo, hi))
        return plan_ranges(self.opts, rlmm, claims, ranges)


def claims_of(
    loaded: tuple[RemoteLogMetadataManager, Claims] | None, tp: TopicIdPartition
) -> Sequence[Claim]:
    return () if loaded is None else loaded[1].get(tp, ())
