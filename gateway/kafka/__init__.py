"""Kafka's bytes: record batch v2 (framing, records, codecs, control records, segment writer),
the index and checkpoint files, and the small primitives every layer shares: integer bounds and
range checks (``ints``), varints (``varint``), the ``Uuid`` text form (``uuids``), topic-name
rules (``topic``)."""

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
