"""Zig-zag varints of Kafka record v2 (mirrors ``org.apache.kafka.common.utils.ByteUtils``).

A varint is a signed 32-bit value zig-zag mapped (``(n << 1) ^ (n >> 31)``) and written as
unsigned LEB128: 7 bits per byte, least-significant group first, ``0x80`` = more bytes follow;
at most 5 bytes. A varlong is the same for 64-bit values, at most 10 bytes.
"""

from __future__ import annotations

from gateway.errors import CorruptRecordError

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _read(buf: bytes | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    for i in range(max_bytes):
        try:
            b = buf[pos + i]
        except IndexError as exc:
            raise CorruptRecordError(f"varint at position {pos} runs past the end") from exc
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise CorruptRecordError(f"varint at position {pos} is longer than {max_bytes} bytes")


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint (int32) at ``pos``; returns (value, next position)."""
    value, nxt = _read(buf, pos, 5)
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise CorruptRecordError(f"varint at position {pos} overflows int32")
    return value, nxt


def read_varlong(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varlong (int64) at ``pos``; returns (value, next position)."""
    value, nxt = _read(buf, pos, 10)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CorruptRecordError(f"varlong at position {pos} overflows int64")
    return value, nxt


def _write(zigzag: int) -> bytes:
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _write(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _write(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)
