"""Flexible-version primitives of Kafka's generated messages (``remote-read-semantics.md`` §6.3).

Mirrors what the message generator emits for ``"flexibleVersions": "0+"`` schemas: the
``org.apache.kafka.common.protocol.Readable`` / ``Writable`` calls of the generated ``read`` and
``write`` methods (the unsigned varint itself is :mod:`gateway.kafka.varint`) and the
tagged-field sections (``RawTaggedField`` for the unknown ones). The record layouts built from
these live in :mod:`gateway.metadata.serde`::

    uvarint        unsigned varint: 7 bits a byte, low group first, high bit = more bytes;
                   at most 5 bytes, and here at most int32 max
    int8/16/32/64  fixed width, big-endian; uuid = 16 bytes (int64 msb, int64 lsb);
                   bool = 1 byte (non-zero = true)
    string         COMPACT_STRING: uvarint(len + 1), then len bytes of UTF-8; 0 = null;
                   len <= 32767
    bytes          COMPACT_BYTES: uvarint(len + 1), then len bytes; 00 = null
    array          COMPACT_ARRAY: uvarint(N + 1), then N elements; 0 = null
    tags           uvarint count, then per field: uvarint tag, uvarint size, size bytes of
                   data; ascending tag order, a field written only when it differs from its
                   default; 00 = no tagged fields

Every struct ends with a tagged-field section: the top-level message, each nested struct and
each array element. Fields appear in the schema's declaration order.

Reading, like the generated Java readers: tags may come in any order (a repeated tag: the last
wins), unknown tags are skipped, a known tag in a version that lacks it is refused. Stricter
than Java: a known tag whose size is not its type's width, a uvarint above int32 max, a string
longer than 32767 bytes or not UTF-8, and an array whose count cannot fit in the bytes left are
refused. Every malformed input raises :class:`~gateway.errors.CorruptMetadataRecordError`;
reads never leak ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Final

from gateway.errors import CorruptMetadataRecordError
from gateway.kafka.ints import INT32_MAX
from gateway.kafka.varint import encode_uvarint, read_uvarint

__all__ = [
    "BOOL",
    "EMPTY_TAGS",
    "INT8",
    "INT32",
    "INT64",
    "MAX_STRING",
    "UUID_SIZE",
    "Reader",
    "TagSchema",
    "corrupt",
    "put_array_length",
    "put_nullable_bytes",
    "put_string",
    "put_tags",
]

MAX_STRING: Final = 0x7FFF

BOOL: Final = struct.Struct(">B")
INT8: Final = struct.Struct(">b")
INT32: Final = struct.Struct(">i")
INT64: Final = struct.Struct(">q")
UUID_SIZE: Final = 16
EMPTY_TAGS: Final = b"\x00"
"""A tagged-field section with no fields."""

TagSchema = dict[int, tuple[int, struct.Struct, int]]
"""Known tags of one struct: tag -> (first version that has it, its fixed-width type, its
default)."""


def corrupt(problem: str) -> CorruptMetadataRecordError:
    """The error for a malformed ``__remote_log_metadata`` value."""
    return CorruptMetadataRecordError(f"__remote_log_metadata record: {problem}")


# --- reading ---------------------------------------------------------------------------------


class Reader:
    """A cursor over one value; every read checks the bytes left and names what it read."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, size: int, what: str) -> int:
        """Advance past ``size`` bytes; returns where they start."""
        start = self.pos
        if size > len(self.buf) - start:
            left = len(self.buf) - start
            raise corrupt(f"{what} at byte {start} needs {size} bytes, {left} left")
        self.pos = start + size
        return start

    def fixed(self, layout: struct.Struct, what: str) -> tuple[Any, ...]:
        return layout.unpack_from(self.buf, self.take(layout.size, what))

    def uvarint(self, what: str) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos, what, max_value=INT32_MAX, error=corrupt)
        return value

    def uuid(self, what: str) -> uuid.UUID:
        start = self.take(UUID_SIZE, what)
        return uuid.UUID(bytes=bytes(self.buf[start : self.pos]))

    def string(self, what: str) -> str:
        """A non-null compact string (no string of these schemas is nullable)."""
        at, size = self.pos, self.uvarint(f"{what} length") - 1
        if size < 0:
            raise corrupt(f"{what} at byte {at} is null")
        if size > MAX_STRING:
            raise corrupt(f"{what} at byte {at} has invalid length {size}")
        start = self.take(size, what)
        try:
            return str(self.buf[start : self.pos], "utf-8")
        except UnicodeDecodeError as exc:
            raise corrupt(f"{what} at byte {start} is not UTF-8") from exc

    def nullable_bytes(self, what: str) -> bytes | None:
        size = self.uvarint(f"{what} length") - 1
        if size < 0:
            return None
        start = self.take(size, what)
        return bytes(self.buf[start : self.pos])

    def array_length(self, what: str, min_element_size: int) -> int:
        """A non-null compact array's element count, refused when that many elements of at
        least ``min_element_size`` bytes each cannot fit in the bytes left."""
        at, count = self.pos, self.uvarint(f"{what} length") - 1
        if count < 0:
            raise corrupt(f"{what} at byte {at} is null")
        if count * min_element_size > len(self.buf) - self.pos:
            raise corrupt(f"{what} at byte {at}: {count} entries cannot fit")
        return count

    def tags(self, where: str, schema: TagSchema, version: int) -> dict[int, int]:
        """A tagged-field section: the known fields' values (absent ones get the default)."""
        values = {tag: default for tag, (first, _, default) in schema.items() if version >= first}
        for _ in range(self.uvarint(f"{where} tag count")):
            tag = self.uvarint(f"{where} tag")
            size = self.uvarint(f"{where} tag {tag} size")
            start = self.take(size, f"{where} tag {tag}")
            known = schema.get(tag)
            if known is None:
                continue  # unknown: skipped
            first, layout, _ = known
            if version < first:
                raise corrupt(f"{where} tag {tag} is not valid for version {version}")
            if size != layout.size:
                raise corrupt(f"{where} tag {tag} has {size} bytes, expected {layout.size}")
            values[tag] = layout.unpack_from(self.buf, start)[0]
        return values


# --- writing ---------------------------------------------------------------------------------


def put_string(out: bytearray, value: str, what: str) -> None:
    """Append a compact string; ``ValueError`` past :data:`MAX_STRING` bytes of UTF-8."""
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING:
        raise ValueError(f"{what} of {len(raw)} bytes is longer than {MAX_STRING}")
    out += encode_uvarint(len(raw) + 1) + raw


def put_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    out += b"\x00" if value is None else encode_uvarint(len(value) + 1) + value


def put_array_length(out: bytearray, count: int) -> None:
    """Append a non-null compact array's header; the caller writes the elements."""
    out += encode_uvarint(count + 1)


def put_tags(out: bytearray, fields: list[tuple[int, bytes]]) -> None:
    """Append a tagged-field section of ``(tag, data)`` pairs, in the order given."""
    out += encode_uvarint(len(fields))
    for tag, value in fields:
        out += encode_uvarint(tag) + encode_uvarint(len(value)) + value
