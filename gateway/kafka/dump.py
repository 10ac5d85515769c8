"""``tiered-gateway dump``: a partition folder's files as NDJSON, like ``kafka-dump-log``.

A segment ``.log`` gives one line per record (``--print-data-log``) or per batch; an offset,
time or transaction index, a producer snapshot and a ``leader-epoch-checkpoint`` one line per
entry. Pure functions from bytes to JSON-ready dicts; the command only opens files and prints.
"""

from __future__ import annotations

import base64
import mmap
import re
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.errors import CorruptDataError, CorruptIndexError, CorruptRecordError
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.consumer_offsets import decode_record
from gateway.kafka.control import control_type
from gateway.kafka.epoch import parse_leader_epoch_checkpoint
from gateway.kafka.offset_index import OffsetIndex
from gateway.kafka.producer_snapshot import parse_producer_snapshot
from gateway.kafka.time_index import TimeIndex
from gateway.kafka.txn_index import TransactionIndex

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def batch_line(batch: RecordBatch, crc_valid: bool) -> dict[str, Any]:
    return {
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "position": batch.position,
        "size": batch.size_in_bytes,
        "leader_epoch": batch.partition_leader_epoch,
        "magic": batch.magic,
        "crc": batch.crc,
        "crc_valid": crc_valid,
        "codec": batch.codec.label,
        "timestamp_type": TIMESTAMP_TYPES[batch.timestamp_type],
        "base_timestamp": batch.base_timestamp,
        "max_timestamp": batch.max_timestamp,
        "delete_horizon_ms": batch.delete_horizon_ms,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "transactional": batch.is_transactional,
        "control": batch.is_control,
        "record_count": batch.records_count,
    }


def record_lines(batch: RecordBatch, *, offsets_decoder: bool = False) -> Iterator[dict[str, Any]]:
    """One dict per record; the caller has decided about the CRC already. ``offsets_decoder``
    adds ``"offsets"``: the record decoded as a ``__consumer_offsets`` record (data records
    only; control records have their own ``control_type``)."""
    ts_type = TIMESTAMP_TYPES[batch.timestamp_type]
    for rec in batch.records(verify_crc=False):
        line: dict[str, Any] = {
            "offset": rec.offset,
            "timestamp": rec.timestamp,
            "timestamp_type": ts_type,
            "key": b64(rec.key),
            "value": b64(rec.value),
            "headers": [{"key": k, "value": b64(v)} for k, v in rec.headers],
            "base_offset": batch.base_offset,
            "leader_epoch": batch.partition_leader_epoch,
            "codec": batch.codec.label,
            "producer_id": batch.producer_id,
            "transactional": batch.is_transactional,
            "control": batch.is_control,
        }
        if batch.is_control:
            line["control_type"] = control_type(rec.key).name
        elif offsets_decoder:
            line["offsets"] = decode_record(rec.key, rec.value)
        yield line


@dataclass(slots=True)
class DumpReport:
    """What a dump saw besides its lines: batches whose CRC failed (when not fatal), and
    Kafka's sanity checks that an index failed (its entries are printed all the same)."""

    bad_crc: list[RecordBatch] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)


def dump(
    data: bytes | mmap.mmap,
    *,
    batches: bool,
    verify_crc: bool,
    report: DumpReport,
    offsets_decoder: bool = False,
) -> Generator[dict[str, Any], None, None]:
    """Lines of a whole segment file. Unlike a ranged read, a segment file must end on a batch
    boundary: leftover bytes mean a truncated file or something that is not a segment."""
    end = 0
    for batch in iter_batches(data):
        if verify_crc:
            batch.ensure_valid()
            valid = True
        else:
            valid = batch.is_valid()
            if not valid:
                report.bad_crc.append(batch)
        if batches:
            yield batch_line(batch, valid)
        else:
            yield from record_lines(batch, offsets_decoder=offsets_decoder)
        end = batch.position + batch.size_in_bytes
    if end != len(data):
        raise CorruptRecordError(
            f"{len(data) - end} bytes at position {end} are not a whole record batch "
            "(truncated file, or not a Kafka log segment)"
        )


