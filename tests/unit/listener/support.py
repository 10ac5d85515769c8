"""A small fake :class:`~gateway.service.protocol.Service` for the listener's unit tests.

Topic ``t`` (partitions 0 and 1): each holds ``BATCHES`` real record batches (kafka-python's
builder) of ``PER_BATCH`` records; fetches answer whole batches from the one holding the
offset within ``max_bytes`` (at least one), at the log end nothing, outside it
OFFSET_OUT_OF_RANGE, as the service does. ``gates`` holds a partition's fetches until its
event is set; ``calls`` records each fetch, ``most_reading`` the most fetches at once;
``present`` are the partitions with remote data; ``stable`` is the remote last stable offset
(read_committed reads stop there; at or past it, below the end, ``TransactionPendingError``).
``OLD_TOPIC_ID`` is an older incarnation of ``t`` still in the bucket (listed by ``topics``
after the newest, never read: as the service, reads resolve a name to its newest incarnation);
``recreate`` makes ``RECREATED_ID`` the newest from the next read on (a topic re-created
between a Fetch's id lookup and its read).
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.config import settings_for
from gateway.deadline import Deadline
from gateway.errors import (
    OffsetOutOfRangeError,
    TransactionPendingError,
    UnknownTopicOrPartitionError,
)
from gateway.listener.context import Context
from gateway.listener.dispatch import VERSIONS
from gateway.listener.framing import Reply, Request, decode
from gateway.service.admission import ByteBudget
from gateway.service.protocol import OffsetSpec
from gateway.service.types import (
    AbortedTransaction,
    FetchedBatches,
    FetchResult,
    IsolationLevel,
    OffsetResult,
    PartitionInfo,
)
from tests.unit.fake_rules import check_request
from tests.unit.kafka.independent import Rec, build

TOPIC = "t"
TOPIC_ID = uuid.UUID("70e7a400-1c72-5923-ae8f-a41d6500c5fa")
OLD_TOPIC_ID = uuid.UUID("0d1d0000-0000-4000-8000-000000000001")
RECREATED_ID = uuid.UUID("0e1e0000-0000-4000-8000-000000000002")
BATCHES = 6
PER_BATCH = 3
END = BATCHES * PER_BATCH
ABORTED = (AbortedTransaction(7, 3),)


def batch(base: int) -> bytes:
    records = [Rec(i, 1_700_000_000_000 + base + i, b"k", bytes(40), ()) for i in range(PER_BATCH)]
    return build("kafka-python", base, records)


BATCH_BYTES = [batch(b * PER_BATCH) for b in range(BATCHES)]


@dataclass
class FakeService:
    gates: dict[int, asyncio.Event] = field(default_factory=dict)
    calls: list[tuple[int, int, int]] = field(default_factory=list)
    present: tuple[int, ...] = (0, 1)  # the partitions with remote data
    reading: int = 0  # fetches under way now
    most_reading: int = 0  # the most at once
    stable: int = END  # the last stable offset (a batch boundary)
    recreate: bool = False  # reads find RECREATED_ID as the newest incarnation

    @property
    def newest(self) -> uuid.UUID:
        """The id a read by name resolves to."""
        return RECREATED_ID if self.recreate else TOPIC_ID

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        return {TOPIC: [TOPIC_ID, OLD_TOPIC_ID]}

    async def partitions(self, topic: str) -> list[PartitionInfo]:
        if topic != TOPIC:
            raise UnknownTopicOrPartitionError(topic)
        return [await self.partition(topic, p) for p in self.present]

    async def partition(self, topic: str, partition: int) -> PartitionInfo:
        if topic != TOPIC or partition not in self.present:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition}")
        return PartitionInfo(TOPIC, self.newest, partition, 0, END, 1, 1, ((1, 0), (3, 5)))

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
        self.calls.append((partition, offset, max_bytes))
        check_request(offset, max_bytes)
        self.reading += 1
        self.most_reading = max(self.most_reading, self.reading)
        try:
            await asyncio.sleep(0)  # let the other reads of the request start, if they may
            gate = self.gates.get(partition)
            if gate is not None:
                await gate.wait()
        finally:
            self.reading -= 1
        if topic != TOPIC or partition not in self.present:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition}")
        if offset > END:
            raise OffsetOutOfRangeError("past the end", 0, END, topic_id=self.newest)
        committed = isolation is IsolationLevel.READ_COMMITTED
        if committed and self.stable <= offset < END:
            raise TransactionPendingError(
                "pending",
                log_start_offset=0,
                log_end_offset=END,
                last_stable_offset=self.stable,
                topic_id=self.newest,
            )
        first = offset // PER_BATCH
        limit = self.stable // PER_BATCH if committed else BATCHES
        data = bytearray()
        for raw in BATCH_BYTES[first:limit]:
            if data and len(data) + len(raw) > max_bytes:
                break
            data += raw
        last = first + _count(bytes(data))
        parts = () if not data else (
            FetchedBatches(0, memoryview(bytes(data)), first * PER_BATCH, last * PER_BATCH - 1),
        )  # fmt: skip
        aborted = ABORTED if committed else None
        nxt = last * PER_BATCH if data else offset
        stable = self.stable if committed else None
        return FetchResult(TOPIC, self.newest, partition, parts, nxt, 0, END, aborted, stable)

    async def list_offsets(
        self,
        topic: str,
        partition: int,
        spec: OffsetSpec,
        deadline: Deadline,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OffsetResult:
        if topic != TOPIC or partition not in self.present:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition}")
        if spec == "earliest":
            return OffsetResult(0, -1, 3)
        if spec == "latest":
            committed = isolation is IsolationLevel.READ_COMMITTED
            return OffsetResult(self.stable if committed else END, -1, 3)
        if spec == "max_timestamp":
            return OffsetResult(END - 1, 1_700_000_000_000 + END - 1, 3)
        if spec in ("earliest_local", "earliest_pending_upload"):  # the remote log end
            return OffsetResult(END, -1, 3)
        if spec == "latest_tiered":  # the highest remote offset
            return OffsetResult(END - 1, -1, 3)
        assert isinstance(spec, int)
        offset = max(spec - 1_700_000_000_000, 0)  # the first record at or after the time
        if offset >= END:
            return OffsetResult(-1, -1, None)
        return OffsetResult(offset, 1_700_000_000_000 + offset, 3)


def _count(data: bytes) -> int:
    """The number of whole batches in ``data``."""
    n = pos = 0
    while pos < len(data):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
        n += 1
    return n


def context(service: Any | None = None, *, port: int = 9092, **settings: Any) -> Context:
    budget = ByteBudget(1 << 24)
    return Context(service or FakeService(), settings_for(store="file:///", workers=1, **settings),
                   budget, "127.0.0.1", port)  # fmt: skip


def request(message: Any, correlation_id: int = 1) -> bytes:
    """A client's request frame payload (no size prefix), as kafka-python encodes it."""
    message.with_header(correlation_id=correlation_id, client_id="unit")
    return bytes(message.encode(header=True))


def decoded(payload: bytes) -> Request:
    return decode(payload, VERSIONS)


def unframe(reply: Reply | Sequence[bytes | bytearray | memoryview] | None) -> bytes:
    """A response frame's payload (header and body), its size prefix checked."""
    assert reply is not None
    buffers = reply.buffers if isinstance(reply, Reply) else reply
    data = b"".join(bytes(b) for b in buffers)
    assert struct.unpack(">i", data[:4])[0] == len(data) - 4
    return data[4:]
