"""Transaction index (``.txnindex``): the aborted transactions whose ABORT marker is in a segment.

Mirrors ``org.apache.kafka.storage.internals.log.TransactionIndex`` and ``AbortedTxn``.

Layout: no header, no preallocation; ``len // 34`` big-endian 34-byte entries, and any bytes after
the last whole entry are ignored::

    bytes 0-1    int16  version (0). Kafka reads only the first byte, as a signed byte, and
                        rejects versions > 0
    bytes 2-9    int64  producerId
    bytes 10-17  int64  firstOffset       (absolute)
    bytes 18-25  int64  lastOffset        (absolute)
    bytes 26-33  int64  lastStableOffset  (absolute; the LSO when the abort was written)

Example: producerId 1000, firstOffset 100, lastOffset 200, lastStableOffset 100 is
``00 00 | 00..03 E8 | 00..00 64 | 00..00 C8 | 00..00 64``.

Sanity check (``TransactionIndex.sanityCheck``): every entry's lastOffset is >= the segment's
start offset. The file is small (one entry per aborted transaction), so it is decoded once.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from gateway.errors import CorruptIndexError
from gateway.kafka.ints import INT64_MAX, INT64_MIN, BytesLike, as_byte_buffer, check_int

__all__ = [
    "CURRENT_VERSION",
    "ENTRY_SIZE",
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "encode_txn_index",
]

ENTRY_SIZE = 34
"""Bytes per transaction-index entry (``AbortedTxn.TOTAL_SIZE``)."""

CURRENT_VERSION = 0
"""``AbortedTxn.CURRENT_VERSION``."""

_READ_ENTRY = struct.Struct(">bxqqqq")  # version (first byte, signed), ignored byte, 4 x int64
_WRITE_ENTRY = struct.Struct(">hqqqq")  # version as int16, 4 x int64


class AbortedTxn(NamedTuple):
    """One aborted transaction; every offset is absolute."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexSearchResult(NamedTuple):
    """``TxnIndexSearchResult``: the matches and whether later segments need not be searched."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """A read-only transaction index over a buffer.

    Every entry's version is checked on construction (Kafka checks it while iterating; its
    remote index cache iterates them all in ``sanityCheck`` when it loads the file). The
    constructor also runs the sanity check unless ``check=False``. Both raise
    :class:`CorruptIndexError`.
    """

    __slots__ = ("_start_offset", "_txns")

    def __init__(self, buf: BytesLike, start_offset: int, *, check: bool = True) -> None:
        view = as_byte_buffer(buf)
        whole = len(view) // ENTRY_SIZE * ENTRY_SIZE
        txns: list[AbortedTxn] = []
        for n, (version, *fields) in enumerate(_READ_ENTRY.iter_unpack(memoryview(view)[:whole])):
            if version > CURRENT_VERSION:
                raise CorruptIndexError(
                    f"transaction index entry {n} (byte {n * ENTRY_SIZE}) has version {version}; "
                    f"the highest known version is {CURRENT_VERSION}"
                )
            txns.append(AbortedTxn._make(fields))
        self._txns: tuple[AbortedTxn, ...] = tuple(txns)
        self._start_offset = start_offset
        if check:
            self.sanity_check()

    def sanity_check(self) -> None:
        """Kafka's ``TransactionIndex.sanityCheck``; raises :class:`CorruptIndexError`."""
        for n, txn in enumerate(self._txns):
            if txn.last_offset < self._start_offset:
                raise CorruptIndexError(
                    f"transaction index entry {n} {txn} has a last offset less than the "
                    f"segment start offset {self._start_offset}"
                )

    @property
    def start_offset(self) -> int:
        """The start (base) offset of the segment the index belongs to."""
        return self._start_offset

    def __len__(self) -> int:
        return len(self._txns)

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(self._txns)

    def __repr__(self) -> str:
        return f"TransactionIndex(start_offset={self._start_offset}, entries={len(self._txns)})"

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry in file order (``allAbortedTxns``)."""
        return list(self._txns)

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        Walks the entries in order keeping those with ``last_offset >= fetch_offset`` and
        ``first_offset < upper_bound_offset``; stops with ``is_complete=True`` at the first
        entry whose ``last_stable_offset >= upper_bound_offset`` (kept if it matches). Reaching
        the end gives ``is_complete=False``: the next segment's index must be searched too.
        """
        found: list[AbortedTxn] = []
        for txn in self._txns:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)


def encode_txn_index(txns: Iterable[AbortedTxn]) -> bytes:
    """Encode aborted transactions as a version-0 transaction index.

    Raises ``ValueError`` when a field does not fit an int64.
    """
    out = bytearray()
    for txn in txns:
        for name, value in zip(AbortedTxn._fields, txn, strict=True):
            check_int(name, value, INT64_MIN, INT64_MAX)
        out += _WRITE_ENTRY.pack(CURRENT_VERSION, *txn)
    return bytes(out)
