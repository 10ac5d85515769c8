"""The listener's unit tests: their catalog for :class:`tests.fakes.service.FakeService`,
Context builders and framing helpers.

Topic ``t`` (partitions ``present``, default 0 and 1): each holds ``BATCHES`` real record
batches (kafka-python's builder) of ``PER_BATCH`` records, record ``o`` at ``T0 + o``, leader
epochs 1 from offset 0 and 3 from 5; ``stable`` is each partition's last stable offset (a batch
boundary), ``ABORTED`` its aborted transaction. ``OLD_TOPIC_ID`` is an older incarnation of
``t`` still in the bucket (listed by ``topics`` after the newest, never read: as the service,
reads resolve a name to its newest incarnation); ``recreate`` makes ``RECREATED_ID`` the one
reads resolve to (a topic re-created between a Fetch's id lookup and its read).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

from gateway.config import settings_for
from gateway.listener.context import Context
from gateway.listener.dispatch import VERSIONS
from gateway.listener.framing import Reply, Request, decode
from gateway.service.admission import ByteBudget
from gateway.service.types import (
    AbortedTransaction,
)
from tests.fakes.service import FakeBatch, FakePartition, FakeService, FakeTopic
from tests.unit.kafka.independent import Rec, build

TOPIC = "t"
TOPIC_ID = uuid.UUID("70e7a400-1c72-5923-ae8f-a41d6500c5fa")
OLD_TOPIC_ID = uuid.UUID("0d1d0000-0000-4000-8000-000000000001")
RECREATED_ID = uuid.UUID("0e1e0000-0000-4000-8000-000000000002")
BATCHES = 6
PER_BATCH = 3
END = BATCHES * PER_BATCH
ABORTED = (AbortedTransaction(7, 3),)
EPOCHS = ((1, 0), (3, 5))
T0 = 1_700_000_000_000


def batch(base: int) -> bytes:
    records = [Rec(i, T0 + base + i, b"k", bytes(40), ()) for i in range(PER_BATCH)]
    return build("kafka-python", base, records)


BATCH_BYTES = [batch(b * PER_BATCH) for b in range(BATCHES)]


def catalog(
    *, present: tuple[int, ...] = (0, 1), stable: int = END, recreate: bool = False
) -> dict[str, FakeTopic]:
    def partition() -> FakePartition:
        batches = [
            FakeBatch(base, base + PER_BATCH - 1, raw,
                      tuple(T0 + o for o in range(base, base + PER_BATCH)), 1 if base < 5 else 3)
            for base, raw in zip(range(0, END, PER_BATCH), BATCH_BYTES, strict=True)
        ]  # fmt: skip
        return FakePartition(batches, EPOCHS, stable, ABORTED)

    read_id = RECREATED_ID if recreate else None
    return {TOPIC: FakeTopic([TOPIC_ID, OLD_TOPIC_ID], {p: partition() for p in present}, read_id)}


def fake_service(
    *, present: tuple[int, ...] = (0, 1), stable: int = END, recreate: bool = False, **knobs: Any
) -> FakeService:
    """The fake over :func:`catalog`; ``knobs`` are :class:`FakeService` fields."""
    return FakeService(catalog(present=present, stable=stable, recreate=recreate), **knobs)


def fetches(service: FakeService) -> list[tuple[int, int, int]]:
    """The fetches asked of ``service``: (partition, offset, max_bytes)."""
    return [(c["partition"], c["offset"], c["max_bytes"]) for c in service.called("fetch")]


def context(service: Any | None = None, *, port: int = 9092, **settings: Any) -> Context:
    budget = ByteBudget(1 << 24)
    return Context(service or fake_service(), settings_for(store="file:///", workers=1, **settings),
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
