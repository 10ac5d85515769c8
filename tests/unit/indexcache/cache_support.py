"""Helpers of the index cache tests: segment index bytes and a counting, gateable loader."""

from __future__ import annotations

import asyncio
from collections import Counter

from gateway.kafka.epoch import format_leader_epoch_checkpoint
from gateway.kafka.offset_index import encode_offset_index
from gateway.kafka.time_index import encode_time_index
from gateway.kafka.txn_index import AbortedTxn, encode_txn_index
from indexcache import SegmentIndexBytes, SegmentKey

T0 = 1_700_000_000_000


def segment_bytes(
    base: int, entries: int, *, step: int = 10, txns: int = 1, epochs: int = 2
) -> SegmentIndexBytes:
    """Indexes of a segment at ``base`` with ``entries`` offset and time entries, ``step``
    offsets apart; an offset index entry every 4096 bytes; ``txns`` aborted transactions
    (``None`` when 0); ``epochs`` leader epochs starting at ``base``."""
    offsets = [base + (i + 1) * step for i in range(entries)]
    offset_index = encode_offset_index(((o, 4096 * (i + 1)) for i, o in enumerate(offsets)), base)
    time_index = encode_time_index(((T0 + 100 * i, o) for i, o in enumerate(offsets)), base)
    aborted = [
        AbortedTxn(1000 + i, base + 5 * i, base + 5 * i + 3, base + 5 * i) for i in range(txns)
    ]
    epoch_rows = [(e, base + 50 * e) for e in range(epochs)]
    return SegmentIndexBytes(
        base_offset=base,
        offset=offset_index,
        time=time_index,
        leader_epoch=format_leader_epoch_checkpoint(epoch_rows),
        txn=encode_txn_index(aborted) if txns else None,
    )


def key(n: int, base: int | None = None) -> SegmentKey:
    """A segment key: id ``seg<n>`` (padded to look like a Uuid), start offset ``base``."""
    return SegmentKey(f"seg{n:04d}-AAAAAAAAAAAAAAA", n * 1000 if base is None else base)


class Loader:
    """An in-memory loader that counts calls per key.

    While ``gate`` is cleared, loads wait for it; ``fail`` (an exception) makes every load
    raise it after the wait.
    """

    def __init__(self, segments: dict[SegmentKey, SegmentIndexBytes]) -> None:
        self.segments = segments
        self.calls: Counter[SegmentKey] = Counter()
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: BaseException | None = None

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    async def __call__(self, k: SegmentKey) -> SegmentIndexBytes:
        self.calls[k] += 1
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return self.segments[k]


def loader_for(*keys: SegmentKey, entries: int = 20) -> Loader:
    return Loader({k: segment_bytes(k.start_offset, entries) for k in keys})
