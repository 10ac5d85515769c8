"""Batches from independent encoders (kafka-python, aiokafka pure-Python and C builders).

Producers never write control batches or LogAppendTime batches; the broker does. ``as_broker``
applies those broker-side rewrites to an independently built batch: set the attribute bits,
set maxTimestamp for LogAppendTime, set the partition leader epoch, recompute the CRC.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
from aiokafka.record._crecords.default_records import (
    DefaultRecordBatchBuilder as AioCBuilder,
)
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as AioPyBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Rec:
    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


BUILDERS: dict[str, Callable[..., Any]] = {
    "kafka-python": KafkaPythonBuilder,
    "aiokafka-py": AioPyBuilder,
    "aiokafka-c": AioCBuilder,
}


def build(
    builder: str,
    base_offset: int,
    records: Sequence[Rec],
    *,
    codec: int = 0,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    b = BUILDERS[builder](
        2, codec, int(transactional), producer_id, producer_epoch, base_sequence, 1 << 30
    )
    for r in records:
        b.append(r.offset_delta, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base_offset)  # builders start at 0; the log assigns offsets
    # kafka-python leaves partitionLeaderEpoch at 0 where the Java producer writes -1; the field
    # is outside the CRC and the broker overwrites it, so normalise to the Java producer's value.
    struct.pack_into(">i", raw, 12, -1)
    return bytes(raw)


def as_broker(
    raw: bytes,
    *,
    control: bool = False,
    log_append_time: int | None = None,
    leader_epoch: int | None = None,
) -> bytes:
    out = bytearray(raw)
    if control:
        out[22] |= 0x20
    if log_append_time is not None:
        out[22] |= 0x08
        struct.pack_into(">q", out, 35, log_append_time)
    if leader_epoch is not None:
        struct.pack_into(">i", out, 12, leader_epoch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)
