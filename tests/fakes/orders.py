"""The HTTP tests' catalog for :class:`tests.fakes.service.FakeService`: canned, opaque data.

Topic ``orders`` (partitions 0 and 1, its older incarnation ``OLD_TOPIC_ID`` listed after it)
and ``audit`` (no partitions). Partition 0 holds ``BATCHES`` batches of ``RECORDS_PER_BATCH``
records, each ``BATCH_BYTES`` bytes of opaque data, in two segments (0-49 at leader epoch 0,
50-99 at epoch 2); partition 1 is empty. Record ``o`` has the timestamp ``T0 + o``; decoding
makes the records of :func:`make_record`. Offsets 10-12 are aborted (one transaction, producer
42); ``last_stable`` is partition 0's last stable offset (default: the log end).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from gateway.kafka.records import Record
from gateway.service.types import AbortedTransaction, FetchedRecord, SegmentInfo
from tests.fakes.service import FakeBatch, FakePartition, FakeService, FakeTopic

TOPIC = "orders"
TOPIC_ID = uuid.UUID("70e7a400-1c72-5923-ae8f-a41d6500c5fa")
OLD_TOPIC_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")
BATCHES = 20
RECORDS_PER_BATCH = 5
BATCH_BYTES = 100
LOG_END = BATCHES * RECORDS_PER_BATCH
T0 = 1_700_000_000_000
ABORTED = frozenset({10, 11, 12})
SEGMENTS = [
    SegmentInfo("AAAAAAAAAAAAAAAAAAAAAQ", 0, 49, "COPY_SEGMENT_FINISHED", 1000, 5, 9, ((0, 0),),
                True),
    SegmentInfo("AAAAAAAAAAAAAAAAAAAAAg", 50, 99, "COPY_SEGMENT_FINISHED", 1000, 6, 10,
                ((2, 50),), False),
]  # fmt: skip


def batch_data(index: int) -> bytes:
    return bytes([index]) * BATCH_BYTES


def make_record(
    offset: int, aborted: frozenset[int] = ABORTED, values: Mapping[int, bytes] | None = None
) -> FetchedRecord:
    value = None if offset % 7 == 6 else f"v{offset}".encode()
    header = b"\x00\xff"
    if values is not None and offset in values:
        value = header = values[offset]
    headers: list[tuple[str, bytes | None]] = [("h", header), ("n", None)]
    return FetchedRecord(
        record=Record(offset, T0 + offset, None if offset % 2 else f"k{offset}".encode(), value,
                      headers),
        offset=offset,
        timestamp=T0 + offset,
        log_append_time=offset >= LOG_END - RECORDS_PER_BATCH,
        leader_epoch=offset // 50,
    )  # fmt: skip


def orders_catalog(last_stable: int | None = None) -> dict[str, FakeTopic]:
    batches = []
    for index in range(BATCHES):
        base = index * RECORDS_PER_BATCH
        last = base + RECORDS_PER_BATCH - 1
        segment = 0 if base < 50 else 50
        stamps = tuple(T0 + o for o in range(base, last + 1))
        batches.append(FakeBatch(base, last, batch_data(index), stamps, segment // 25, segment))
    zero = FakePartition(
        batches, ((0, 0), (2, 50)), last_stable, (AbortedTransaction(42, min(ABORTED)),),
        list(SEGMENTS),
    )  # fmt: skip
    return {
        TOPIC: FakeTopic([TOPIC_ID, OLD_TOPIC_ID], {0: zero, 1: FakePartition()}),
        "audit": FakeTopic([OLD_TOPIC_ID]),
    }


def orders(**knobs: Any) -> FakeService:
    """The HTTP tests' fake; ``knobs`` are :class:`FakeService` fields."""
    knobs.setdefault("aborted", ABORTED)
    return FakeService(orders_catalog(), make_record, **knobs)
