"""Producer snapshot (``<20-digit offset>.snapshot``, uploaded as the PRODUCER_SNAPSHOT index).

Mirrors the generated message ``ProducerSnapshot`` v1 (``storage/src/main/resources/message/
ProducerSnapshot.json``) as read and written by
``org.apache.kafka.storage.internals.log.ProducerStateManager.readSnapshot`` / ``writeSnapshot``.

Layout (big-endian, non-flexible)::

    bytes 0-1   int16   version (= 1)
    bytes 2-5   uint32  crc: CRC-32C (Castagnoli) over bytes [6, end)
    bytes 6-9   int32   entryCount
    bytes 10-   entryCount x 46-byte entries:
        int64 producerId, int16 epoch, int32 lastSequence, int64 lastOffset,
        int32 offsetDelta, int64 timestamp, int32 coordinatorEpoch,
        int64 currentTxnFirstOffset (-1 = no ongoing transaction)

The read path needs one fact from a snapshot: the first offset of the oldest transaction still
open after the segment (:func:`open_transaction_first`), which gives the remote tier's last
stable offset (:mod:`gateway.service.stable`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

import crc32c

from gateway.errors import CorruptCheckpointError
from gateway.kafka.ints import (
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    BytesLike,
    as_byte_buffer,
    check_int,
)

__all__ = [
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "SNAPSHOT_VERSION",
    "ProducerSnapshotEntry",
    "encode_producer_snapshot",
    "open_transaction_first",
    "parse_producer_snapshot",
]

SNAPSHOT_VERSION = 1
"""The only version of ``ProducerSnapshot`` (``validVersions: "1"``)."""

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_VERSION_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_FROM = 6  # the CRC covers [6, end): the entry count and the entries

HEADER_SIZE = _HEADER.size
"""10 bytes: version, CRC and entry count."""

ENTRY_SIZE = _ENTRY.size
"""46 bytes per producer entry."""

_RANGES = (
    (INT64_MIN, INT64_MAX),  # producer_id
    (INT16_MIN, INT16_MAX),  # producer_epoch
    (INT32_MIN, INT32_MAX),  # last_sequence
    (INT64_MIN, INT64_MAX),  # last_offset
    (INT32_MIN, INT32_MAX),  # offset_delta
    (INT64_MIN, INT64_MAX),  # timestamp
    (INT32_MIN, INT32_MAX),  # coordinator_epoch
    (INT64_MIN, INT64_MAX),  # current_txn_first_offset
)


class ProducerSnapshotEntry(NamedTuple):
    """One producer's state (``ProducerSnapshot.ProducerEntry``)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def parse_producer_snapshot(data: BytesLike) -> list[ProducerSnapshotEntry]:
    """Parse and verify a producer snapshot.

    Raises :class:`CorruptCheckpointError` when the input is shorter than the header, the
    version is not 1, the CRC-32C does not match, or the entry count does not match the
    length exactly.
    """
    buf = as_byte_buffer(data)
    if len(buf) < HEADER_SIZE:
        raise CorruptCheckpointError(
            f"producer snapshot is {len(buf)} bytes, shorter than its {HEADER_SIZE}-byte header"
        )
    version, stored_crc, count = _HEADER.unpack_from(buf, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptCheckpointError(
            f"producer snapshot has version {version}; only version {SNAPSHOT_VERSION} exists"
        )
    computed_crc = crc32c.crc32c(memoryview(buf)[_CRC_FROM:])
    if stored_crc != computed_crc:
        raise CorruptCheckpointError(
            f"producer snapshot CRC-32C mismatch: stored {stored_crc:#010x}, "
            f"computed {computed_crc:#010x}"
        )
    body = len(buf) - HEADER_SIZE
    if count < 0 or count * ENTRY_SIZE != body:
        raise CorruptCheckpointError(
            f"producer snapshot announces {count} entries ({ENTRY_SIZE} bytes each) but holds "
            f"{body} bytes after the header"
        )
    view = memoryview(buf)[HEADER_SIZE:]
    return [ProducerSnapshotEntry._make(fields) for fields in _ENTRY.iter_unpack(view)]


def open_transaction_first(data: BytesLike, end_offset: int) -> int | None:
    """The first offset of the oldest transaction open in a snapshot taken after offset
    ``end_offset`` (the smallest ``currentTxnFirstOffset`` >= 0; None: no transaction open, or
    an empty piece: no snapshot uploaded). :class:`CorruptCheckpointError` for a snapshot that
    does not parse, or opens a transaction after ``end_offset`` (it cannot be this segment's)."""
    if not data:
        return None
    firsts = [
        e.current_txn_first_offset
        for e in parse_producer_snapshot(data)
        if e.current_txn_first_offset >= 0
    ]
    late = [o for o in firsts if o > end_offset]
    if late:
        raise CorruptCheckpointError(
            f"producer snapshot: a transaction opens at offset {late[0]}, after the segment's "
            f"end offset {end_offset}"
        )
    return min(firsts, default=None)


def encode_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """Encode a version-1 producer snapshot with its CRC-32C.

    Raises ``ValueError`` when a field does not fit its width.
    """
    body = bytearray()
    count = 0
    for entry in entries:
        for name, value, (lo, hi) in zip(
            ProducerSnapshotEntry._fields, entry, _RANGES, strict=True
        ):
            check_int(name, value, lo, hi)
        body += _ENTRY.pack(*entry)
        count += 1
    check_int("entry count", count, 0, INT32_MAX)
    tail = _COUNT.pack(count) + body
    return _VERSION_CRC.pack(SNAPSHOT_VERSION, crc32c.crc32c(tail)) + bytes(tail)
