"""Compiled v2 record decoding: the records of many batches straight into columns.

Spark executors and the JSON/NDJSON renderer spent their Python time building an object per
record and field, then lists (``docs/benchmarks.md``). Here one compiled loop (numba) walks the
records of many batches and writes offsets, timestamps, key and value bytes and headers into
preallocated arrays: Spark hands them to Arrow as buffers without a copy
(:mod:`gateway.spark.columns`), the HTTP API writes JSON text from them
(:mod:`gateway.api.jsonkernel`).

This is a fast path, never the last word. The loop is at least as strict as the reference
decoder (:func:`gateway.kafka.records.decode_records`): any objection (a length that overruns
its record, a varint longer than Kafka allows or out of its type's range, trailing bytes, a
count that does not match) returns a status, and the caller decodes those batches with the
reference path, which raises the precise typed error or gives Java's exact answer (a header key
that is not UTF-8, which Java replaces, is caught by Arrow's UTF-8 validation and goes there).
Every record and header written is checked against the arrays' capacity; the byte arrays are
as large as the input, and keys, values and headers are disjoint parts of it, so their copies
cannot overrun. Inputs of 2 GiB or more (past Arrow's int32 offsets) are refused.

The attributes byte is unused by Kafka; one of 0x80 or more (no client writes it) is refused
because aiokafka's C decoder, which the reference path uses first, reads it as a varint.

Varints follow ``ByteUtils``: a varint is at most 5 bytes and must fit int32 (so a 5th byte
above 0x0F is refused here), a varlong at most 10 and must fit int64 (10th byte at most 0x01).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numba
import numpy as np

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, RecordBatch
from gateway.kafka.codecs import DEFAULT_MAX_DECOMPRESSED, Codec, decompress
from gateway.kafka.ints import INT32_MAX

OK: Final = 0
BAD_RECORD: Final = 1  # malformed bytes: the reference decoder says exactly what
NO_ROOM: Final = 2  # more records or headers than the declared counts allow
MIN_RECORD_BYTES: Final = 7  # length, attributes, 2 deltas, key, value, header count

_INT64_LOW_63: Final = 0x7FFFFFFFFFFFFFFF
_MAX_MS: Final = _INT64_LOW_63 // 1000
_INT32_MAX: Final = INT32_MAX

Array = Any  # numpy arrays; numba needs the concrete dtypes documented per argument


@numba.njit(cache=True, nogil=True)
def _zigzag(data: Array, pos: int, end: int, max_bytes: int, last_max: int) -> tuple[int, int]:
    """(value, next position) of a zig-zag varint of at most ``max_bytes`` bytes whose last
    byte may be at most ``last_max`` (so it fits its type); next position -1 when invalid."""
    raw = 0
    shift = 0
    for i in range(max_bytes):
        if pos >= end:
            return 0, -1
        b = int(data[pos])
        pos += 1
        if i == max_bytes - 1 and b > last_max:
            return 0, -1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return ((raw >> 1) & _INT64_LOW_63) ^ -(raw & 1), pos
        shift += 7
    return 0, -1


@numba.njit(cache=True, nogil=True)
def _varint(data: Array, pos: int, end: int) -> tuple[int, int]:
    """An int32 varint: at most 5 bytes, the 5th at most 0x0F."""
    return _zigzag(data, pos, end, 5, 0x0F)


@numba.njit(cache=True, nogil=True)
def _varlong(data: Array, pos: int, end: int) -> tuple[int, int]:
    """An int64 varlong: at most 10 bytes, the 10th at most 0x01."""
    return _zigzag(data, pos, end, 10, 0x01)


@numba.njit(cache=True, nogil=True, inline="always")
def _put(  # noqa: PLR0917 - numba takes arrays, not objects
    data: Array, pos: int, length: int, i: int, used: int, offsets: Array, valid: Array, out: Array
) -> int:
    """Entry ``i`` of a nullable binary column: ``length`` bytes of ``data`` from ``pos`` (a
    negative length is null); returns the column's bytes used after it."""
    if length >= 0:
        out[used : used + length] = data[pos : pos + length]
        used += length
        valid[i] = 1
    else:
        valid[i] = 0
    offsets[i + 1] = used
    return used


