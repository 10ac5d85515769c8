"""Control records (mirrors ``ControlRecordType`` and ``EndTransactionMarker``).

They live in batches with the control bit set; transaction markers are also transactional and
carry the producer id and epoch.

* key   = int16 version (0; higher versions are read as 0) + int16 type; shorter than 4 bytes
          is invalid. Types: 0 ABORT, 1 COMMIT, 2 LEADER_CHANGE, 3 SNAPSHOT_HEADER,
          4 SNAPSHOT_FOOTER, 5 KRAFT_VERSION, 6 KRAFT_VOTERS, anything else UNKNOWN.
* value of ABORT/COMMIT = int16 version (0) + int32 coordinatorEpoch (at least 6 bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from gateway.errors import CorruptRecordError

_KEY: Final = struct.Struct(">hh")
_MARKER_VALUE: Final = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


def control_type(key: bytes | None) -> ControlRecordType:
    """The type named by a control record's key."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(
            f"control record key must be at least {_KEY.size} bytes, got "
            f"{'null' if key is None else len(key)}"
        )
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def control_key(kind: ControlRecordType) -> bytes:
    return _KEY.pack(0, int(kind))


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """An ABORT or COMMIT marker."""

    kind: ControlRecordType
    coordinator_epoch: int

    @classmethod
    def parse(cls, key: bytes | None, value: bytes | None) -> EndTransactionMarker:
        kind = control_type(key)
        if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise CorruptRecordError(f"{kind.name} is not an end-transaction marker")
        if value is None or len(value) < _MARKER_VALUE.size:
            raise CorruptRecordError(
                "end-transaction marker value must be at least "
                f"{_MARKER_VALUE.size} bytes, got {'null' if value is None else len(value)}"
            )
        version, epoch = _MARKER_VALUE.unpack_from(value, 0)
        if version < 0:
            raise CorruptRecordError(f"end-transaction marker has negative version {version}")
        return cls(kind, epoch)

    def key(self) -> bytes:
        return control_key(self.kind)

    def value(self) -> bytes:
        return _MARKER_VALUE.pack(0, self.coordinator_epoch)
