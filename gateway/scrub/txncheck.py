"""The transaction index of one segment against its log, as the batches stream by (§11).

Each aborted transaction's last offset is its ABORT marker, which is in this segment: a control
batch of the same producer whose record is an ABORT; every ABORT marker has its entry (Kafka
appends one per ABORT marker, in the marker's segment); and every transactional batch whose
marker is in this segment gets the same verdict from the index, through the consumer's filter
(:class:`~gateway.read.txn.AbortedFilter`), as from its marker
(:class:`~gateway.read.txn.MarkerLedger`): else read_committed returns aborted records or drops
committed ones. All errors, on the ``.indexes`` key. Used by
:class:`~gateway.scrub.logscan.LogScanner`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import GatewayError
from gateway.kafka.batch import RecordBatch
from gateway.kafka.control import ControlRecordType
from gateway.kafka.txn_index import AbortedTxn
from gateway.read.txn import AbortedFilter, AbortedTransaction, MarkerLedger
from gateway.scrub.findings import BATCH_DECODE, TXN_INDEX, FindingSink


class TxnChecks:
    """Feed it every batch the framer accepts (:meth:`batch`), then :meth:`finish`."""

    def __init__(
        self, txns: Sequence[AbortedTxn], sink: FindingSink, *, key: str, indexes_key: str
    ) -> None:
        self._sink = sink
        self._key = key
        self._ikey = indexes_key
        self._txns = sorted(txns, key=lambda t: t.last_offset)
        self._xi = 0
        self._aborted_ends = {(t.producer_id, t.last_offset) for t in txns}
        # read_committed verdicts: the index's (through the consumer's filter) against the
        # markers'; None once a batch that cannot be trusted has passed (already reported)
        self._filter: AbortedFilter | None = AbortedFilter(
            AbortedTransaction(t.producer_id, t.first_offset) for t in txns
        )
        self._ledger = MarkerLedger()
        self._open: dict[int, list[tuple[int, bool]]] = {}  # pid -> (batch base, by index)

    def _index_error(self, check: str, message: str) -> None:
        self._sink.error(check, message, self._ikey)

    def distrust(self) -> None:
        """A batch that cannot be trusted (bad CRC, undecodable) passed: it was reported, and
        the verdicts after it are not compared."""
        self._filter = None

    def batch(self, batch: RecordBatch, kind: ControlRecordType | None, where: str) -> None:
        """A batch the framer accepted; ``kind``: its control record's type, if any."""
        self._check_txns(batch, kind)
        self._check_verdicts(batch, kind, where)

    # --- transaction index -----------------------------------------------------------------

    def _check_txns(self, batch: RecordBatch, kind: ControlRecordType | None) -> None:
        txns = self._txns
        while self._xi < len(txns) and txns[self._xi].last_offset <= batch.last_offset:
            txn = txns[self._xi]
            self._xi += 1
            if txn.last_offset < batch.base_offset:
                self._index_error(TXN_INDEX, f"aborted transaction {txn}: no batch holds its end")
            elif not (
                batch.is_control
                and batch.producer_id == txn.producer_id
                and kind is ControlRecordType.ABORT
            ):
                self._index_error(
                    TXN_INDEX,
                    f"aborted transaction {txn}: the batch at offset {txn.last_offset} is not "
                    f"an ABORT marker of producer {txn.producer_id} (read_committed fetches "
                    "would drop the wrong records)",
                )
        if (
            kind is ControlRecordType.ABORT
            and (batch.producer_id, batch.base_offset) not in self._aborted_ends
        ):
            self._index_error(
                TXN_INDEX,
                f"the ABORT marker of producer {batch.producer_id} at offset "
                f"{batch.base_offset} has no transaction index entry: read_committed fetches "
                "would return the records it aborted",
            )

    def _check_verdicts(
        self, batch: RecordBatch, kind: ControlRecordType | None, where: str
    ) -> None:
        """The index's read_committed verdict on each transactional batch against its
        marker's, compared when the marker arrives (transactions still open at the segment's
        end are ended in a later segment, out of this audit's sight)."""
        if self._filter is None:
            return
        try:
            by_index = self._filter.accepts(batch)
            self._ledger.add(batch)
        except GatewayError as exc:  # a control batch without a record
            self._sink.error(BATCH_DECODE, f"{where}: {type(exc).__name__}: {exc}", self._key)
            self._filter = None
            return
        pid = batch.producer_id
        if batch.is_control:
            wrong = []
            for base, index_says in self._open.pop(pid, ()):
                marker_says = self._ledger.committed.pop(base, None)
                if marker_says is not None and marker_says != index_says:
                    wrong.append(base)
            if wrong:
                commit = kind is ControlRecordType.COMMIT
                verb, listed, effect = (
                    ("commits", "aborted", "drop these committed records")
                    if commit
                    else ("aborts", "committed", "return these aborted records")
                )
                self._index_error(
                    TXN_INDEX,
                    f"the {'COMMIT' if commit else 'ABORT'} marker of producer {pid} at offset "
                    f"{batch.base_offset} {verb} its batches at offsets {_offsets(wrong)}, which "
                    f"the transaction index gives as {listed}: read_committed would {effect}",
                )
        elif batch.is_transactional and pid >= 0:
            self._open.setdefault(pid, []).append((batch.base_offset, by_index))

    def finish(self, last_offset: int) -> None:
        """The segment ended at ``last_offset``: entries whose marker no batch reached."""
        for txn in self._txns[self._xi :]:
            self._index_error(
                TXN_INDEX,
                f"aborted transaction {txn}: its marker offset is past the segment's last "
                f"offset {last_offset}",
            )


def _offsets(bases: list[int], shown: int = 5) -> str:
    head = ", ".join(map(str, bases[:shown]))
    return head + (f", ... ({len(bases) - shown} more)" if len(bases) > shown else "")
