"""Record text in bulk, compiled: the fast twin of :mod:`gateway.api.recordjson`.

A page's batches are decoded into columns by the compiled record loop
(:mod:`gateway.kafka.kernel`) and one compiled loop here writes every record's text into one
buffer: no Python object per record or field. The text is byte for byte what
:class:`gateway.api.recordjson.Writer` writes (and so what ``orjson.dumps`` writes for the
record's object); a hypothesis test holds the two to it.

Base64 digits come from pybase64's vectorised encoder, one call per column (each field padded
to whole 3-byte groups, :func:`_padded`), and the loop copies them with ``memcpy``
(:mod:`gateway.kafka.memcopy`) as it copies every piece of fixed text: per ~1 MiB page of
~200 B records (the HTTP benchmark's), the loop went from 1.75 to 0.70 ms.

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
import pybase64

from gateway.api.formats import BASE64, EmbeddedFormat, Encoders
from gateway.kafka import fast
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.memcopy import copy
from gateway.service.records import ColumnRecords, decode_records
from gateway.service.types import FetchedBatches, IsolationLevel

Array = Any  # numpy arrays

OK: Final = 0
FALLBACK: Final = 1  # the reference writer gives the answer (or the precise error)

_FORMATS: Final = {EmbeddedFormat.BASE64: 0, EmbeddedFormat.HEX: 1}
_BASE64, _HEX = 0, 1


def _text(value: bytes) -> Array:
    return np.frombuffer(value, np.uint8)


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
    copy(out, w, text, 0, n)
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
def _hex(out: Array, w: int, data: Array, lo: int, hi: int) -> int:
    """``data[lo:hi]`` quoted, in hex."""
    out[w] = 34  # '"'
    w += 1
    for i in range(lo, hi):
        b = int(data[i])
        out[w] = _DIGITS[b >> 4]
        out[w + 1] = _DIGITS[b & 15]
        w += 2
    out[w] = 34
    return w + 1


@numba.njit(cache=True, nogil=True)
def _base64(out: Array, w: int, n: int, text: Array, at: int) -> tuple[int, int]:
    """A field of ``n`` bytes quoted in base64: its digits are ``text[at:]`` (the field
    encoded with zero bytes up to a multiple of 3, see :func:`_padded`), whose last one or two
    become ``=`` as the field's length asks. (next ``w``, next ``at``); ``w`` -1 when ``text``
    ends first (never: :func:`write` encodes every field the loop reads)."""
    m = (n + 2) // 3 * 4
    if at + m > text.shape[0]:
        return -1, at
    out[w] = 34  # '"'
    copy(out, w + 1, text, at, m)
    w += m
    rest = n % 3
    if rest == 1:
        out[w - 1] = 61  # '='
        out[w] = 61
    elif rest == 2:
        out[w] = 61
    out[w + 1] = 34
    return w + 2, at + m


@numba.njit(cache=True, nogil=True)
def _field(  # noqa: PLR0917
    out: Array, w: int, i: int, offsets: Array, valid: Array, data: Array, fmt: int, text: Array,
    at: int,
) -> tuple[int, int]:  # fmt: skip
    """Entry ``i`` of a column: null, or its bytes in hex, or in base64 from ``text`` at
    ``at`` (:func:`_base64`). (next ``w``, next ``at``); ``w`` -1 as :func:`_base64` says."""
    if not valid[i]:
        return _put(out, w, _NULL), at
    if fmt == _HEX:
        return _hex(out, w, data, offsets[i], offsets[i + 1]), at
    return _base64(out, w, offsets[i + 1] - offsets[i], text, at)


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
    text: Array,
    at: int,
) -> tuple[int, int]:
    """Record ``i``'s headers from ``,"headers":[`` to the last ``}``, their values' base64
    from ``text`` at ``at``: (next ``w``, next ``at``); ``w`` -1 when a key is not the loop's
    to write."""
    w = _put(out, w, _HEADERS)
    for h in range(header_offsets[i], header_offsets[i + 1]):
        if h > header_offsets[i]:
            out[w] = 44  # ','
            w += 1
        w = _put(out, w, _HKEY)
        w = _key(out, w, hkey_data, hkey_offsets[h], hkey_offsets[h + 1])
        if w < 0:
            return -1, at
        w = _put(out, w, _HVALUE)
        w, at = _field(out, w, h, hvalue_offsets, hvalue_valid, hvalue_data, fmt, text, at)
        if w < 0:
            return -1, at
        out[w] = 125  # '}'
        w += 1
    return w, at


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
    texts: tuple[Array, Array, Array],  # uint8: the keys', values', header values' base64
    sep: int,  # the byte between records
    started: bool,  # a record was written before: the first one follows ``sep``
    out: Array,  # uint8
) -> tuple[int, int]:
    """(status, bytes written)."""
    w = 0
    kt = vt = ht = 0  # where the next key's, value's, header value's base64 starts
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
        w, kt = _field(out, w, i, key_offsets, key_valid, key_data, formats[0], texts[0], kt)
        if w < 0:
            return FALLBACK, 0
        w = _put(out, w, _VALUE)
        w, vt = _field(out, w, i, value_offsets, value_valid, value_data, formats[1], texts[1],
                       vt)  # fmt: skip
        if w < 0:
            return FALLBACK, 0
        if header_offsets[i] == header_offsets[i + 1]:
            w = _put(out, w, _NO_HEADERS_EPOCH)
        else:
            w, ht = _headers(out, w, i, header_offsets, hkey_offsets, hkey_data,
                             hvalue_offsets, hvalue_valid, hvalue_data, formats[2], texts[2],
                             ht)  # fmt: skip
            if w < 0:
                return FALLBACK, 0
            w = _put(out, w, _EPOCH)
        epoch = epochs[b]
        w = _put(out, w, _NULL) if epoch < 0 else _int(out, w, epoch)
        out[w] = 125
        w += 1
    return OK, w


@numba.njit(cache=True, nogil=True)
def _padded(offsets: Array, data: Array, out: Array) -> int:
    """Each entry of a binary column (``data`` cut at ``offsets``) copied into ``out`` and
    followed by zero bytes up to a multiple of 3; the bytes written. ``out`` holds
    ``data.shape[0] + 2 * entries`` bytes, the most this writes."""
    w = 0
    for i in range(offsets.shape[0] - 1):
        lo = offsets[i]
        n = offsets[i + 1] - lo
        copy(out, w, data, lo, n)
        w += n
        while w % 3:
            out[w] = 0
            w += 1
    return w


_NO_TEXT: Final = np.frombuffer(b"", np.uint8)


def _encoded(offsets: Array, data: Array, fmt: int) -> Array:
    """The base64 digits of every entry of a binary column, back to back, each entry encoded on
    its own (:func:`_padded`): one call of pybase64's vectorised encoder for the whole column,
    ~30x faster than the loop's own digits. Empty unless ``fmt`` is base64."""
    if fmt != _BASE64 or offsets.shape[0] < 2:
        return _NO_TEXT
    out = np.empty(data.shape[0] + 2 * (offsets.shape[0] - 1), np.uint8)
    return np.frombuffer(pybase64.b64encode(out[: _padded(offsets, data, out)].data), np.uint8)


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
        records.log_append, records.epochs, formats,
        (_encoded(d.key_offsets, d.key_data, formats[0]),
         _encoded(d.value_offsets, d.value_data, formats[1]),
         _encoded(d.hvalue_offsets, d.hvalue_data, formats[2])),
        sep[0], False,
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