@numba.njit(cache=True, nogil=True)
def decode_batches(  # noqa: PLR0917 - numba takes arrays, not objects
    data: Array,  # uint8: the records sections of the batches, back to back
    starts: Array,  # int64 per batch: where its records start in data
    ends: Array,  # int64 per batch: where they end
    counts: Array,  # int64 per batch: records declared
    base_offsets: Array,  # int64 per batch
    base_timestamps: Array,  # int64 per batch
    max_timestamps: Array,  # int64 per batch (every record's timestamp when log append)
    log_append: Array,  # uint8 per batch
    lo: int,  # records outside [lo, hi) are parsed and checked, not kept
    hi: int,
    with_headers: bool,
    offsets: Array,  # int64 out, per record
    timestamps_us: Array,  # int64 out
    batch_of: Array,  # int32 out: the batch each record came from
    key_offsets: Array,  # int32 out, records + 1
    key_valid: Array,  # uint8 out
    key_data: Array,  # uint8 out
    value_offsets: Array,
    value_valid: Array,
    value_data: Array,
    header_offsets: Array,  # int32 out, records + 1: each record's first header
    hkey_offsets: Array,  # int32 out, headers + 1
    hkey_data: Array,
    hvalue_offsets: Array,
    hvalue_valid: Array,
    hvalue_data: Array,
) -> tuple[int, int, int, int]:
    """Decode every record of every batch; (status, failing batch, records kept, headers)."""
    n = 0
    nh = 0
    kb = 0
    vb = 0
    hkb = 0
    hvb = 0
    key_offsets[0] = 0
    value_offsets[0] = 0
    header_offsets[0] = 0
    hkey_offsets[0] = 0
    hvalue_offsets[0] = 0
    cap = offsets.shape[0]
    hcap = hvalue_valid.shape[0]
    for b in range(starts.shape[0]):
        pos = starts[b]
        end = ends[b]
        if counts[b] < 0:
            return BAD_RECORD, b, n, nh
        for _ in range(counts[b]):
            length, pos = _varint(data, pos, end)
            if pos < 0 or length < 0 or length > end - pos:
                return BAD_RECORD, b, n, nh
            rec_end = pos + length
            if pos >= rec_end:
                return BAD_RECORD, b, n, nh
            if data[pos] >= 0x80:  # unused; aiokafka's decoder reads it as a varint
                return BAD_RECORD, b, n, nh
            pos += 1
            ts_delta, pos = _varlong(data, pos, rec_end)
            if pos < 0:
                return BAD_RECORD, b, n, nh
            offset_delta, pos = _varint(data, pos, rec_end)
            if pos < 0:
                return BAD_RECORD, b, n, nh
            if offset_delta > 0 and base_offsets[b] > _INT64_LOW_63 - offset_delta:
                return BAD_RECORD, b, n, nh  # past int64: the reference decoder says what
            offset = base_offsets[b] + offset_delta
            keep = lo <= offset < hi
            if keep and n >= cap:
                return NO_ROOM, b, n, nh
            klen, pos = _varint(data, pos, rec_end)
            if pos < 0 or klen > rec_end - pos:
                return BAD_RECORD, b, n, nh
            kpos = pos
            if klen > 0:
                pos += klen
            vlen, pos = _varint(data, pos, rec_end)
            if pos < 0 or vlen > rec_end - pos:
                return BAD_RECORD, b, n, nh
            vpos = pos
            if vlen > 0:
                pos += vlen
            hcount, pos = _varint(data, pos, rec_end)
            if pos < 0 or hcount < 0:
                return BAD_RECORD, b, n, nh
            for _h in range(hcount):
                hklen, pos = _varint(data, pos, rec_end)
                if pos < 0 or hklen < 0 or hklen > rec_end - pos:
                    return BAD_RECORD, b, n, nh
                hkpos = pos
                pos += hklen
                hvlen, pos = _varint(data, pos, rec_end)
                if pos < 0 or hvlen > rec_end - pos:
                    return BAD_RECORD, b, n, nh
                hvpos = pos
                if hvlen > 0:
                    pos += hvlen
                if keep and with_headers:
                    if nh >= hcap:
                        return NO_ROOM, b, n, nh
                    hkey_data[hkb : hkb + hklen] = data[hkpos : hkpos + hklen]
                    hkb += hklen
                    hkey_offsets[nh + 1] = hkb
                    hvb = _put(
                        data, hvpos, hvlen, nh, hvb, hvalue_offsets, hvalue_valid, hvalue_data
                    )
                    nh += 1
            if pos != rec_end:
                return BAD_RECORD, b, n, nh
            if not keep:
                continue
            if log_append[b]:
                ts = max_timestamps[b]
            elif -_MAX_MS <= ts_delta <= _MAX_MS and -_MAX_MS <= base_timestamps[b] <= _MAX_MS:
                ts = base_timestamps[b] + ts_delta  # cannot wrap
            else:
                return BAD_RECORD, b, n, nh
            if ts > _MAX_MS or ts < -_MAX_MS:  # microseconds would overflow int64
                return BAD_RECORD, b, n, nh
            offsets[n] = offset
            timestamps_us[n] = ts * 1000
            batch_of[n] = b
            kb = _put(data, kpos, klen, n, kb, key_offsets, key_valid, key_data)
            vb = _put(data, vpos, vlen, n, vb, value_offsets, value_valid, value_data)
            header_offsets[n + 1] = nh
            n += 1
        if pos != end:  # bytes after the declared records
            return BAD_RECORD, b, n, nh
    return OK, -1, n, nh


