"""Structured Streaming on the driver: offsets, triggers and micro-batch plans (no pyspark).

``spark.readStream.format("tiered-kafka")`` (:class:`gateway.spark.source.TieredKafkaStreamReader`)
hands every call to a :class:`StreamPlanner`:

* offsets are Spark's Kafka source's JSON, ``{"topic": {"partition": next offset}}``: what a
  checkpoint holds, so a query restarted from its checkpoint continues exactly where its last
  committed micro-batch ended;
* the initial offsets resolve ``startingOffsets`` / ``…Timestamp`` / ``…ByTimestamp`` as a batch
  read does (:func:`gateway.spark.driver.resolve_ranges`); an ending bound is refused, as Spark
  refuses one in a streaming query;
* every trigger brings the metadata up to date (:mod:`gateway.spark.rescan`: an incremental
  bucket scan, or the ``catalog`` reopened), so segments tiered since the last trigger, and
  topics a ``subscribePattern`` newly matches, are picked up; a
  partition seen for the first time starts at its remote log start, as Spark starts new
  partitions at their earliest offset;
* the latest offset of a partition is its remote log end, or with read_committed its remote last
  stable offset (:mod:`gateway.spark.stable`), the way a broker bounds a read_committed
  consumer;
* ``maxOffsetsPerTrigger`` caps a micro-batch, shared among partitions in proportion to what
  each has to read; ``minOffsetsPerTrigger`` waits for that many new offsets, for at most
  ``maxTriggerDelay`` since the last micro-batch;
* a micro-batch plans its splits with the batch planner
  (:func:`gateway.spark.driver.plan_ranges`), so records are read, checked and proven exactly
  as by a batch read. Offsets a checkpoint asks for that the remote tier no longer holds (a
  segment deleted by retention under a running query, a hole in the lineage) fail the query
  with :class:`~gateway.errors.RemoteGapError` naming them, or with ``failOnDataLoss=false``
  are skipped with a warning on the driver's log, as Spark's Kafka source does; a partition
  that disappeared from the metadata likewise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.errors import ConfigurationError, RemoteGapError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.service.locate import remote_bounds
from gateway.service.types import IsolationLevel
from gateway.spark.driver import (
    Claims,
    ReadPlan,
    context_of,
    plan_ranges,
    resolve_ranges,
    subscribed_partitions,
)
from gateway.spark.options import ReadOptions, StreamLimits
from gateway.spark.rescan import Rescan
from gateway.spark.stable import stable_end

log = logging.getLogger("gateway.spark.driver")

Key = tuple[str, int]
Offsets = dict[str, dict[str, int]]
"""Spark's JSON form: ``{"topic": {"partition": offset}}``."""


