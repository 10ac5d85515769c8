"""Record text in bulk, compiled: the fast twin of :mod:`gateway.api.recordjson`.

A page's batches are decoded into columns by the compiled record loop
(:mod:`gateway.kafka.kernel`) and one compiled loop here writes every record's text into one
buffer: no Python object per record or field. The text is byte for byte what
:class:`gateway.api.recordjson.Writer` writes (and so what ``orjson.dumps`` writes for the
record's object); a hypothesis test holds the two to it.

It covers what nearly every request asks: keys, values and header values in ``base64`` (the
default) or ``hex``, header keys of ASCII (escaped as orjson does). Anything else returns None
and the caller renders with the Python writer, which also gives every precise error: a format
the loop does not write (``string``, ``json``), a header key with a byte of 0x80 or more. What
the record loop objects to, and records a consumer would skip, never get here:
:meth:`ColumnRecords.decode` leaves those to the record decoders.

Pure CPU work that holds no GIL in its loops: call it from a worker thread.
"""

from __future__ import annotations

from typing import Any, Final

import numba
import numpy as np

from gateway.api.formats import BASE64, EmbeddedFormat, Encoders
from gateway.kafka import fast
from gateway.kafka.builder import RecordInput, build_batch
from gateway.service.records import ColumnRecords, decode_records
from gateway.service.types import FetchedBatches, IsolationLevel

Array = Any  # numpy arrays

OK: Final = 0
FALLBACK: Final = 1  # the reference writer gives the answer (or the precise error)

_FORMATS: Final = {EmbeddedFormat.BASE64: 0, EmbeddedFormat.HEX: 1}
_BASE64, _HEX = 0, 1


def _text(value: bytes) -> Array:
    return np.frombuffer(value, np.uint8)