@dataclass(frozen=True, slots=True)
class Decoded:
    """The arrays one call filled, cut to what was written."""

    offsets: Array
    timestamps_us: Array
    batch_of: Array
    key_offsets: Array
    key_valid: Array
    key_data: Array
    value_offsets: Array
    value_valid: Array
    value_data: Array
    header_offsets: Array
    hkey_offsets: Array
    hkey_data: Array
    hvalue_offsets: Array
    hvalue_valid: Array
    hvalue_data: Array

    @property
    def rows(self) -> int:
        return int(self.offsets.shape[0])


def decode(
    data: Array,
    batches: Array,
    lo: int,
    hi: int,
    with_headers: bool,
) -> Decoded | None:
    """Run :func:`decode_batches`; ``batches`` is an int64 array of rows (start, end, count,
    base offset, base timestamp, max timestamp, log append). None when the loop objects: the
    caller decodes with the reference decoder."""
    size = data.shape[0]
    if size > _INT32_MAX:  # Arrow's binary offsets are int32
        return None
    declared = int(np.maximum(batches[:, 2], 0).sum())  # a negative count fails in the loop
    cap = min(declared, size // MIN_RECORD_BYTES + batches.shape[0])
    hcap = size // 2 if with_headers else 0  # a header takes at least two bytes
    # np.empty: untouched pages cost no memory, so byte arrays the size of the input are free
    # until written, and keys + values + headers together never exceed the input.
    out = [
        np.empty(cap, np.int64),
        np.empty(cap, np.int64),
        np.empty(cap, np.int32),
        np.empty(cap + 1, np.int32),
        np.empty(cap, np.uint8),
        np.empty(size, np.uint8),
        np.empty(cap + 1, np.int32),
        np.empty(cap, np.uint8),
        np.empty(size, np.uint8),
        np.empty(cap + 1, np.int32),
        np.empty(hcap + 1, np.int32),
        np.empty(size if with_headers else 0, np.uint8),
        np.empty(hcap + 1, np.int32),
        np.empty(hcap, np.uint8),
        np.empty(size if with_headers else 0, np.uint8),
    ]
    status, _, n, nh = decode_batches(
        data,
        np.ascontiguousarray(batches[:, 0]),
        np.ascontiguousarray(batches[:, 1]),
        np.ascontiguousarray(batches[:, 2]),
        np.ascontiguousarray(batches[:, 3]),
        np.ascontiguousarray(batches[:, 4]),
        np.ascontiguousarray(batches[:, 5]),
        np.ascontiguousarray(batches[:, 6]).astype(np.uint8),
        lo,
        hi,
        with_headers,
        *out,
    )
    if status != OK:
        return None
    (ofs, ts, bof, koff, kval, kdat, voff, vval, vdat, hoff, hkoff, hkdat, hvoff, hvval, hvdat) = (
        out
    )
    return Decoded(
        ofs[:n],
        ts[:n],
        bof[:n],
        koff[: n + 1],
        kval[:n],
        kdat[: koff[n]],
        voff[: n + 1],
        vval[:n],
        vdat[: voff[n]],
        hoff[: n + 1] if with_headers else hoff[:0],
        hkoff[: nh + 1],
        hkdat[: hkoff[nh]] if with_headers else hkdat,
        hvoff[: nh + 1],
        hvval[:nh],
        hvdat[: hvoff[nh]] if with_headers else hvdat,
    )


class Sections:
    """Whole batches (CRC already checked) gathered for one :func:`decode` call: their records
    sections (decompressed; the one copy is the join), a metadata row and the leader epoch of
    each."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.rows = 0  # records declared by the batches held (an upper bound)
        self.size = 0  # bytes of their records sections
        self.batches: list[RecordBatch] = []
        self._parts: list[bytes | memoryview] = []
        self._meta: list[tuple[int, int, int, int, int, int, int]] = []

    def add(self, batch: RecordBatch) -> None:
        codec = batch.codec
        payload = batch.payload()
        if codec is not Codec.NONE:
            payload = memoryview(decompress(codec, payload, DEFAULT_MAX_DECOMPRESSED))
        log_append = 1 if batch.attributes & TIMESTAMP_TYPE_MASK else 0
        self._meta.append(
            (
                self.size,
                self.size + len(payload),
                batch.records_count,
                batch.base_offset,
                batch.base_timestamp,
                batch.max_timestamp,
                log_append,
            )
        )
        self._parts.append(payload)
        self.batches.append(batch)
        self.size += len(payload)
        self.rows += max(batch.records_count, 0)

    @property
    def meta(self) -> Array:
        """int64 rows of (start, end, count, base offset, base timestamp, max timestamp, log
        append), one per batch."""
        return np.array(self._meta, np.int64).reshape(-1, 7)

    @property
    def epochs(self) -> Array:
        """int32: each batch's partition leader epoch (negative: none)."""
        return np.array([b.partition_leader_epoch for b in self.batches], np.int32)

    def decode(self, lo: int, hi: int, with_headers: bool) -> Decoded | None:
        """:func:`decode` of what is held."""
        data = np.frombuffer(b"".join(self._parts), np.uint8)
        return decode(data, self.meta, lo, hi, with_headers)