def to_json(offsets: Mapping[Key, int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offsets: Mapping[str, object]) -> dict[Key, int]:
    """A checkpoint's offsets, checked: a malformed one is a :class:`ConfigurationError`."""
    out: dict[Key, int] = {}
    for topic, parts in offsets.items():
        if not isinstance(parts, Mapping):
            raise ConfigurationError(f"stream offsets: {topic!r} does not map partitions")
        for partition, offset in parts.items():
            if not str(partition).isdigit() or isinstance(offset, bool):
                raise ConfigurationError(f"stream offsets: {topic}/{partition}: {offset!r}")
            if not isinstance(offset, int) or offset < 0:
                raise ConfigurationError(f"stream offsets: {topic}/{partition}: {offset!r}")
            out[topic, int(partition)] = offset
    return out


def share(lags: Mapping[Key, int], limit: int) -> dict[Key, int]:
    """How many offsets each partition reads when ``limit`` caps their sum: in proportion to
    each one's lag (rounded down, the remainder to the largest lags first), never more than
    its lag, and exactly ``min(limit, sum of lags)`` in all."""
    total = sum(lags.values())
    if total <= limit:
        return dict(lags)
    taken = {k: lag * limit // total for k, lag in lags.items()}
    left = limit - sum(taken.values())
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
    """The end offsets of the next micro-batch: ``latest``, capped by ``maxOffsetsPerTrigger``;
    ``start`` itself (no batch) while fewer than ``minOffsetsPerTrigger`` new offsets wait and
    ``maxTriggerDelay`` has not passed since the last batch."""
    lags = {k: max(0, latest[k] - start.get(k, latest[k])) for k in latest}
    new = sum(lags.values())
    ends = {**start, **{k: max(v, start.get(k, v)) for k, v in latest.items()}}
    waiting = limits.min_offsets is not None and new < limits.min_offsets
    if waiting and waited_ms < limits.max_trigger_delay_ms:
        return {**{k: start.get(k, v) for k, v in latest.items()}, **start}
    if limits.max_offsets is not None and new > limits.max_offsets:
        taken = share(lags, limits.max_offsets)
        for k, n in taken.items():
            ends[k] = start.get(k, latest[k]) + n
    return ends


@dataclass
class _Loaded:
    rlmm: RemoteLogMetadataManager
    claims: Claims


class StreamPlanner:
    """One streaming query's driver side (lives as long as the query's reader)."""

    def __init__(self, opts: ReadOptions, clock: Callable[[], float] = time.monotonic) -> None:
        if opts.ending_given:
            raise ConfigurationError(
                "endingOffsets, endingTimestamp and endingOffsetsByTimestamp are not valid in a "
                "streaming query (it reads as segments are tiered); use a batch read"
            )
        self.opts = opts
        self._clock = clock
        self._last_batch = clock()
        self._rescan = Rescan(opts)
        self._loaded: _Loaded | None = None
        self._target: dict[Key, int] | None = None  # Trigger.AvailableNow's ends

    # --- metadata ---

    def _reload(self) -> _Loaded:
        """Fresh metadata: what was tiered (or deleted) since the last trigger."""
        self._loaded = _Loaded(*self._rescan.refresh())
        return self._loaded

    def _current(self) -> _Loaded:
        return self._loaded if self._loaded is not None else self._reload()

    def close(self) -> None:
        self._loaded = None
        self._rescan.close()

    # --- offsets ---

    def initial(self) -> Offsets:
        loaded = self._reload()
        ranges = resolve_ranges(self.opts, loaded.rlmm, loaded.claims)
        return to_json({(tp.topic, tp.partition): lo for tp, lo, _ in ranges})

    def _ends(self, loaded: _Loaded) -> dict[TopicIdPartition, int]:
        ctx = context_of(self.opts)
        committed = self.opts.isolation is IsolationLevel.READ_COMMITTED
        out = {}
        for tp in subscribed_partitions(loaded.rlmm, self.opts, loaded.claims, empty_ok=True):
            out[tp] = (
                stable_end(loaded.rlmm, tp, ctx) if committed else remote_bounds(loaded.rlmm, tp)[1]
            )
        return out

    def freeze(self) -> None:
        """Trigger.AvailableNow: read what is tiered now, nothing tiered later."""
        loaded = self._reload()
        self._target = {(tp.topic, tp.partition): end for tp, end in self._ends(loaded).items()}

    def latest(self, start_json: Mapping[str, object], limits: StreamLimits) -> Offsets:
        """The end offsets of the next micro-batch from ``start`` (the previous one's end): the
        latest offsets, within ``limits`` (the engine's, from the options or none)."""
        start = from_json(start_json)
        loaded = self._reload()
        ends = self._ends(loaded)
        latest: dict[Key, int] = {}
        for tp, tiered in ends.items():
            key = (tp.topic, tp.partition)
            end = tiered
            if self._target is not None:
                if key not in self._target:
                    if key in start:
                        latest[key] = start[key]
                    continue  # appeared after the AvailableNow target was taken
                end = min(tiered, self._target[key])
            first = remote_bounds(loaded.rlmm, tp)[0]
            latest[key] = max(end, start.get(key, first))
            if key not in start:  # a new partition: from its earliest, as Spark's
                start = {**start, key: first}
        self._gone(set(start) - set(latest))
        now = self._clock()
        ends_next = admit(start, latest, limits, (now - self._last_batch) * 1000)
        if ends_next != start:
            self._last_batch = now
        return to_json(ends_next)

    def _gone(self, keys: set[Key]) -> None:
        for topic, partition in sorted(keys):
            message = (
                f"partition {partition} of {topic} is no longer in the remote tier (deleted "
                "under the running query)"
            )
            if self.opts.fail_on_data_loss:
                raise RemoteGapError(f"{message} (failOnDataLoss=false skips it)", -1, -1)
            log.warning("%s: skipped (failOnDataLoss=false)", message)

    def plan(self, start_json: Mapping[str, object], end_json: Mapping[str, object]) -> ReadPlan:
        """The splits of the micro-batch ``[start, end)``."""
        start = from_json(start_json)
        end = from_json(end_json)
        loaded = self._current()
        known = {
            (tp.topic, tp.partition): tp
            for tp in subscribed_partitions(loaded.rlmm, self.opts, loaded.claims, empty_ok=True)
        }
        ranges = []
        for key, hi in sorted(end.items()):
            tp = known.get(key)
            if tp is None:
                self._gone({key})
                continue
            lo = start.get(key, remote_bounds(loaded.rlmm, tp)[0])
            if lo > hi:
                raise ConfigurationError(
                    f"stream offsets: partition {key[1]} of {key[0]} ends at {hi}, before its "
                    f"start {lo}"
                )
            ranges.append((tp, lo, hi))
        return plan_ranges(self.opts, loaded.rlmm, loaded.claims, ranges)

    def committed(self) -> None:
        """A micro-batch is committed: the next one plans from the next trigger's metadata."""
        self._loaded = None