_B64: Final = _text(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
# Two base64 digits per 12 bits: two lookups per 3 bytes instead of four.
_B64_PAIRS: Final = np.stack([np.repeat(_B64, 64), np.tile(_B64, 64)], axis=1).reshape(-1).copy()
_DIGITS: Final = _text(b"0123456789abcdef")
_OFFSET: Final = _text(b'{"offset":')
_TIMESTAMP: Final = _text(b',"timestamp":')
_CREATE: Final = _text(b',"timestamp_type":"CreateTime","key":')
_APPEND: Final = _text(b',"timestamp_type":"LogAppendTime","key":')
_VALUE: Final = _text(b',"value":')
_HEADERS: Final = _text(b',"headers":[')
_EPOCH: Final = _text(b'],"leader_epoch":')
_NO_HEADERS_EPOCH: Final = _text(b',"headers":[],"leader_epoch":')
_HKEY: Final = _text(b'{"key":"')
_HVALUE: Final = _text(b'","value":')
_NULL: Final = _text(b"null")
# The most bytes of one record's text besides its fields: the pieces above, two int64s, the
# epoch, the separator. Fields: at most 2 per byte (hex) + 6 (quotes, base64 padding);
# a header: its pieces + a key byte escaped as \u00XX (6 per byte) + its value.
_RECORD_FIXED: Final = 256
_HEADER_FIXED: Final = 32


@numba.njit(cache=True, nogil=True, inline="always")
def _put(out: Array, w: int, text: Array) -> int:
    n: int = text.shape[0]
    for i in range(n):  # a loop: cheaper than a slice assignment for these few bytes
        out[w + i] = text[i]
    return w + n


@numba.njit(cache=True, nogil=True)
def _int(out: Array, w: int, value: int) -> int:
    """Decimal ``value`` (above int64's minimum, which no field here can hold)."""
    if value < 0:
        out[w] = 45  # '-'
        w += 1
        value = -value
    v = numba.uint64(value)  # unsigned division: no floor-division sign fix-ups
    ten = numba.uint64(10)
    digits = 1
    rest = v
    while rest >= ten:
        rest //= ten
        digits += 1
    for i in range(digits - 1, -1, -1):
        out[w + i] = 48 + v % ten
        v //= ten
    return w + digits


@numba.njit(cache=True, nogil=True)
def _bytes(out: Array, w: int, data: Array, lo: int, hi: int, fmt: int) -> int:  # noqa: PLR0917
    """``data[lo:hi]`` quoted, in base64 or hex."""
    out[w] = 34  # '"'
    w += 1
    if fmt == _HEX:
        for i in range(lo, hi):
            b = int(data[i])
            out[w] = _DIGITS[b >> 4]
            out[w + 1] = _DIGITS[b & 15]
            w += 2
    else:
        whole = (hi - lo) // 3
        for k in range(whole):
            i = lo + 3 * k
            x = (int(data[i]) << 16) | (int(data[i + 1]) << 8) | int(data[i + 2])
            high, low = (x >> 12) * 2, (x & 4095) * 2
            o = w + 4 * k
            out[o] = _B64_PAIRS[high]
            out[o + 1] = _B64_PAIRS[high + 1]
            out[o + 2] = _B64_PAIRS[low]
            out[o + 3] = _B64_PAIRS[low + 1]
        w += 4 * whole
        i = lo + 3 * whole
        if hi - i == 1:
            x = int(data[i]) << 16
            out[w] = _B64[x >> 18]
            out[w + 1] = _B64[(x >> 12) & 63]
            out[w + 2] = 61  # '='
            out[w + 3] = 61
            w += 4
        elif hi - i == 2:
            x = (int(data[i]) << 16) | (int(data[i + 1]) << 8)
            out[w] = _B64[x >> 18]
            out[w + 1] = _B64[(x >> 12) & 63]
            out[w + 2] = _B64[(x >> 6) & 63]
            out[w + 3] = 61
            w += 4
    out[w] = 34
    return w + 1


@numba.njit(cache=True, nogil=True)
def _field(  # noqa: PLR0917
    out: Array, w: int, i: int, offsets: Array, valid: Array, data: Array, fmt: int
) -> int:
    if not valid[i]:
        return _put(out, w, _NULL)
    return _bytes(out, w, data, offsets[i], offsets[i + 1], fmt)


@numba.njit(cache=True, nogil=True)
def _key(out: Array, w: int, data: Array, lo: int, hi: int) -> int:
    """A header key's string content as orjson escapes it; -1 for a byte of 0x80 or more."""
    for i in range(lo, hi):
        b = int(data[i])
        if b >= 0x80:
            return -1
        if b in (34, 92):  # '"', '\\'
            out[w] = 92
            out[w + 1] = b
            w += 2
        elif b >= 0x20:
            out[w] = b
            w += 1
        elif b in (8, 9, 10, 12, 13):
            out[w] = 92
            out[w + 1] = (98, 116, 110, 0, 102, 114)[b - 8]  # b t n - f r
            w += 2
        else:
            out[w] = 92  # \u00XX
            out[w + 1] = 117
            out[w + 2] = 48
            out[w + 3] = 48
            out[w + 4] = _DIGITS[b >> 4]
            out[w + 5] = _DIGITS[b & 15]
            w += 6
    return w


@numba.njit(cache=True, nogil=True)
def _headers(  # noqa: PLR0917
    out: Array,
    w: int,
    i: int,
    header_offsets: Array,
    hkey_offsets: Array,
    hkey_data: Array,
    hvalue_offsets: Array,
    hvalue_valid: Array,
    hvalue_data: Array,
    fmt: int,
) -> int:
    """Record ``i``'s headers from ``,"headers":[`` to the last ``}``; -1 when a key is not
    the loop's to write."""
    w = _put(out, w, _HEADERS)
    for h in range(header_offsets[i], header_offsets[i + 1]):
        if h > header_offsets[i]:
            out[w] = 44  # ','
            w += 1
        w = _put(out, w, _HKEY)
        w = _key(out, w, hkey_data, hkey_offsets[h], hkey_offsets[h + 1])
        if w < 0:
            return -1
        w = _put(out, w, _HVALUE)
        w = _field(out, w, h, hvalue_offsets, hvalue_valid, hvalue_data, fmt)
        out[w] = 125  # '}'
        w += 1
    return w


@numba.njit(cache=True, nogil=True)
def write_records(  # noqa: PLR0917 - numba takes arrays, not objects
    d_offsets: Array,  # the kernel's Decoded columns
    d_timestamps_us: Array,
    d_batch_of: Array,
    key_offsets: Array,
    key_valid: Array,
    key_data: Array,
    value_offsets: Array,
    value_valid: Array,
    value_data: Array,
    header_offsets: Array,
    hkey_offsets: Array,
    hkey_data: Array,
    hvalue_offsets: Array,
    hvalue_valid: Array,
    hvalue_data: Array,
    log_append: Array,  # int64 per batch
    epochs: Array,  # int32 per batch (negative: null)
    formats: Array,  # int64: key, value, header value format
    sep: int,  # the byte between records
    started: bool,  # a record was written before: the first one follows ``sep``
    out: Array,  # uint8
) -> tuple[int, int]:
    """(status, bytes written)."""
    w = 0
    cap = out.shape[0]
    for i in range(d_offsets.shape[0]):
        b = d_batch_of[i]
        need = _RECORD_FIXED + 2 * (
            key_offsets[i + 1] - key_offsets[i] + value_offsets[i + 1] - value_offsets[i]
        )
        for h in range(header_offsets[i], header_offsets[i + 1]):
            need += _HEADER_FIXED + 6 * (hkey_offsets[h + 1] - hkey_offsets[h])
            need += 2 * (hvalue_offsets[h + 1] - hvalue_offsets[h])
        if w + need > cap:
            return FALLBACK, w  # never: the caller sizes ``out`` by the same rule
        if started:
            out[w] = sep
            w += 1
        started = True
        w = _put(out, w, _OFFSET)
        w = _int(out, w, d_offsets[i])
        w = _put(out, w, _TIMESTAMP)
        w = _int(out, w, d_timestamps_us[i] // 1000)
        w = _put(out, w, _APPEND if log_append[b] else _CREATE)
        w = _field(out, w, i, key_offsets, key_valid, key_data, formats[0])
        w = _put(out, w, _VALUE)
        w = _field(out, w, i, value_offsets, value_valid, value_data, formats[1])
        if header_offsets[i] == header_offsets[i + 1]:
            w = _put(out, w, _NO_HEADERS_EPOCH)
        else:
            w = _headers(out, w, i, header_offsets, hkey_offsets, hkey_data,
                         hvalue_offsets, hvalue_valid, hvalue_data, formats[2])  # fmt: skip
            if w < 0:
                return FALLBACK, 0
            w = _put(out, w, _EPOCH)
        epoch = epochs[b]
        w = _put(out, w, _NULL) if epoch < 0 else _int(out, w, epoch)
        out[w] = 125
        w += 1
    return OK, w


def formats_of(encoders: Encoders) -> Array | None:
    """The loop's format codes, or None when one of them is not the loop's to write."""
    codes = [_FORMATS.get(field.format) for field in encoders]
    if None in codes:
        return None
    return np.array(codes, np.int64)


def write(
    records: ColumnRecords,
    formats: Array,
    sep: bytes,
    *,
    prefix: bytes = b"",
    suffix: bytes = b"",
) -> memoryview | None:
    """``prefix``, the text of ``records`` (``sep`` between them), ``suffix``: in one buffer,
    the response body as it is (no join, no copy). None when the Python writer must write it
    (see the module docstring)."""
    d = records.columns
    size = (
        len(prefix)
        + d.rows * _RECORD_FIXED
        + 2 * (d.key_data.shape[0] + d.value_data.shape[0] + d.hvalue_data.shape[0])
        + (d.hkey_offsets.shape[0] - 1) * _HEADER_FIXED
        + 6 * d.hkey_data.shape[0]
        + len(suffix)
    )
    out = np.empty(size, np.uint8)
    out[: len(prefix)] = np.frombuffer(prefix, np.uint8)
    status, written = write_records(
        d.offsets, d.timestamps_us, d.batch_of,
        d.key_offsets, d.key_valid, d.key_data,
        d.value_offsets, d.value_valid, d.value_data,
        d.header_offsets, d.hkey_offsets, d.hkey_data,
        d.hvalue_offsets, d.hvalue_valid, d.hvalue_data,
        records.log_append, records.epochs, formats, sep[0], False,
        out[len(prefix) : size - len(suffix)],
    )  # fmt: skip
    if status != OK:
        return None
    end = len(prefix) + written
    out[end : end + len(suffix)] = np.frombuffer(suffix, np.uint8)
    view: memoryview = out[: end + len(suffix)].data
    return view


def warm_up() -> None:
    """Compile both loops now (seconds on a first start, a fraction of one from numba's
    cache), so no request waits for it: a server calls this in a thread as it starts."""
    batch = build_batch(0, [RecordInput(b"v", key=b"k", headers=[("h", b"x")])])
    fast.warm_up(batch)
    records = decode_records(
        (FetchedBatches(0, batch, 0, 0),), 0, IsolationLevel.READ_UNCOMMITTED, None
    )
    if not isinstance(records, ColumnRecords):
        raise AssertionError("the compiled record loop refused a plain batch")
    codes = formats_of(BASE64)
    assert codes is not None
    write(records, codes, b"\n")
