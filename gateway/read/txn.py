"""read_committed that proves itself: the transaction index checked against the control records.

A read_committed reader drops a transactional batch when the transaction index lists its
producer's transaction as aborted (:class:`AbortedFilter`, the consumer's algorithm). The index
is a separate object: a damaged byte in it would return aborted records as committed, or drop
committed ones. The control records are the ground truth: a transactional batch belongs to the
transaction its producer ends with the next COMMIT or ABORT marker after it.

:class:`MarkerLedger` follows the markers through the batches of a read (and, for transactions
still open where the read ends, through the batches after it, read only for this), and
:func:`check_verdicts` requires every transactional batch returned to get the same verdict from
the index as from its marker. Disagreement raises :class:`CorruptIndexError`; a transaction
whose marker is not in the remote tier yet is reported by :meth:`MarkerLedger.unresolved`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gateway.errors import CorruptIndexError
from gateway.kafka.batch import RecordBatch
from gateway.kafka.control import ControlRecordType, control_type


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction as a fetch reports it (``FetchResponse.AbortedTransaction``)."""

    producer_id: int
    first_offset: int


def marker_kind(batch: RecordBatch) -> ControlRecordType | None:
    """COMMIT or ABORT for a control batch (CRC checked), ``None`` otherwise."""
    if not batch.is_control:
        return None
    records = batch.records()
    if not records:
        raise CorruptIndexError(
            f"control batch at offset {batch.base_offset} (byte {batch.position}) has no record"
        )
    return control_type(records[0].key)


class AbortedFilter:
    """The consumer's read_committed batch filter, batch by batch in offset order.

    Shared by the service and the Spark reader, so both drop exactly what a Java consumer
    drops. ``accepts`` is False for control batches (an ABORT marker also ends its producer's
    aborted transaction) and for transactional batches of a producer whose aborted transaction
    has started at or before the batch's last offset.
    """

    __slots__ = ("_aborted_pids", "_queue")

    def __init__(self, aborted: Iterable[AbortedTransaction]) -> None:
        self._queue = [(t.first_offset, t.producer_id) for t in aborted]
        heapq.heapify(self._queue)
        self._aborted_pids: set[int] = set()

    def accepts(self, batch: RecordBatch) -> bool:
        if batch.producer_id < 0:
            return not batch.is_control
        queue = self._queue
        while queue and queue[0][0] <= batch.last_offset:
            self._aborted_pids.add(heapq.heappop(queue)[1])
        if batch.is_control:
            if marker_kind(batch) is ControlRecordType.ABORT:
                self._aborted_pids.discard(batch.producer_id)
            return False
        return not (batch.is_transactional and batch.producer_id in self._aborted_pids)


@dataclass(slots=True)
class _Open:
    first: int  # base offset of the transaction's first batch seen
    batches: list[int] = field(default_factory=list)  # base offsets of its data batches


@dataclass(slots=True)
class MarkerLedger:
    """The marker-given fate of every transactional data batch fed to it, in offset order."""

    committed: dict[int, bool] = field(default_factory=dict)  # batch base offset -> verdict
    _open: dict[int, _Open] = field(default_factory=dict)  # producer id -> its open txn

    def add(self, batch: RecordBatch) -> None:
        pid = batch.producer_id
        if batch.is_control:
            kind = marker_kind(batch)
            txn = self._open.pop(pid, None)
            if txn is not None and kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                verdict = kind is ControlRecordType.COMMIT
                for base in txn.batches:
                    self.committed[base] = verdict
        elif batch.is_transactional and pid >= 0:
            txn = self._open.get(pid)
            if txn is None:
                txn = self._open[pid] = _Open(batch.base_offset)
            txn.batches.append(batch.base_offset)

    def close(self, batch: RecordBatch) -> None:
        """A batch read after the response, only to resolve transactions still open (its CRC
        is checked: the attributes say whether it is a marker)."""
        batch.ensure_valid()
        if batch.is_control and batch.producer_id in self._open:
            self.add(batch)

    @property
    def open_producers(self) -> set[int]:
        return set(self._open)

    def unresolved(self) -> int | None:
        """The first base offset of a transaction whose marker was not found, if any."""
        return min((t.first for t in self._open.values()), default=None)


def check_verdicts(
    batches: Sequence[RecordBatch], aborted: Iterable[AbortedTransaction], ledger: MarkerLedger
) -> None:
    """Every transactional data batch of ``batches`` (a response, in offset order) gets the
    same verdict from the transaction index (``aborted``, through the consumer's filter) as
    from its marker in ``ledger``; raises :class:`CorruptIndexError` otherwise."""
    verdicts = AbortedFilter(aborted)
    for batch in batches:
        by_index = verdicts.accepts(batch)
        if batch.is_control or not batch.is_transactional or batch.producer_id < 0:
            continue
        by_marker = ledger.committed.get(batch.base_offset)
        if by_marker is None:
            raise CorruptIndexError(
                f"transactional batch at offset {batch.base_offset} of producer "
                f"{batch.producer_id}: no marker ends its transaction"
            )
        if by_index != by_marker:
            said = "committed" if by_marker else "aborted"
            raise CorruptIndexError(
                f"transactional batch at offset {batch.base_offset} of producer "
                f"{batch.producer_id}: its marker says {said}, the transaction index says "
                f"{'committed' if by_index else 'aborted'}"
            )
