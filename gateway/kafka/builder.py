"""Build v2 record batches byte for byte as the Java producer writes them (the broker then sets
the partition leader epoch, which the CRC does not cover). Layout: :mod:`gateway.kafka.batch`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import crc32c

from gateway.kafka.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2
from gateway.kafka.codecs import Codec, compress
from gateway.kafka.control import ControlRecordType, EndTransactionMarker
from gateway.kafka.records import Header, encode_record

_CRC_FIELD: Final = struct.Struct(">I")
_CRC_OFFSET: Final = 17
_CRC_START: Final = 21


@dataclass(frozen=True, slots=True)
class RecordInput:
    """A record to put in a batch. ``offset_delta`` None means its index in the batch."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    timestamp: int = -1
    offset_delta: int | None = None


def build_batch(
    base_offset: int,
    records: Sequence[RecordInput],
    *,
    codec: Codec = Codec.NONE,
    log_append_time: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """One v2 batch exactly as the Java producer (and broker, for the epoch) writes it."""
    deltas = [r.offset_delta if r.offset_delta is not None else i for i, r in enumerate(records)]
    if records:
        base_ts = records[0].timestamp
        max_ts = max(r.timestamp for r in records)
    else:
        base_ts = max_ts = -1
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    body = b"".join(
        encode_record(d, r.timestamp - base_ts, r.key, r.value, r.headers)
        for d, r in zip(deltas, records, strict=True)
    )
    payload = compress(codec, body)
    attributes = int(codec)
    if log_append_time is not None:
        attributes |= 0x08
        max_ts = log_append_time
    if transactional:
        attributes |= 0x10
    if control:
        attributes |= 0x20
    if delete_horizon_ms is not None:
        attributes |= 0x40
    if last_offset_delta is None:
        last_offset_delta = max(deltas) if deltas else 0
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out[HEADER_SIZE:] = payload
    _CRC_FIELD.pack_into(out, _CRC_OFFSET, crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def end_txn_marker(
    offset: int,
    kind: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A COMMIT or ABORT control batch."""
    marker = EndTransactionMarker(kind, coordinator_epoch)
    return build_batch(
        offset,
        [RecordInput(marker.value(), key=marker.key(), timestamp=timestamp)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
