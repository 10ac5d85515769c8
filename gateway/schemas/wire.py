"""The Confluent wire format of Schema Registry serdes (mirrors Confluent's
``AbstractKafkaSchemaSerDe`` and ``confluent_kafka.schema_registry.serde``)::

    magic           int8    0
    schema id       int32   big-endian, the registry's global id
    message indexes         Protobuf only: a zigzag varint count, then that many zigzag varints,
                            the path to the message type (a top-level index, then nested ones);
                            the count 0 alone stands for [0]
    body                    the Avro binary, Protobuf message or JSON text

Indexes are Kafka's ``ByteUtils.readVarint``: zigzag over 32 bits, at most 5 bytes each.
"""

from __future__ import annotations

import struct
from typing import Final

MAGIC: Final = 0
HEADER: Final = struct.Struct(">bI")
MAX_INDEXES: Final = 64  # a path deeper than any schema nests: corrupt, not a long loop


class WireFormatError(ValueError):
    """The bytes are not in the Confluent wire format (the message says why)."""


def schema_id(data: bytes | memoryview) -> int | None:
    """The schema id of a framed payload, or None when ``data`` is not framed."""
    if len(data) < HEADER.size or data[0] != MAGIC:
        return None
    return int(HEADER.unpack_from(data)[1])


def split(data: bytes | memoryview) -> tuple[int, memoryview]:
    """(schema id, everything after the 5-byte header); raises :class:`WireFormatError`."""
    if len(data) < HEADER.size:
        raise WireFormatError(f"{len(data)} bytes: shorter than the 5-byte header")
    magic, found = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireFormatError(f"magic byte {magic & 0xFF}, not 0")
    return int(found), memoryview(data)[HEADER.size :]


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    """A zigzag varint of at most 5 bytes at ``at``: (its value, the next position)."""
    raw = shift = 0
    for n in range(5):
        if at + n >= len(data):
            raise WireFormatError("message indexes: truncated varint")
        byte = data[at + n]
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if raw >> 32:
                raise WireFormatError("message indexes: varint beyond 32 bits")
            return (raw >> 1) ^ -(raw & 1), at + n + 1
        shift += 7
    raise WireFormatError("message indexes: varint longer than 5 bytes")


def message_indexes(body: memoryview) -> tuple[tuple[int, ...], memoryview]:
    """The Protobuf message indexes at the start of ``body`` and the message after them."""
    count, at = _varint(body, 0)
    if count == 0:
        return (0,), body[at:]
    if count < 0 or count > MAX_INDEXES:
        raise WireFormatError(f"message indexes: count {count}")
    indexes = []
    for _ in range(count):
        index, at = _varint(body, at)
        if index < 0:
            raise WireFormatError(f"message indexes: negative index {index}")
        indexes.append(index)
    return tuple(indexes), body[at:]
