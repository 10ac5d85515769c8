"""Checks of a remote segment's indexes against what its metadata promises.

Kafka's own sanity checks (``kafka-formats.md`` §10) are O(1) and let through what a damaged
byte makes of an index. A remote segment was rolled and trimmed before upload, so its indexes
must also satisfy what ``LogSegment.append`` guarantees by construction
(``remote-read-semantics.md`` §15a), checked here once per loaded entry:

* offset index: offsets and positions strictly increase, offsets lie in
  ``[startOffset, endOffset]``, positions in ``[0, size)``;
* time index: timestamps and offsets never decrease, offsets lie in the segment;
* transaction index: ``firstOffset <= lastOffset`` and ``lastOffset`` (its ABORT marker) lies in
  the segment (``firstOffset`` may lie in an earlier one: a transaction can span a roll).

Raises :class:`gateway.errors.CorruptIndexError` naming the first entry that breaks a rule.
"""

from __future__ import annotations

import operator
import sys
from array import array
from itertools import compress, count

from gateway.errors import CorruptIndexError
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.time_index import TimeIndex
from gateway.kafka.txn_index import TransactionIndex

__all__ = ["check_offset_index", "check_time_index", "check_txn_index"]


def _int32_be(buf: bytes | memoryview) -> array[int]:
    values = array("i")
    values.frombytes(bytes(buf))
    if sys.byteorder == "little":
        values.byteswap()
    return values


def _first_not_rising(values: array[int] | list[int], strict: bool) -> int | None:
    """Index ``i`` of the first ``values[i] (<= or <) values[i-1]``; ``None`` if none."""
    op = operator.lt if strict else operator.le
    ok = list(map(op, values[:-1], values[1:]))
    if all(ok):
        return None
    return next(compress(count(1), (not x for x in ok)))


def check_offset_index(index: OffsetIndex, end_offset: int, size: int) -> None:
    n = len(index)
    if n == 0:
        return
    base = index.base_offset
    words = _int32_be(memoryview(index._buf)[: n * 8])
    rel, pos = words[0::2], words[1::2]
    bad = _first_not_rising(rel, True)
    if bad is None:
        bad = _first_not_rising(pos, True)
    if bad is not None:
        raise CorruptIndexError(
            f"offset index entries {bad - 1} {index.entry(bad - 1)} and {bad} "
            f"{index.entry(bad)}: offsets and positions must strictly increase"
        )
    first, last = index.entry(0), index.entry(n - 1)
    for which, entry in (("first", first), ("last", last)):
        if not base <= entry.offset <= end_offset:
            raise CorruptIndexError(
                f"offset index {which} entry {entry}: offset outside the segment's "
                f"{base}..{end_offset}"
            )
        if not 0 <= entry.position < size:
            raise CorruptIndexError(
                f"offset index {which} entry {entry}: position outside the segment's {size} bytes"
            )


def check_time_index(index: TimeIndex, end_offset: int) -> None:
    entries = list(index.entries())
    if not entries:
        return
    stamps = [e.timestamp for e in entries]
    offsets = [e.offset for e in entries]
    bad = _first_not_rising(stamps, False)
    if bad is None:
        bad = _first_not_rising(offsets, False)
    if bad is not None:
        raise CorruptIndexError(
            f"time index entries {bad - 1} {entries[bad - 1]} and {bad} {entries[bad]}: "
            "timestamps and offsets must not decrease"
        )
    base = index.base_offset
    for which, entry in (("first", entries[0]), ("last", entries[-1])):
        if not base <= entry.offset <= end_offset:
            raise CorruptIndexError(
                f"time index {which} entry {entry}: offset outside the segment's "
                f"{base}..{end_offset}"
            )


def check_txn_index(index: TransactionIndex, end_offset: int) -> None:
    start = index.start_offset
    prev = -1
    for n, txn in enumerate(index):
        if txn.last_offset <= prev:
            raise CorruptIndexError(
                f"transaction index entry {n} {txn}: markers are appended in offset order, "
                f"the previous entry's marker is at {prev}"
            )
        prev = txn.last_offset
        if txn.first_offset > txn.last_offset or txn.first_offset < 0:
            raise CorruptIndexError(
                f"transaction index entry {n} {txn}: first offset after its last offset"
            )
        if not start <= txn.last_offset <= end_offset:
            raise CorruptIndexError(
                f"transaction index entry {n} {txn}: its ABORT marker offset lies outside the "
                f"segment's {start}..{end_offset}"
            )
        if txn.producer_id < 0:
            raise CorruptIndexError(f"transaction index entry {n} {txn}: negative producer id")
