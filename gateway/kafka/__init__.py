"""Kafka record batch v2 codec: framing, records, codecs, control records, segment writer."""

from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType, EndTransactionMarker, control_type
from gateway.kafka.records import Record, RecordLike

__all__ = [
    "Codec",
    "ControlRecordType",
    "EndTransactionMarker",
    "Record",
    "RecordBatch",
    "RecordLike",
    "control_type",
    "iter_batches",
]
