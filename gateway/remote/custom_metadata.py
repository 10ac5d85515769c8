"""The plugin's custom segment metadata (spec §1.3). Mirrors ``io.aiven.kafka.tieredstorage.
metadata.SegmentCustomMetadataSerde``.

When the segment metadata in the RLMM carries it, the ``.log`` and ``.indexes`` keys are built
from its ``object_prefix`` and ``object_key`` fields (each when present) instead of the
configured prefix and the computed main path (:meth:`gateway.remote.keys.ObjectKey.key_for`);
the ``.rsm-manifest`` key never is. The bytes are a Kafka tagged-fields section::

    uvarint numFields, then per field (ascending tag order):
        uvarint tag   uvarint byteLength   value
    tag 0  remote_size    VARLONG (zig-zag)            sum of the three uploaded objects' sizes
    tag 1  object_prefix  COMPACT_STRING (uvarint len+1, UTF-8)
    tag 2  object_key     COMPACT_STRING               main path without prefix and suffix

    {0: 100, 2: "foo"}  ->  02 00 02 C8 01 02 04 04 66 6F 6F
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.errors import CorruptDataError
from gateway.kafka.ints import INT64_MAX, INT64_MIN, check_int
from gateway.kafka.varint import encode_uvarint, encode_varlong, read_uvarint, read_varlong

__all__ = ["SegmentCustomMetadata", "decode_custom_metadata", "encode_custom_metadata"]

_TAG_REMOTE_SIZE: Final = 0
_TAG_OBJECT_PREFIX: Final = 1
_TAG_OBJECT_KEY: Final = 2
_COMPACT_STRING_MAX: Final = 0x7FFF  # Kafka refuses strings longer than Short.MAX_VALUE


@dataclass(frozen=True, slots=True)
class SegmentCustomMetadata:
    """The plugin's fields in ``RemoteLogSegmentMetadata.customMetadata`` (each optional)."""

    remote_size: int | None = None
    object_prefix: str | None = None
    object_key: str | None = None


def _corrupt(problem: str) -> CorruptDataError:
    return CorruptDataError(f"segment custom metadata: {problem}")


def _decode_compact_string(value: bytes, what: str) -> str:
    length_plus_one, pos = read_uvarint(value, 0, f"{what} length", error=_corrupt)
    if length_plus_one == 0:
        raise _corrupt(f"{what} is null")
    length = length_plus_one - 1
    if length > _COMPACT_STRING_MAX or pos + length != len(value):
        raise _corrupt(f"{what} length {length} does not match its {len(value)}-byte field")
    try:
        return value[pos:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _corrupt(f"{what} is not UTF-8") from exc


def decode_custom_metadata(data: bytes | bytearray | memoryview) -> SegmentCustomMetadata:
    """Decode the plugin's custom metadata bytes; empty bytes = no fields.

    Tags must ascend strictly and every field must fill exactly its declared length; unknown
    tags are skipped (Kafka keeps them as raw fields). Raises :class:`CorruptDataError`.
    """
    buf = bytes(data)
    if not buf:
        return SegmentCustomMetadata()
    count, pos = read_uvarint(buf, 0, "field count", error=_corrupt)
    fields: dict[int, bytes] = {}
    previous = -1
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, "tag", error=_corrupt)
        if tag <= previous:
            raise _corrupt(f"tag {tag} follows tag {previous} (tags must ascend)")
        previous = tag
        size, pos = read_uvarint(buf, pos, f"length of tag {tag}", error=_corrupt)
        if pos + size > len(buf):
            raise _corrupt(f"tag {tag}: {size}-byte value runs past the end")
        fields[tag] = buf[pos : pos + size]
        pos += size
    if pos != len(buf):
        raise _corrupt(f"{len(buf) - pos} bytes after the last field")

    remote_size: int | None = None
    if (raw := fields.get(_TAG_REMOTE_SIZE)) is not None:
        remote_size, used = read_varlong(raw, 0, "remote_size", _corrupt)
        if used != len(raw):
            raise _corrupt("remote_size does not fill its field")
    object_prefix = None
    if (raw := fields.get(_TAG_OBJECT_PREFIX)) is not None:
        object_prefix = _decode_compact_string(raw, "object_prefix")
    object_key = None
    if (raw := fields.get(_TAG_OBJECT_KEY)) is not None:
        object_key = _decode_compact_string(raw, "object_key")
    return SegmentCustomMetadata(remote_size, object_prefix, object_key)


def _encode_compact_string(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > _COMPACT_STRING_MAX:
        raise ValueError(f"custom metadata string of {len(raw)} bytes is longer than 32767")
    return encode_uvarint(len(raw) + 1) + raw


def encode_custom_metadata(metadata: SegmentCustomMetadata) -> bytes:
    """Inverse of :func:`decode_custom_metadata` (empty bytes when no field is set)."""
    fields: list[tuple[int, bytes]] = []
    if metadata.remote_size is not None:
        size = check_int("remote_size", metadata.remote_size, INT64_MIN, INT64_MAX)
        fields.append((_TAG_REMOTE_SIZE, encode_varlong(size)))
    if metadata.object_prefix is not None:
        fields.append((_TAG_OBJECT_PREFIX, _encode_compact_string(metadata.object_prefix)))
    if metadata.object_key is not None:
        fields.append((_TAG_OBJECT_KEY, _encode_compact_string(metadata.object_key)))
    if not fields:
        return b""
    out = bytearray(encode_uvarint(len(fields)))
    for tag, value in fields:
        out += encode_uvarint(tag) + encode_uvarint(len(value)) + value
    return bytes(out)
