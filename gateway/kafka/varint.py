"""Kafka's varints (mirrors ``org.apache.kafka.common.utils.ByteUtils``).

An unsigned varint (``readUnsignedVarint``) is unsigned LEB128: 7 bits per byte,
least-significant group first, ``0x80`` = more bytes follow; at most 5 bytes for an int
(``uvarint``), 10 for a long. A zig-zag varint (record v2) is a signed 32-bit value mapped by
``(n << 1) ^ (n >> 31)`` and written as an unsigned varint of at most 5 bytes; a varlong is the
same for 64-bit values, at most 10 bytes. Overlong encodings (``80 00``) read as Java reads them,
and so does a last byte with bits past the type (a 5th byte above 0x0F, a 10th above 0x01):
``readVarint``/``readVarlong`` shift them out, so they are dropped here too (Kafka 4.1's reader,
checked by ``tests/realkafka/decoders.py``).

Readers name what they read (``what``) and raise the caller's typed error (``error``, built from
the message; :class:`~gateway.errors.CorruptRecordError` unless given) for input that runs past
the end, is longer than its limit, or overflows. They never leak ``IndexError``.
"""

from __future__ import annotations

from typing import Final

from gateway.errors import CorruptRecordError
from gateway.kafka.ints import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, ErrorFactory

__all__ = [
    "UVARINT_MAX_BYTES",
    "UVARLONG_MAX_BYTES",
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "read_uvarint",
    "read_varint",
    "read_varlong",
]

UVARINT_MAX_BYTES: Final = 5
"""Longest varint of an int (``readUnsignedVarint``, ``readVarint``)."""
UVARLONG_MAX_BYTES: Final = 10
"""Longest varint of a long (``readVarlong``)."""

_MASK32: Final = (1 << 32) - 1
_MASK64: Final = (1 << 64) - 1


def read_uvarint(
    buf: bytes | bytearray | memoryview,
    pos: int,
    what: str = "uvarint",
    *,
    max_bytes: int = UVARINT_MAX_BYTES,
    max_value: int | None = None,
    error: ErrorFactory = CorruptRecordError,
) -> tuple[int, int]:
    """Decode an unsigned varint of at most ``max_bytes`` bytes at ``pos``.

    Returns (value, next position). ``max_value``: refuse a larger value (e.g. ``INT32_MAX``
    where a length must be a non-negative int); without it any value of ``7 * max_bytes`` bits.
    """
    value = 0
    for i in range(max_bytes):
        try:
            b = buf[pos + i]
        except IndexError as exc:
            raise error(f"{what} at byte {pos} runs past the end") from exc
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            if max_value is not None and value > max_value:
                raise error(f"{what} at byte {pos} is {value}, over its limit {max_value}")
            return value, pos + i + 1
    raise error(f"{what} at byte {pos} is longer than {max_bytes} bytes")


def _read_zigzag(
    buf: bytes | bytearray | memoryview,
    pos: int,
    what: str,
    error: ErrorFactory,
    width: int,
) -> tuple[int, int]:
    max_bytes, mask = (UVARINT_MAX_BYTES, _MASK32) if width == 32 else (UVARLONG_MAX_BYTES, _MASK64)
    raw, nxt = read_uvarint(buf, pos, what, max_bytes=max_bytes, error=error)
    raw &= mask  # Java's shifts drop the last byte's bits past the type
    return (raw >> 1) ^ -(raw & 1), nxt


def read_varint(
    buf: bytes | bytearray | memoryview,
    pos: int,
    what: str = "varint",
    error: ErrorFactory = CorruptRecordError,
) -> tuple[int, int]:
    """Decode a zig-zag varint (int32) at ``pos``; returns (value, next position)."""
    return _read_zigzag(buf, pos, what, error, 32)


def read_varlong(
    buf: bytes | bytearray | memoryview,
    pos: int,
    what: str = "varlong",
    error: ErrorFactory = CorruptRecordError,
) -> tuple[int, int]:
    """Decode a zig-zag varlong (int64) at ``pos``; returns (value, next position)."""
    return _read_zigzag(buf, pos, what, error, 64)


def encode_uvarint(value: int) -> bytes:
    """The shortest unsigned varint of ``value`` (``ValueError`` if negative)."""
    if value < 0:
        raise ValueError(f"{value} is negative: not an unsigned varint")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return encode_uvarint(((value << 1) ^ (value >> 31)) & _MASK32)


def encode_varlong(value: int) -> bytes:
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return encode_uvarint(((value << 1) ^ (value >> 63)) & _MASK64)