# --- the other files of a partition folder -----------------------------------------------------

LOG_SUFFIX: Final = ".log"
CHECKPOINT_NAME: Final = "leader-epoch-checkpoint"
_BASE_OFFSET_NAME: Final = re.compile(r"(\d{20})\.(index|timeindex|txnindex|snapshot)")
KINDS: Final = (".log", ".index", ".timeindex", ".txnindex", ".snapshot", CHECKPOINT_NAME)


def file_kind(name: str) -> str | None:
    """What a file of a partition folder holds, from its name: ``log``, ``index``,
    ``timeindex``, ``txnindex``, ``snapshot`` or ``checkpoint``; ``None`` for anything else.
    Index and snapshot names must be Kafka's: 20-digit offset (the base offset) and suffix."""
    if name == CHECKPOINT_NAME:
        return "checkpoint"
    if name.endswith(LOG_SUFFIX):
        return "log"
    match = _BASE_OFFSET_NAME.fullmatch(name)
    return None if match is None else match.group(2)


def base_offset_of(name: str) -> int:
    """The base offset a Kafka file name starts with (``00000000000000000042.index``: 42)."""
    match = _BASE_OFFSET_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a <20-digit offset>.<suffix> file name")
    return int(match.group(1))


def index_lines(
    kind: str,
    data: bytes,
    base_offset: int,
    report: DumpReport,
    log: bytes | mmap.mmap | None = None,
) -> Iterator[dict[str, Any]]:
    """One line per entry of an offset, time or transaction index. Entries are printed as
    Kafka counts them (whole entries); a failed sanity check is recorded in ``report``, and so
    is every offset-index entry that disagrees with ``log``, the segment, when given."""
    index: OffsetIndex | TimeIndex | TransactionIndex
    if kind == "index":
        index = OffsetIndex(data, base_offset, check=False)
        entries = list(index.entries())
        for offset, position in entries:
            yield {"offset": offset, "position": position}
        if log is not None:
            report.failed_checks += check_offset_index(entries, log)
    elif kind == "timeindex":
        index = TimeIndex(data, base_offset, check=False)
        for timestamp, offset in index.entries():
            yield {"timestamp": timestamp, "offset": offset}
    else:
        index = TransactionIndex(data, base_offset, check=False)
        for txn in index:
            yield {
                "producer_id": txn.producer_id,
                "first_offset": txn.first_offset,
                "last_offset": txn.last_offset,
                "last_stable_offset": txn.last_stable_offset,
            }
    try:
        index.sanity_check()
    except CorruptIndexError as exc:
        report.failed_checks.append(str(exc))


def snapshot_lines(data: bytes) -> Iterator[dict[str, Any]]:
    """One line per producer of a producer-state snapshot (its CRC is checked first)."""
    for entry in parse_producer_snapshot(data):
        yield entry._asdict()


def checkpoint_lines(data: bytes) -> Iterator[dict[str, Any]]:
    """One line per entry of a ``leader-epoch-checkpoint``."""
    for entry in parse_leader_epoch_checkpoint(data):
        yield {"epoch": entry.epoch, "start_offset": entry.start_offset}


def check_offset_index(entries: Sequence[tuple[int, int]], log: bytes | mmap.mmap) -> list[str]:
    """Offset-index entries against their segment, as ``kafka-dump-log`` checks them: each
    entry's position must start a batch whose last offset is the entry's offset (Kafka indexes
    a batch by its last offset and its first byte). One message per entry that does not."""
    try:
        last_offset_at = {b.position: b.last_offset for b in iter_batches(log)}
    except CorruptDataError as exc:
        return [f"not checked against its segment, which does not frame: {exc}"]
    problems = []
    for n, (offset, position) in enumerate(entries):
        found = last_offset_at.get(position)
        if found is None:
            problems.append(f"entry {n} (offset {offset}): no batch starts at position {position}")
        elif found != offset:
            problems.append(
                f"entry {n}: offset {offset}, but the batch at position {position} ends at "
                f"offset {found}"
            )
    return problems
