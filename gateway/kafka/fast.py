"""The C fast path for per-record decoding.

Our own code frames batches, checks CRCs and decompresses; the per-record varint work is handed
to aiokafka's Cython ``DefaultRecordBatch`` (about 2.8 M records/s here against ~0.7 M/s for the
best pure-Python loop, see docs/benchmarks.md). Its objects satisfy
:class:`gateway.kafka.records.RecordLike`.

The C decoder is never the last word. It is lenient where Kafka's reader is strict (the
attributes byte read as a varint, varints of any length), so it only sees batches that first
pass the compiled loop's checks (:func:`gateway.kafka.loop.plain`), where it reads what Java reads;
and whenever it objects (a corrupt record, a header key that is not strict UTF-8, which Java
replaces rather than rejects), these functions return None. The caller then decodes with the
reference decoder, which either returns Kafka's exact result or raises the precise typed error.
Without the extension (an unusual platform), or with the compiled loops off
(:func:`use_compiled`, the ``compiled_records`` setting), everything takes the reference path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from gateway.kafka.records import RecordLike

_CBatch: Any
try:
    from aiokafka.record._crecords import default_records as _compiled

    _CBatch = _compiled.DefaultRecordBatch
except ImportError:  # pragma: no cover - platforms without the compiled extension
    _CBatch = None

_ATTRIBUTES_LOW_BYTE: Final = 22
_CODEC_CLEAR: Final = 0xF8
_RECORDS_AT: Final = 61  # the v2 batch header's size

AVAILABLE = _CBatch is not None


class _Policy:
    compiled = True


def use_compiled(enabled: bool) -> None:
    """Whether this process may load the compiled loops (numba, ~110 MiB resident) that check
    each batch before the C decoder reads it; off, every batch takes the reference decoder."""
    _Policy.compiled = enabled


def decode(
    batch: memoryview | bytearray, count: int, base_offset: int
) -> Sequence[RecordLike] | None:
    """Records of a whole uncompressed batch (its header already read: ``count`` records
    declared from ``base_offset``), or None to use the reference decoder."""
    if _CBatch is None or not _Policy.compiled:
        return None
    from gateway.kafka.loop import plain  # noqa: PLC0415 - numba loads only when used

    data = np.frombuffer(batch, np.uint8)
    if data.shape[0] < _RECORDS_AT:
        return None
    if not plain(data, _RECORDS_AT, data.shape[0], count, base_offset):
        return None
    try:
        return list(_CBatch(batch))
    except Exception:  # any objection: the reference decoder gives the authoritative answer
        return None


def decode_decompressed(
    header: memoryview, records: memoryview, count: int, base_offset: int
) -> Sequence[RecordLike] | None:
    """Records of a compressed batch given its header and its decompressed records blob."""
    if _CBatch is None or not _Policy.compiled:
        return None
    synthetic = bytearray(header)
    synthetic[_ATTRIBUTES_LOW_BYTE] &= _CODEC_CLEAR
    synthetic += records
    return decode(synthetic, count, base_offset)


def warm_up(batch: bytes) -> None:
    """Compile (or load from numba's cache) the checks for both forms :func:`decode` is given,
    the read-only bytes of a stored batch and a writable one built after decompression, on a
    plain uncompressed ``batch`` of one record at offset 0."""
    for form in (memoryview(batch), bytearray(batch)):
        if AVAILABLE and _Policy.compiled and decode(form, 1, 0) is None:
            raise AssertionError("the compiled checks refused a plain batch")
