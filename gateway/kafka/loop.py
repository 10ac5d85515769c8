"""The compiled loop of v2 record decoding (numba): the records of many batches into columns.

The loop walks the records of many batches and writes offsets, timestamps, key and value bytes
and headers into the arrays :mod:`gateway.kafka.kernel` sized; this module imports nothing of
the batch framing, so the per-batch path (:mod:`gateway.kafka.fast`) can use :func:`plain`.

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
because aiokafka's C decoder reads it as a varint. :func:`plain` runs these checks alone, so
that decoder is only given batches it reads as Java does.

Varints: a varint is at most 5 bytes, a varlong at most 10, as in ``ByteUtils``. Java drops the
bits of a 5th byte above 0x0F (a 10th above 0x01) past the type; this loop refuses them
instead, so such a batch goes to the reference decoder, which drops them as Java does, and never
to aiokafka's decoder, which would keep them.
"""

from __future__ import annotations

from typing import Any, Final

import numba
import numpy as np

from gateway.kafka.memcopy import copy

OK: Final = 0
BAD_RECORD: Final = 1  # malformed bytes: the reference decoder says exactly what
NO_ROOM: Final = 2  # more records or headers than the declared counts allow
MIN_RECORD_BYTES: Final = 7  # length, attributes, 2 deltas, key, value, header count

_INT64_LOW_63: Final = 0x7FFFFFFFFFFFFFFF
_MAX_MS: Final = _INT64_LOW_63 // 1000

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
        copy(out, used, data, pos, length)
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
                    copy(hkey_data, hkb, data, hkpos, hklen)
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


@numba.njit(cache=True, nogil=True)
def plain(data: Array, start: int, end: int, count: int, base_offset: int) -> bool:
    """Whether the records of one batch (``data[start:end]``, uint8; ``count`` declared, from
    ``base_offset``) pass every check of :func:`decode_batches`."""
    meta = np.zeros(5, np.int64)  # one batch: its rows are views of this (no allocation)
    meta[0], meta[1], meta[2], meta[3] = start, end, count, base_offset
    first = np.zeros(1, np.int32)  # each column's offsets: only entry 0 is written
    flags = np.zeros(1, np.uint8)
    none64, none32, none8 = meta[:0], first[:0], flags[:0]
    status, _, _, _ = decode_batches(
        data,
        meta[0:1],
        meta[1:2],
        meta[2:3],
        meta[3:4],
        meta[4:5],
        meta[4:5],
        flags,
        0,
        0,  # no offset is in [0, 0): every record is parsed and checked, none is written
        False,
        none64,
        none64,
        none32,
        first,
        none8,
        none8,
        first,
        none8,
        none8,
        first,
        first,
        none8,
        first,
        none8,
        none8,
    )
    return bool(status == OK)
