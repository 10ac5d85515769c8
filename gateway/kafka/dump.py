"""``tiered-gateway dump``: a segment as NDJSON, like ``kafka-dump-log --print-data-log``.

Pure functions from bytes to JSON-ready dicts; the CLI only opens files and prints.
"""

from __future__ import annotations

import base64
import mmap
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import CorruptRecordError
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.control import control_type

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


def record_lines(batch: RecordBatch) -> Iterator[dict[str, Any]]:
    """One dict per record; the caller has decided about the CRC already."""
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
        yield line


@dataclass(slots=True)
class DumpReport:
    """What a dump saw besides its lines: batches whose CRC failed (when not fatal)."""

    bad_crc: list[RecordBatch] = field(default_factory=list)


def dump(
    data: bytes | mmap.mmap, *, batches: bool, verify_crc: bool, report: DumpReport
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
            yield from record_lines(batch)
        end = batch.position + batch.size_in_bytes
    if end != len(data):
        raise CorruptRecordError(
            f"{len(data) - end} bytes at position {end} are not a whole record batch "
            "(truncated file, or not a Kafka log segment)"
        )
