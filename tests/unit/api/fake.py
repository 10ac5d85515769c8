"""A fake :class:`~gateway.service.protocol.Service` with canned data, for router tests.

One topic ``orders`` (partitions 0 and 1) whose partition 0 holds ``BATCHES`` batches of
``RECORDS_PER_BATCH`` records each, every batch ``BATCH_BYTES`` bytes of opaque data. Records at
offsets listed in ``aborted`` are dropped by read_committed decoding; ``values`` replaces the
values (and the first header's value) of records by offset. A fetch at exactly the log end
answers no batches (Kafka's fetch at the high watermark); past it, 416. ``fail`` makes a method
raise; ``fail_fetch_after`` makes every fetch after the first n raise. Every call is recorded.

``last_stable`` is partition 0's last stable offset (default: the log end, no open
transaction). A read_committed fetch stops before it (the batch holding it is dropped,
``next_offset`` is it) and carries it; at or past it, below the end, it raises
``TransactionPendingError`` with the bounds, as the service does. ListOffsets with
read_committed answers it for latest and none for a match at or past it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import (
    GatewayError,
    NotReadyError,
    OffsetOutOfRangeError,
    TransactionPendingError,
    UnknownTopicOrPartitionError,
)
from gateway.kafka.records import Record
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
from tests.unit.fake_rules import check_request

TOPIC = "orders"
TOPIC_ID = uuid.UUID("70e7a400-1c72-5923-ae8f-a41d6500c5fa")
OLD_TOPIC_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")
BATCHES = 20
RECORDS_PER_BATCH = 5
BATCH_BYTES = 100
LOG_END = BATCHES * RECORDS_PER_BATCH


def batch_data(index: int) -> bytes:
    return bytes([index]) * BATCH_BYTES


def make_record(offset: int, values: dict[int, bytes] | None = None) -> FetchedRecord:
    value = None if offset % 7 == 6 else f"v{offset}".encode()
    header = b"\x00\xff"
    if values is not None and offset in values:
        value = header = values[offset]
    headers: list[tuple[str, bytes | None]] = [("h", header), ("n", None)]
    return FetchedRecord(
        record=Record(
            offset,
            1_700_000_000_000 + offset,
            None if offset % 2 else f"k{offset}".encode(),
            value,
            headers,
        ),
        offset=offset,
        timestamp=1_700_000_000_000 + offset,
        log_append_time=offset >= LOG_END - RECORDS_PER_BATCH,
        leader_epoch=offset // 50,
    )


@dataclass
class FakeService:
    is_ready: bool = True
    not_ready_reason: str | None = None
    unreadable: tuple[UnreadableManifest, ...] = ()
    aborted: frozenset[int] = frozenset({10, 11, 12})
    values: dict[int, bytes] = field(default_factory=dict)
    fail: dict[str, BaseException] = field(default_factory=dict)
    fail_fetch_after: int | None = None
    fail_fetch_with: BaseException = field(
        default_factory=lambda: GatewayError("should not happen")
    )
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fake_gets: int = 7  # the core's one metric: tiered_gateway_fake_gets_total
    fetch_delay_s: float = 0.0
    follow: FollowStatus | None = None  # the followed metadata topic's status, if any
    last_stable: int | None = None
    opened: int = 0
    closed: int = 0

    def _enter(self, name: str, **kwargs: Any) -> None:
        self.calls.append((name, kwargs))
        if name in self.fail:
            raise self.fail[name]

    def called(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, kwargs in self.calls if n == name]

    def _check(self, topic: str, partition: int) -> None:
        if topic != TOPIC or partition not in (0, 1):
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")

    def ready(self) -> bool:
        return self.is_ready

    def readiness(self) -> Readiness:
        if not self.is_ready:
            return Readiness(False, self.not_ready_reason, follow=self.follow)
        return Readiness(True, None, self.unreadable, self.follow)

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        self._enter("topics")
        return {TOPIC: [TOPIC_ID, OLD_TOPIC_ID], "audit": [OLD_TOPIC_ID]}

    def _info(self, partition: int) -> PartitionInfo:
        end = LOG_END if partition == 0 else 0
        return PartitionInfo(
            TOPIC,
            TOPIC_ID,
            partition,
            0,
            end,
            BATCHES * BATCH_BYTES if end else 0,
            2 if end else 0,
            ((0, 0), (2, 50)) if end else (),
        )

    async def partitions(self, topic: str) -> list[PartitionInfo]:
        self._enter("partitions", topic=topic)
        self._check(topic, 0)
        return [self._info(1), self._info(0)]

    async def partition(self, topic: str, partition: int) -> PartitionInfo:
        self._enter("partition", topic=topic, partition=partition)
        self._check(topic, partition)
        return self._info(partition)

    async def segments(self, topic: str, partition: int) -> list[SegmentInfo]:
        self._enter("segments", topic=topic, partition=partition)
        self._check(topic, partition)
        return [
            SegmentInfo(
                "AAAAAAAAAAAAAAAAAAAAAQ",
                0,
                49,
                "COPY_SEGMENT_FINISHED",
                1000,
                5,
                9,
                ((0, 0),),
                True,
            ),
            SegmentInfo(
                "AAAAAAAAAAAAAAAAAAAAAg",
                50,
                99,
                "COPY_SEGMENT_FINISHED",
                1000,
                6,
                10,
                ((2, 50),),
                False,
            ),
        ]

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
            "fetch", offset=offset, max_bytes=max_bytes, isolation=isolation, deadline=deadline
        )
        if self.fail_fetch_after is not None and len(self.called("fetch")) > self.fail_fetch_after:
            raise self.fail_fetch_with
        check_request(offset, max_bytes)
        self._check(topic, partition)
        if self.fetch_delay_s:
            await asyncio.sleep(self.fetch_delay_s)
        end = LOG_END if partition == 0 else 0
        if not 0 <= offset <= end:
            raise OffsetOutOfRangeError(f"offset {offset} outside [0, {end})", 0, end)
        committed = isolation is IsolationLevel.READ_COMMITTED
        stable = self.stable(partition)
        if committed and stable <= offset < end:
            raise TransactionPendingError(
                f"the transaction starting at offset {stable} has no marker",
                log_start_offset=0,
                log_end_offset=end,
                last_stable_offset=stable,
            )
        first = offset // RECORDS_PER_BATCH
        last = (stable if committed else end) // RECORDS_PER_BATCH  # a read stops at the LSO
        batches: list[FetchedBatches] = []
        size = 0
        for index in range(first, last):
            if batches and size + BATCH_BYTES > max_bytes:
                break
            base = index * RECORDS_PER_BATCH
            batches.append(
                FetchedBatches(base, batch_data(index), base, base + RECORDS_PER_BATCH - 1)
            )
            size += BATCH_BYTES
        aborted = None
        if committed:
            aborted = (AbortedTransaction(42, min(self.aborted)),) if self.aborted else ()
        return FetchResult(
            TOPIC,
            TOPIC_ID,
            partition,
            tuple(batches),
            batches[-1].last_offset + 1 if batches else offset,
            0,
            end,
            aborted,
            stable if committed else None,
        )

    def stable(self, partition: int) -> int:
        """The partition's last stable offset (a batch's base offset, as a transaction's first
        offset is)."""
        if partition != 0:
            return 0
        stable = LOG_END if self.last_stable is None else self.last_stable
        assert 0 <= stable <= LOG_END and stable % RECORDS_PER_BATCH == 0, stable
        return stable

    async def decode(
        self, result: FetchResult, offset: int, isolation: IsolationLevel
    ) -> list[FetchedRecord]:
        self._enter("decode", offset=offset, isolation=isolation)
        out = []
        for part in result.batches:
            for o in range(part.first_offset, part.last_offset + 1):
                if o < offset:
                    continue
                if isolation is IsolationLevel.READ_COMMITTED and o in self.aborted:
                    continue
                out.append(make_record(o, self.values))
        return out

    async def list_offsets(
        self,
        topic: str,
        partition: int,
        spec: OffsetSpec,
        deadline: Deadline,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OffsetResult:
        self._enter("list_offsets", spec=spec, deadline=deadline, isolation=isolation)
        self._check(topic, partition)
        committed = isolation is IsolationLevel.READ_COMMITTED
        if spec == "earliest":
            return OffsetResult(0, -1, 0)
        if spec == "latest":
            return OffsetResult(self.stable(0) if committed else LOG_END, -1, 2)
        found = LOG_END - 1 if spec == "max_timestamp" else int(spec) - 1_700_000_000_000
        if found >= (self.stable(0) if committed else LOG_END):  # read_committed: at the LSO
            return OffsetResult(-1, -1, None)
        if spec == "max_timestamp":
            return OffsetResult(LOG_END - 1, 1_700_000_000_000 + LOG_END - 1, 2)
        return OffsetResult(max(found, 0), 1_700_000_000_000 + max(found, 0), 0)

    async def wait_ready(self) -> None:
        if not self.is_ready:
            raise NotReadyError(f"not ready: {self.not_ready_reason}")

    async def catalog_topics(self) -> frozenset[str]:
        return frozenset((TOPIC, "audit")) if self.is_ready else frozenset()

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
