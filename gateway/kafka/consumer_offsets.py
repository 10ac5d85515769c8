"""Records of ``__consumer_offsets``, decoded as ``kafka-dump-log --offsets-decoder`` does.

The key starts with an int16 version that names its type: 0 and 1 are ``OffsetCommitKey``
(group, topic, partition), 2 is ``GroupMetadataKey`` (group); later versions (the KIP-848
consumer-group records) are reported by version only. The value starts with its own int16
version: ``OffsetCommitValue`` v0..v4 (``leaderEpoch`` from v3, ``expireTimestamp`` in v1
only) and ``GroupMetadataValue`` v0..v4 (``currentStateTimestamp`` from v2; per member
``rebalanceTimeout`` from v1 and ``groupInstanceId`` from v3). Version 4 of both values is a
flexible version: compact strings and arrays (unsigned varint length + 1) and tagged fields,
which are skipped. A null value is a tombstone (the offset or group was deleted). The members'
``subscription`` and ``assignment`` are printed as base64, not decoded further.

Strings are UTF-8; a string that is not valid UTF-8, a length past the end, or bytes left over
after the last field raise :class:`CorruptRecordError`.
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Final

from gateway.errors import CorruptRecordError
from gateway.kafka.varint import read_uvarint

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")

OFFSET_COMMIT_KEY_VERSIONS: Final = (0, 1)
GROUP_METADATA_KEY_VERSION: Final = 2
MAX_VALUE_VERSION: Final = 4
FLEXIBLE_FROM: Final = 4


class _Reader:
    """Kafka's fixed-width and varint fields, read front to back."""

    __slots__ = ("_buf", "_pos", "_what")

    def __init__(self, buf: bytes, what: str) -> None:
        self._buf = buf
        self._pos = 0
        self._what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._buf):
            raise CorruptRecordError(
                f"{self._what}: a field of {n} bytes at position {self._pos} runs past the end "
                f"({len(self._buf)} bytes)"
            )
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def _fixed(self, layout: struct.Struct) -> int:
        value: int = layout.unpack(self._take(layout.size))[0]
        return value

    def int16(self) -> int:
        return self._fixed(_INT16)

    def int32(self) -> int:
        return self._fixed(_INT32)

    def int64(self) -> int:
        return self._fixed(_INT64)

    def uvarint(self) -> int:
        value, self._pos = read_uvarint(self._buf, self._pos, f"{self._what}: unsigned varint")
        return value

    def _text(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{self._what}: a string is not valid UTF-8") from exc

    def string(self, *, flexible: bool = False, nullable: bool = False) -> str | None:
        length = self.uvarint() - 1 if flexible else self.int16()
        if length == -1 and nullable:
            return None
        if length < 0:
            raise CorruptRecordError(f"{self._what}: a non-nullable string has length {length}")
        return self._text(self._take(length))

    def required_string(self, *, flexible: bool = False) -> str:
        text = self.string(flexible=flexible)
        assert text is not None  # non-nullable strings raise instead
        return text

    def bytes_field(self, *, flexible: bool) -> str:
        length = self.uvarint() - 1 if flexible else self.int32()
        if length < 0:
            raise CorruptRecordError(f"{self._what}: a bytes field has length {length}")
        return base64.b64encode(self._take(length)).decode("ascii")

    def array_length(self, *, flexible: bool) -> int:
        length = self.uvarint() - 1 if flexible else self.int32()
        if length < 0:
            raise CorruptRecordError(f"{self._what}: an array has length {length}")
        return length

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def done(self) -> None:
        if self._pos != len(self._buf):
            raise CorruptRecordError(
                f"{self._what}: {len(self._buf) - self._pos} bytes left after the last field"
            )


def decode_key(key: bytes) -> dict[str, Any]:
    """A ``__consumer_offsets`` record key as a JSON-ready dict with a ``type``."""
    r = _Reader(key, "__consumer_offsets key")
    version = r.int16()
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        out: dict[str, Any] = {
            "type": "offset_commit",
            "version": version,
            "group": r.required_string(),
            "topic": r.required_string(),
            "partition": r.int32(),
        }
    elif version == GROUP_METADATA_KEY_VERSION:
        out = {"type": "group_metadata", "version": version, "group": r.required_string()}
    else:
        return {"type": "unknown", "version": version}
    r.done()
    return out


def decode_value(key_type: str, value: bytes | None) -> dict[str, Any] | None:
    """The value for a key of ``key_type`` (from :func:`decode_key`); ``None`` for a tombstone
    or a key type this module does not decode."""
    if value is None or key_type not in ("offset_commit", "group_metadata"):
        return None
    r = _Reader(value, f"__consumer_offsets {key_type} value")
    version = r.int16()
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise CorruptRecordError(f"{key_type} value version {version} is not in 0..4")
    flexible = version >= FLEXIBLE_FROM
    if key_type == "offset_commit":
        out = _offset_commit_value(r, version, flexible=flexible)
    else:
        out = _group_metadata_value(r, version, flexible=flexible)
    if flexible:
        r.skip_tagged_fields()
    r.done()
    return out


def _offset_commit_value(r: _Reader, version: int, *, flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"version": version, "offset": r.int64()}
    out["leader_epoch"] = r.int32() if version >= 3 else -1
    out["metadata"] = r.required_string(flexible=flexible)
    out["commit_timestamp"] = r.int64()
    out["expire_timestamp"] = r.int64() if version == 1 else -1
    return out


def _group_metadata_value(r: _Reader, version: int, *, flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": version,
        "protocol_type": r.required_string(flexible=flexible),
        "generation": r.int32(),
        "protocol": r.string(flexible=flexible, nullable=True),
        "leader": r.string(flexible=flexible, nullable=True),
        "current_state_timestamp": r.int64() if version >= 2 else -1,
    }
    members = []
    for _ in range(r.array_length(flexible=flexible)):
        member: dict[str, Any] = {"member_id": r.required_string(flexible=flexible)}
        member["group_instance_id"] = (
            r.string(flexible=flexible, nullable=True) if version >= 3 else None
        )
        member["client_id"] = r.required_string(flexible=flexible)
        member["client_host"] = r.required_string(flexible=flexible)
        member["rebalance_timeout"] = r.int32() if version >= 1 else None
        member["session_timeout"] = r.int32()
        member["subscription"] = r.bytes_field(flexible=flexible)
        member["assignment"] = r.bytes_field(flexible=flexible)
        if flexible:
            r.skip_tagged_fields()
        members.append(member)
    out["members"] = members
    return out


def decode_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """``{"key": ..., "value": ...}`` for one record, or ``{"error": ...}`` when it does not
    decode (a record without a key is not an offsets record)."""
    if key is None:
        return {"error": "record without a key"}
    try:
        decoded = decode_key(key)
        return {"key": decoded, "value": decode_value(decoded["type"], value)}
    except CorruptRecordError as exc:
        return {"error": str(exc)}
