"""Compiled v2 record decoding: the records of many batches straight into columns.

Spark executors and the JSON/NDJSON renderer spent their Python time building an object per
record and field, then lists (``docs/benchmarks.md``). Here the compiled loop
(:func:`gateway.kafka.loop.decode_batches`, where its checks are written down) walks the
records of many batches and writes offsets, timestamps, key and value bytes and headers into
arrays this module sizes: Spark hands them to Arrow as buffers without a copy
(:mod:`gateway.spark.columns`), the HTTP API writes JSON text from them
(:mod:`gateway.api.jsonkernel`). Any objection of the loop returns None, and the caller decodes
those batches with the reference decoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, RecordBatch
from gateway.kafka.codecs import DEFAULT_MAX_DECOMPRESSED, Codec, decompress
from gateway.kafka.ints import INT32_MAX
from gateway.kafka.loop import MIN_RECORD_BYTES, OK, Array, decode_batches


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
    if size > INT32_MAX:  # Arrow's binary offsets are int32
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
