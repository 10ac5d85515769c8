"""One fake :class:`~gateway.service.protocol.Service` for the adapters' unit tests.

It holds a catalog (:class:`FakeTopic` → :class:`FakePartition` → :class:`FakeBatch`) and
answers from it as :class:`gateway.service.core.GatewayService` does; ``tests/unit/
test_fake_contract.py`` runs the same cases against it and the real service on the demo bucket.

* ``fetch``: whole batches from the first one whose last offset is >= ``offset``, at least one,
  more while ``max_bytes`` allows (one :class:`FetchedBatches` per run of a segment); at exactly
  the log end none (``next_offset`` is ``offset``), outside ``[start, end]``
  ``OffsetOutOfRangeError``; a negative offset or a ``max_bytes`` < 1 ``InvalidRequestError``.
  read_committed stops before the last stable offset (``stable``) and carries it and the
  aborted transactions overlapping the batches read (those whose ABORT marker, in ``markers``,
  is before them are left out); at or past the last stable offset, below the end,
  ``TransactionPendingError``.
* ``list_offsets``: earliest/latest/latest_tiered/earliest_local/earliest_pending_upload from
  the bounds and the leader epoch lineage; ``max_timestamp`` and a time from the records'
  timestamps (control records count, as in Kafka), the batch's leader epoch; read_committed:
  latest is at most the last stable offset, a match at or past it is none.

Knobs of the adapters' tests: ``fail`` makes a method raise; ``fail_fetch_after`` makes every
fetch after the first n raise ``fail_fetch_with``; ``gates`` holds a partition's fetches until its
event is set; ``fetch_delay_s``; every call is recorded in ``calls`` (name, arguments);
``most_reading`` is the most fetches at once. ``records`` decodes a fetch (opaque batches in
the HTTP tests); ``aborted`` are the offsets read_committed decoding drops and ``values`` the
values that replace a record's, both passed to it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    NotReadyError,
    OffsetOutOfRangeError,
    TransactionPendingError,
    UnknownTopicOrPartitionError,
)
from gateway.metadata.follow import FollowStatus
from gateway.service.protocol import OffsetSpec
from gateway.service.types import (
    AbortedTransaction,
    FetchedBatches,
    FetchedRecord,
    FetchResult,
    IsolationLevel,
    OffsetResult,
    PartitionInfo,
    Readiness,
    SegmentInfo,
    UnreadableManifest,
)

NOT_FOUND = OffsetResult(-1, -1, None)
Decoder = Callable[[int, frozenset[int], Mapping[int, bytes]], FetchedRecord]
"""A record at an offset, given the aborted offsets and the replaced values."""


@dataclass(frozen=True)
class FakeBatch:
    base: int
    last: int
    data: bytes
    timestamps: tuple[int, ...]  # of each offset from base to last
    epoch: int | None = None  # the batch's partition leader epoch
    segment: int = 0  # the start offset of the segment holding it


@dataclass
class FakePartition:
    batches: list[FakeBatch] = field(default_factory=list)
    epochs: tuple[tuple[int, int], ...] = ()  # (epoch, start offset) lineage
    stable: int | None = None  # the last stable offset (None: the end)
    aborted: tuple[AbortedTransaction, ...] = ()
    segments: list[SegmentInfo] = field(default_factory=list)
    markers: dict[AbortedTransaction, int] = field(default_factory=dict)  # its ABORT's offset
    size: int | None = None  # as stored (None: the batches' bytes)
    segment_count: int | None = None  # None: len(segments) or the segments of the batches

    @property
    def start(self) -> int:
        return self.batches[0].base if self.batches else 0

    @property
    def end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    @property
    def lso(self) -> int:
        return self.end if self.stable is None else min(self.stable, self.end)

    def epoch_for(self, offset: int) -> int | None:
        found = None
        for epoch, start in self.epochs:
            if start <= offset:
                found = epoch
        return found


@dataclass
class FakeTopic:
    ids: list[uuid.UUID]  # newest first
    partitions: dict[int, FakePartition] = field(default_factory=dict)
    read_id: uuid.UUID | None = None  # the incarnation reads resolve to (None: ids[0])

    @property
    def newest(self) -> uuid.UUID:
        return self.read_id or self.ids[0]


@dataclass
class FakeService:
    catalog: dict[str, FakeTopic] = field(default_factory=dict)
    records: Decoder | None = None
    is_ready: bool = True
    not_ready_reason: str | None = None
    unreadable: tuple[UnreadableManifest, ...] = ()
    follow: FollowStatus | None = None  # the followed metadata topic's status, if any
    aborted: frozenset[int] = frozenset()
    values: dict[int, bytes] = field(default_factory=dict)
    fail: dict[str, BaseException] = field(default_factory=dict)
    fail_fetch_after: int | None = None
    fail_fetch_with: BaseException = field(
        default_factory=lambda: GatewayError("should not happen")
    )
    gates: dict[int, asyncio.Event] = field(default_factory=dict)
    fetch_delay_s: float = 0.0
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reading: int = 0  # fetches under way now
    most_reading: int = 0  # the most at once
    fake_gets: int = 7  # the core's one metric: tiered_gateway_fake_gets_total
    opened: int = 0
    closed: int = 0

    def _enter(self, name: str, **kwargs: Any) -> None:
        self.calls.append((name, kwargs))
        if name in self.fail:
            raise self.fail[name]

    def called(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, kwargs in self.calls if n == name]

    def _topic(self, topic: str) -> FakeTopic:
        found = self.catalog.get(topic)
        if found is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
        return found

    def _partition(self, topic: str, partition: int) -> tuple[FakeTopic, FakePartition]:
        found = self._topic(topic)
        if partition not in found.partitions:
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")
        return found, found.partitions[partition]

    def ready(self) -> bool:
        return self.is_ready

    def readiness(self) -> Readiness:
        if not self.is_ready:
            return Readiness(False, self.not_ready_reason, follow=self.follow)
        return Readiness(True, None, self.unreadable, self.follow)

    async def wait_ready(self) -> None:
        if not self.is_ready:
            raise NotReadyError(f"not ready: {self.not_ready_reason}")

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        self._enter("topics")
        return {name: list(t.ids) for name, t in self.catalog.items()}

    def _info(self, topic: str, partition: int) -> PartitionInfo:
        t, p = self._partition(topic, partition)
        size = sum(len(b.data) for b in p.batches) if p.size is None else p.size
        count = p.segment_count
        if count is None:
            count = len(p.segments) or len({b.segment for b in p.batches})
        return PartitionInfo(topic, t.newest, partition, p.start, p.end, size, count, p.epochs)

    async def partitions(self, topic: str) -> list[PartitionInfo]:
        self._enter("partitions", topic=topic)
        return [self._info(topic, p) for p in sorted(self._topic(topic).partitions)]

    async def partition(
        self, topic: str, partition: int, deadline: Deadline | None = None
    ) -> PartitionInfo:
        self._enter("partition", topic=topic, partition=partition)
        return self._info(topic, partition)

    async def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        self._enter("segments", topic=topic, partition=partition)
        return list(self._partition(topic, partition)[1].segments)

    async def _held(self, partition: int) -> None:
        self.reading += 1
        self.most_reading = max(self.most_reading, self.reading)
        try:
            await asyncio.sleep(0)  # let the other reads of a request start, if they may
            gate = self.gates.get(partition)
            if gate is not None:
                await gate.wait()
            if self.fetch_delay_s:
                await asyncio.sleep(self.fetch_delay_s)
        finally:
            self.reading -= 1

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        isolation: IsolationLevel,
        deadline: Deadline,
    ) -> FetchResult:
        self._enter(
            "fetch", topic=topic, partition=partition, offset=offset, max_bytes=max_bytes,
            isolation=isolation, deadline=deadline,
        )  # fmt: skip
        if self.fail_fetch_after is not None and len(self.called("fetch")) > self.fail_fetch_after:
            raise self.fail_fetch_with
        await self._held(partition)
        if offset < 0:
            raise InvalidRequestError(f"offset {offset} is negative", "offset")
        if max_bytes <= 0:
            raise InvalidRequestError(f"max_bytes {max_bytes} must be positive", "max_bytes")
        t, p = self._partition(topic, partition)
        start, end, committed = p.start, p.end, isolation is IsolationLevel.READ_COMMITTED
        if committed and p.lso <= offset < end:
            raise TransactionPendingError(
                f"the transaction starting at offset {p.lso} has no marker",
                log_start_offset=start, log_end_offset=end, last_stable_offset=p.lso,
                topic_id=t.newest,
            )  # fmt: skip
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{start}, {end})", start, end, topic_id=t.newest
            )
        taken: list[FakeBatch] = []
        size = 0
        for b in p.batches:
            if b.last < offset:
                continue
            if (committed and b.base >= p.lso) or (taken and size + len(b.data) > max_bytes):
                break
            taken.append(b)
            size += len(b.data)
        runs: list[list[FakeBatch]] = []  # one per segment, as the service reads them
        for b in taken:
            if runs and runs[-1][0].segment == b.segment:
                runs[-1].append(b)
            else:
                runs.append([b])
        parts = [  # views of the bytes read, as the service's
            FetchedBatches(r[0].segment, memoryview(b"".join(b.data for b in r)), r[0].base,
                           r[-1].last)
            for r in runs
        ]  # fmt: skip
        next_offset = taken[-1].last + 1 if taken else offset
        aborted = None
        if committed:
            # those overlapping the batches read (Kafka's collectAbortedTxns)
            read_from = taken[0].base if taken else offset
            aborted = tuple(
                a for a in p.aborted
                if a.first_offset < next_offset and p.markers.get(a, end) >= read_from
            )  # fmt: skip
        stable = p.lso if committed else None
        return FetchResult(
            topic, t.newest, partition, tuple(parts), next_offset, start, end, aborted, stable
        )

    async def decode(
        self, result: FetchResult, offset: int, isolation: IsolationLevel
    ) -> list[FetchedRecord]:
        self._enter("decode", offset=offset, isolation=isolation)
        assert self.records is not None, "this fake's batches are not decoded"
        committed = isolation is IsolationLevel.READ_COMMITTED
        return [
            self.records(o, self.aborted, self.values)
            for part in result.batches
            for o in range(max(part.first_offset, offset), part.last_offset + 1)
            if not (committed and o in self.aborted)
        ]

    async def list_offsets(
        self,
        topic: str,
        partition: int,
        spec: OffsetSpec,
        deadline: Deadline,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OffsetResult:
        self._enter(
            "list_offsets", topic=topic, partition=partition, spec=spec, deadline=deadline,
            isolation=isolation,
        )  # fmt: skip
        _, p = self._partition(topic, partition)
        start, end = p.start, p.end
        last_epoch = p.epochs[-1][0] if p.epochs else None
        committed = isolation is IsolationLevel.READ_COMMITTED
        if spec == "earliest" or (spec == "earliest_pending_upload" and end == 0):
            return NOT_FOUND if end == 0 else OffsetResult(start, -1, p.epoch_for(start))
        if spec == "latest":
            return OffsetResult(p.lso if committed else end, -1, last_epoch)
        if spec in ("earliest_local", "earliest_pending_upload"):  # the remote log end
            return OffsetResult(end, -1, last_epoch)
        if spec == "latest_tiered":  # the highest remote offset
            return NOT_FOUND if end == 0 else OffsetResult(end - 1, -1, p.epoch_for(end - 1))
        stamped = [(o, ts, b.epoch) for b in p.batches for o, ts in enumerate(b.timestamps, b.base)]
        if spec == "max_timestamp":
            target = max((ts for _, ts, _ in stamped), default=0)
        elif isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
            raise InvalidRequestError(f"timestamp {spec!r}", "timestamp")
        else:
            target = spec
        hit = next((s for s in stamped if s[1] >= target), None)
        if hit is None or (committed and hit[0] >= p.lso):
            return NOT_FOUND
        return OffsetResult(*hit)

    async def catalog_topics(self) -> frozenset[str]:
        return frozenset(self.catalog) if self.is_ready else frozenset()

    @property
    def collector(self) -> Collector:
        return _FakeCollector(self)

    def factory(self) -> Any:
        """A ``service_factory`` for :func:`gateway.api.create_app` that yields this fake."""

        @asynccontextmanager
        async def open_fake(settings: Settings) -> AsyncIterator[FakeService]:
            self.opened += 1
            try:
                yield self
            finally:
                self.closed += 1

        return open_fake


class _FakeCollector(Collector):
    def __init__(self, fake: FakeService) -> None:
        self._fake = fake

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("tiered_gateway_fake_gets", "GETs", value=self._fake.fake_gets)
