"""Records inside a v2 batch (mirrors ``org.apache.kafka.common.record.DefaultRecord``).

=================  =====================================================================
field              type
=================  =====================================================================
length             varint: bytes after this field
attributes         int8, unused
timestampDelta     varlong, relative to the batch's baseTimestamp
offsetDelta        varint, relative to the batch's baseOffset
keyLength, key     varint (-1 = null) + bytes
valueLength, value varint (-1 = null) + bytes
headersCount       varint, >= 0
headers[i]         keyLength varint (>= 0) + UTF-8 key, valueLength varint (-1 = null) + bytes
=================  =====================================================================

The reader checks that the bytes consumed equal ``length`` (``InvalidRecordException``). For a
LOG_APPEND_TIME batch every record's timestamp is the batch's maxTimestamp.

This module is the reference decoder: exact to the Java reader, pure Python. The fast path in
:mod:`gateway.kafka.fast` hands the per-record work to a C decoder and falls back here whenever
the C decoder objects, so the reference decides every corner case.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.errors import CorruptRecordError
from gateway.kafka.varint import encode_varint, encode_varlong, read_varint, read_varlong

Header = tuple[str, bytes | None]

NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1


class RecordLike(Protocol):
    """What every decoded record offers (ours and the C decoder's objects alike).

    ``timestamp`` is -1 (Kafka's NO_TIMESTAMP) when the record has none; headers are
    (key, value) pairs.
    """

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[Header]: ...


class Record:
    """A decoded record (reference decoder)."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[Header],
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )


def _bytes_field(buf: memoryview, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"record {what} of {length} bytes overruns the record")
    return bytes(buf[pos : pos + length]), pos + length


def decode_records(
    buf: memoryview,
    count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    log_append_time: bool,
) -> list[Record]:
    """Decode exactly ``count`` records filling ``buf``; raises CorruptRecordError."""
    out: list[Record] = []
    pos = 0
    end = len(buf)
    for index in range(count):
        if pos >= end:
            raise CorruptRecordError(
                f"batch declares {count} records but its data ends after {index}"
            )
        length, pos = read_varint(buf, pos)
        start = pos
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise CorruptRecordError(f"record {index} length {length} overruns the batch")
        pos += 1  # attributes: int8, unused
        ts_delta, pos = read_varlong(buf, pos)
        offset_delta, pos = read_varint(buf, pos)
        key, pos = _bytes_field(buf, pos, rec_end, "key")
        value, pos = _bytes_field(buf, pos, rec_end, "value")
        n_headers, pos = read_varint(buf, pos)
        if n_headers < 0:
            raise CorruptRecordError(f"invalid negative header count {n_headers}")
        headers: list[Header] = []
        for _ in range(n_headers):
            klen, pos = read_varint(buf, pos)
            if klen < 0:
                raise CorruptRecordError(f"invalid negative header key size {klen}")
            if pos + klen > rec_end:
                raise CorruptRecordError(f"header key of {klen} bytes overruns the record")
            # Java decodes with new String(bytes, UTF_8): malformed input is replaced.
            hkey = bytes(buf[pos : pos + klen]).decode("utf-8", "replace")
            pos += klen
            hval, pos = _bytes_field(buf, pos, rec_end, "header value")
            headers.append((hkey, hval))
        if pos != rec_end:
            raise CorruptRecordError(
                f"invalid record size: expected to read {length} bytes in record payload, "
                f"but instead read {pos - start}"
            )
        timestamp = max_timestamp if log_append_time else base_timestamp + ts_delta
        out.append(
            Record(
                base_offset + offset_delta,
                timestamp,
                key,
                value,
                headers,
            )
        )
    if pos != end:
        raise CorruptRecordError(
            f"incorrect declared batch size, {end - pos} bytes remain after {count} records"
        )
    return out


def _bytes_out(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """One record in the v2 layout, length prefix included."""
    body = [
        b"\x00",
        encode_varlong(timestamp_delta),
        encode_varint(offset_delta),
        _bytes_out(key),
        _bytes_out(value),
        encode_varint(len(headers)),
    ]
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        body.append(encode_varint(len(kb)) + kb)
        body.append(_bytes_out(hval))
    payload = b"".join(body)
    return encode_varint(len(payload)) + payload
