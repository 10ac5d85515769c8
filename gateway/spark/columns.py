"""Arrow columns of Kafka records, as the ``tiered-kafka`` source yields them.

Two builders with one result:

* :class:`FastColumns`, the executor's path: the records sections of many batches go to the
  compiled loop (:mod:`gateway.kafka.kernel`) whose arrays become Arrow buffers without a copy;
* :class:`RecordColumns`, the reference: the decoder's record objects, one list per field,
  then ``pa.array``. FastColumns falls back to it for a whole Arrow batch whenever the loop
  objects, so the reference decoder raises the precise error (or gives Java's answer for a
  header key that is not UTF-8).

Timestamps are microseconds in UTC (Spark's TimestampType); a LogAppendTime batch gives every
record its max timestamp and type 1. A negative leader epoch (a batch from before epochs) is
null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa

from gateway.kafka import kernel
from gateway.kafka.batch import TIMESTAMP_TYPE_MASK, RecordBatch
from gateway.kafka.records import RecordLike

HEADER_TYPE: Final = pa.struct([("key", pa.string()), ("value", pa.binary())])
# Spark's to_arrow_schema names the list child "element"; the schemas must be equal.
HEADERS_TYPE: Final = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")
_MS_TYPE: Final = pa.timestamp("ms", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka-source columns (plus ``leaderEpoch``), as ``to_arrow_schema`` gives them."""
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP_TYPE),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", HEADERS_TYPE))
    fields.append(("leaderEpoch", pa.int32()))
    return pa.schema(fields)


class RecordColumns:
    """Accumulates decoded records into column lists; ``flush`` makes one Arrow batch."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self._topic = topic
        self._partition = partition
        self._headers = include_headers
        self._schema = arrow_schema(include_headers)
        self._clear()

    def _clear(self) -> None:
        self.rows = 0
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._types: list[int] = []
        self._epochs: list[int | None] = []
        self._header_rows: list[Any] = []

    def add(self, batch: RecordBatch, records: Sequence[RecordLike]) -> None:
        n = len(records)
        if not n:
            return
        self._keys += [r.key for r in records]
        self._values += [r.value for r in records]
        self._offsets += [r.offset for r in records]
        if batch.attributes & TIMESTAMP_TYPE_MASK:  # LOG_APPEND_TIME: the batch's max
            self._timestamps += [batch.max_timestamp] * n
            self._types += [1] * n
        else:
            self._timestamps += [r.timestamp for r in records]
            self._types += [0] * n
        epoch = batch.partition_leader_epoch
        self._epochs += [epoch if epoch >= 0 else None] * n
        if self._headers:
            self._header_rows += [r.headers for r in records]
        self.rows += n

    def flush(self) -> pa.RecordBatch:
        n = self.rows
        columns = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.repeat(pa.scalar(self._topic, pa.string()), n),
            pa.repeat(pa.scalar(self._partition, pa.int32()), n),
            pa.array(self._offsets, pa.int64()),
            pa.array(self._timestamps, _MS_TYPE).cast(TIMESTAMP_TYPE),
            pa.array(self._types, pa.int32()),
        ]
        if self._headers:
            columns.append(pa.array(self._header_rows, HEADERS_TYPE))
        columns.append(pa.array(self._epochs, pa.int32()))
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


class FastColumns:
    """Accumulates whole batches (CRC already checked) and decodes them in one compiled pass
    on ``flush``; records outside ``[lo, hi)`` are dropped."""

    def __init__(self, topic: str, partition: int, include_headers: bool, lo: int, hi: int) -> None:
        self._topic = topic
        self._partition = partition
        self._headers = include_headers
        self._lo = lo
        self._hi = hi
        self._schema = arrow_schema(include_headers)
        self.fallbacks = 0  # Arrow batches the reference decoder built
        self._held = kernel.Sections()

    @property
    def rows(self) -> int:
        """Records declared by the batches held (an upper bound)."""
        return self._held.rows

    @property
    def size(self) -> int:
        """Bytes of the records sections held."""
        return self._held.size

    def add(self, batch: RecordBatch) -> None:
        self._held.add(batch)

    @property
    def held(self) -> int:
        """Batches added since the last flush (a corrupt one may declare no records)."""
        return len(self._held.batches)

    def flush(self) -> pa.RecordBatch:
        try:
            decoded = self._held.decode(self._lo, self._hi, self._headers)
            result = None if decoded is None else self._arrow(decoded)
            if result is None:
                self.fallbacks += 1
                result = self._reference()
            return result
        finally:
            self._held.clear()

    def _arrow(self, d: kernel.Decoded) -> pa.RecordBatch | None:
        n = d.rows
        meta = self._held.meta
        epochs = self._held.epochs[d.batch_of]
        columns = [
            _binary(pa.binary(), d.key_offsets, d.key_valid, d.key_data),
            _binary(pa.binary(), d.value_offsets, d.value_valid, d.value_data),
            pa.repeat(pa.scalar(self._topic, pa.string()), n),
            pa.repeat(pa.scalar(self._partition, pa.int32()), n),
            pa.array(d.offsets, pa.int64()),
            pa.array(d.timestamps_us, TIMESTAMP_TYPE),
            pa.array(meta[:, 6].astype(np.int32)[d.batch_of], pa.int32()),
        ]
        if self._headers:
            keys = _binary(pa.string(), d.hkey_offsets, None, d.hkey_data)
            try:
                keys.validate(full=True)  # UTF-8: Java replaces what Arrow refuses
            except pa.ArrowInvalid:
                return None
            values = _binary(pa.binary(), d.hvalue_offsets, d.hvalue_valid, d.hvalue_data)
            pairs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
            offsets = pa.array(d.header_offsets, pa.int32())
            columns.append(pa.ListArray.from_arrays(offsets, pairs, type=HEADERS_TYPE))
        columns.append(pa.array(epochs, pa.int32(), mask=epochs < 0))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def _reference(self) -> pa.RecordBatch:
        columns = RecordColumns(self._topic, self._partition, self._headers)
        lo, hi = self._lo, self._hi
        for batch in self._held.batches:
            records = batch.records(verify_crc=False)  # checked when framed
            # every record, as the compiled pass does (an offset outside the batch's own range
            # is possible only in a batch the broker did not validate)
            columns.add(batch, [r for r in records if lo <= r.offset < hi])
        return columns.flush()


def _binary(kind: pa.DataType, offsets: Any, valid: Any, data: Any) -> pa.Array:
    """A binary or string array over the kernel's offsets, validity bytes and data."""
    n = len(offsets) - 1
    nulls = 0 if valid is None else n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, n, buffers, null_count=nulls)
