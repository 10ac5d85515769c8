"""The ``.rsm-manifest`` object of the Aiven tiered-storage plugin (spec §2). Mirrors
``io.aiven.kafka.tieredstorage.manifest.{SegmentManifestV1, SegmentIndexesV1, SegmentIndexV1,
SegmentEncryptionMetadataV1}``, ``security.EncryptedDataKey`` and ``manifest.serde.
KafkaTypeSerdeModule``, as written by Jackson's ``writeValueAsString``.

UTF-8 JSON, compact (no whitespace), properties in exactly this order (wrapped here)::

    {"version":"1",
     "chunkIndex":{...chunk_index.py...},
     "segmentIndexes":{"offset":{"position":0,"size":1},"timestamp":{"position":1,"size":1},
                       "producerSnapshot":{"position":2,"size":1},
                       "leaderEpoch":{"position":3,"size":1},
                       "transaction":{"position":4,"size":1}},        (or "transaction":null)
     "compression":false,
     "encryption":{"dataKey":"<keyId>:<Base64>","aad":"<Base64>"},   (omitted when off)
     "remoteLogSegmentMetadata":{"remoteLogSegmentId":{"topicIdPartition":{
             "topicId":"<uuid22>","topicPartition":{"topic":"<name>","partition":<int>}},
             "id":"<uuid22>"},
         "startOffset":<long>,"endOffset":<long>,"maxTimestampMs":<long>,"brokerId":<int>,
         "eventTimestampMs":<long>,"segmentLeaderEpochs":{"<epoch>":<offset>,...}}}

* ``segmentIndexes``: byte ranges of the five index pieces inside the ``.indexes`` object (stored
  form); ``transaction`` is ``null`` when the segment had no transaction index.
* ``encryption.dataKey``: the id of the RSA key pair that wrapped the data key, one ``:``, then
  standard padded Base64 of the RSA-OAEP ciphertext; ``aad``: standard padded Base64. Both are
  kept here as raw bytes for the crypto layer (no unwrapping in this module).
* ``remoteLogSegmentMetadata`` is written for self-description and never read by the plugin;
  unknown members inside it are ignored, and a ``null`` or absent value reads as ``None`` (and
  is written as ``null``, as Jackson would). A Kafka 4.x broker's plugin appends
  ``"txnIdxEmpty":<bool>`` (seen in the real plugin's manifests, tests/fixtures/real_kafka): kept.
  ``segmentLeaderEpochs`` is written in ascending epoch order (Kafka keeps a ``TreeMap``).
* Strings are escaped as Jackson does: ``"``, ``\\``, ``\\b \\t \\n \\f \\r`` and other
  control characters as ``\\u00XX`` (upper-case hex); nothing else, non-ASCII stays raw.

Reading is stricter than Jackson where Jackson would coerce (a number as a string, ``1.0`` as an
int, ``0``/``1`` as a boolean): the plugin never writes those, so they are corruption here. Any
unknown property outside ``remoteLogSegmentMetadata`` is corruption, as in the plugin.
Writing is :mod:`gateway.remote.manifest_writer`.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Final

from gateway.errors import CorruptManifestError, InvalidKeyError
from gateway.kafka.ints import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, check_int
from gateway.kafka.uuids import decode_uuid
from gateway.remote._json import JsonFields, b64decode_standard
from gateway.remote.chunk_index import ChunkIndex, parse_chunk_index
from gateway.remote.keys import ObjectKey, Suffix

__all__ = [
    "MANIFEST_VERSION",
    "EncryptionMetadata",
    "IndexType",
    "ManifestIndexes",
    "ManifestSegmentMetadata",
    "SegmentIndex",
    "SegmentManifest",
    "parse_manifest",
]

MANIFEST_VERSION: Final = "1"

_TOP_PROPERTIES: Final = (
    "version",
    "chunkIndex",
    "segmentIndexes",
    "compression",
    "encryption",
    "remoteLogSegmentMetadata",
)
_EPOCH_KEY_RE: Final = re.compile(r"-?(?:0|[1-9][0-9]{0,9})")


# --- model -----------------------------------------------------------------------------------


class IndexType(StrEnum):
    """The five index pieces of the ``.indexes`` object, in storage order (JSON names)."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producerSnapshot"
    LEADER_EPOCH = "leaderEpoch"
    TRANSACTION = "transaction"


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """Byte range ``[position, position + size)`` of one index piece inside ``.indexes``."""

    position: int
    size: int

    def __post_init__(self) -> None:
        check_int("position", self.position, 0, INT32_MAX)
        check_int("size", self.size, 0, INT32_MAX)

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True, slots=True)
class ManifestIndexes:
    """``segmentIndexes``: where each index piece sits inside the ``.indexes`` object;
    ``transaction`` may be absent. (The decoded indexes are :class:`indexcache.SegmentIndexes`.)
    """

    offset: SegmentIndex
    timestamp: SegmentIndex
    producer_snapshot: SegmentIndex
    leader_epoch: SegmentIndex
    transaction: SegmentIndex | None

    def __getitem__(self, index_type: IndexType) -> SegmentIndex | None:
        return {
            IndexType.OFFSET: self.offset,
            IndexType.TIMESTAMP: self.timestamp,
            IndexType.PRODUCER_SNAPSHOT: self.producer_snapshot,
            IndexType.LEADER_EPOCH: self.leader_epoch,
            IndexType.TRANSACTION: self.transaction,
        }[IndexType(index_type)]

    @classmethod
    def from_sizes(
        cls,
        offset: int,
        timestamp: int,
        producer_snapshot: int,
        leader_epoch: int,
        transaction: int | None,
    ) -> ManifestIndexes:
        """Cumulative positions in storage order (``SegmentIndexesV1Builder``)."""
        pieces: list[SegmentIndex] = []
        position = 0
        for size in (offset, timestamp, producer_snapshot, leader_epoch):
            pieces.append(SegmentIndex(position, size))
            position += size
        txn = None if transaction is None else SegmentIndex(position, transaction)
        return cls(pieces[0], pieces[1], pieces[2], pieces[3], txn)

    @property
    def total_size(self) -> int:
        """Size of the ``.indexes`` object when positions are cumulative (as the plugin writes)."""
        last = self.transaction if self.transaction is not None else self.leader_epoch
        return last.end


@dataclass(frozen=True, slots=True)
class EncryptionMetadata:
    """``encryption``: the wrapped data key with its key-pair id, and the AAD (raw bytes)."""

    key_id: str
    wrapped_data_key: bytes
    aad: bytes

    IV_SIZE: ClassVar[int] = 12
    """AES-GCM IV bytes in front of every encrypted unit (constant for manifest version 1)."""

    def __post_init__(self) -> None:
        if not isinstance(self.key_id, str) or not self.key_id.strip() or ":" in self.key_id:
            raise ValueError(f"key id {self.key_id!r} must be non-blank and hold no ':'")
        if not isinstance(self.wrapped_data_key, bytes) or not self.wrapped_data_key:
            raise ValueError("wrapped data key must be non-empty bytes")
        if not isinstance(self.aad, bytes):
            raise ValueError("aad must be bytes")

    @property
    def data_key_text(self) -> str:
        """The ``dataKey`` JSON value: ``<keyId>:<padded standard Base64>``."""
        return f"{self.key_id}:{base64.b64encode(self.wrapped_data_key).decode('ascii')}"


@dataclass(frozen=True, slots=True)
class ManifestSegmentMetadata:
    """``remoteLogSegmentMetadata``: the manifest's informational copy of Kafka's segment
    metadata (the RLMM's own record is :class:`gateway.metadata.model.RemoteLogSegmentMetadata`).

    ``segment_leader_epochs``: (epoch, start offset) pairs, kept sorted by epoch.
    """

    topic_id: uuid.UUID
    topic: str
    partition: int
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...] = ()
    txn_idx_empty: bool | None = None
    """``txnIdxEmpty``, which Kafka 4.x brokers add (KAFKA-16780); ``None`` when absent."""

    def __post_init__(self) -> None:
        if self.txn_idx_empty is not None and not isinstance(self.txn_idx_empty, bool):
            raise ValueError("txn_idx_empty must be a bool or None")
        if not isinstance(self.topic_id, uuid.UUID) or not isinstance(self.segment_id, uuid.UUID):
            raise ValueError("topic_id and segment_id must be uuid.UUID values")
        if not isinstance(self.topic, str):
            raise ValueError("topic must be a string")
        check_int("partition", self.partition, 0, INT32_MAX)
        check_int("broker id", self.broker_id, INT32_MIN, INT32_MAX)
        for name in ("start_offset", "end_offset", "max_timestamp_ms", "event_timestamp_ms"):
            check_int(name, getattr(self, name), INT64_MIN, INT64_MAX)
        pairs = tuple(self.segment_leader_epochs)
        for epoch, offset in pairs:
            check_int("leader epoch", epoch, INT32_MIN, INT32_MAX)
            check_int("leader epoch start offset", offset, INT64_MIN, INT64_MAX)
        epochs = tuple(sorted(pairs))
        if len({e for e, _ in epochs}) != len(epochs):
            raise ValueError("segment_leader_epochs repeats an epoch")
        object.__setattr__(self, "segment_leader_epochs", epochs)

    def object_key(self, prefix: str, suffix: Suffix | str = Suffix.MANIFEST) -> ObjectKey:
        """The key of this segment's ``suffix`` object under ``prefix`` (``ObjectKeyFactory``)."""
        return ObjectKey(
            prefix,
            self.topic,
            self.topic_id,
            self.partition,
            self.start_offset,
            self.segment_id,
            Suffix(suffix),
        )


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """A parsed ``.rsm-manifest`` (version 1)."""

    chunk_index: ChunkIndex
    segment_indexes: ManifestIndexes
    compression: bool
    encryption: EncryptionMetadata | None = None
    remote_log_segment_metadata: ManifestSegmentMetadata | None = None


# --- reading ---------------------------------------------------------------------------------


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _segment_index(parent: JsonFields, name: str) -> SegmentIndex:
    fields = parent.child(name)
    fields.only("position", "size")
    return SegmentIndex(fields.int32("position"), fields.int32("size"))


def _segment_indexes(top: JsonFields) -> ManifestIndexes:
    fields = top.child("segmentIndexes")
    fields.only(*IndexType)
    fields.raw(IndexType.TRANSACTION)  # required, even when null
    transaction = fields.optional_child(IndexType.TRANSACTION)
    return ManifestIndexes(
        _segment_index(fields, IndexType.OFFSET),
        _segment_index(fields, IndexType.TIMESTAMP),
        _segment_index(fields, IndexType.PRODUCER_SNAPSHOT),
        _segment_index(fields, IndexType.LEADER_EPOCH),
        None if transaction is None else _segment_index(fields, IndexType.TRANSACTION),
    )


def _base64(fields: JsonFields, name: str, text: str) -> bytes:
    try:
        return b64decode_standard(text)
    except ValueError as exc:
        raise fields.error(str(exc), name) from exc


def _encryption(top: JsonFields) -> EncryptionMetadata | None:
    fields = top.optional_child("encryption")
    if fields is None:
        return None
    fields.only("dataKey", "aad")
    data_key = fields.string("dataKey")
    key_id, colon, wrapped_text = data_key.partition(":")
    if not colon or ":" in wrapped_text:
        raise fields.error("must be <keyId>:<Base64> with exactly one ':'", "dataKey")
    if not key_id.strip():
        raise fields.error("key id is blank", "dataKey")
    wrapped = _base64(fields, "dataKey", wrapped_text)
    if not wrapped:
        raise fields.error("wrapped data key is empty", "dataKey")
    aad = _base64(fields, "aad", fields.string("aad"))
    return EncryptionMetadata(key_id, wrapped, aad)


def _uuid(fields: JsonFields, name: str) -> uuid.UUID:
    text = fields.string(name)
    try:
        return decode_uuid(text)
    except InvalidKeyError as exc:
        raise fields.error(str(exc), name) from exc


def _remote_log_segment_metadata(top: JsonFields) -> ManifestSegmentMetadata | None:
    fields = top.optional_child("remoteLogSegmentMetadata")
    if fields is None:
        return None
    segment_id = fields.child("remoteLogSegmentId")
    topic_id_partition = segment_id.child("topicIdPartition")
    topic_partition = topic_id_partition.child("topicPartition")
    epochs_fields = fields.child("segmentLeaderEpochs")
    epochs: list[tuple[int, int]] = []
    for name in epochs_fields.names():
        if _EPOCH_KEY_RE.fullmatch(name) is None or not INT32_MIN <= int(name) <= INT32_MAX:
            raise epochs_fields.error("leader epoch key is not an int32 in decimal", name)
        epochs.append((int(name), epochs_fields.int64(name)))
    return ManifestSegmentMetadata(
        topic_id=_uuid(topic_id_partition, "topicId"),
        topic=topic_partition.string("topic"),
        partition=topic_partition.int32("partition"),
        segment_id=_uuid(segment_id, "id"),
        start_offset=fields.int64("startOffset"),
        end_offset=fields.int64("endOffset"),
        max_timestamp_ms=fields.int64("maxTimestampMs"),
        broker_id=fields.int32("brokerId", INT32_MIN),
        event_timestamp_ms=fields.int64("eventTimestampMs"),
        segment_leader_epochs=tuple(epochs),
        txn_idx_empty=fields.boolean("txnIdxEmpty") if "txnIdxEmpty" in fields.names() else None,
    )


def parse_manifest(data: bytes | bytearray | memoryview, key: str = "") -> SegmentManifest:
    """Parse a ``.rsm-manifest``; ``key`` (the object key) only names it in error messages.

    Raises :class:`CorruptManifestError`, naming the offending property path, for anything the
    plugin would refuse and anything it would not write.
    """
    context = f"manifest {key!r}: " if key else "manifest: "
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptManifestError(f"{context}not UTF-8: {exc}") from exc
    try:
        document: object = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise CorruptManifestError(f"{context}not JSON: {exc}") from exc

    top = JsonFields(document, "", context)
    top.only(*_TOP_PROPERTIES)
    version = top.string("version")
    if version != MANIFEST_VERSION:
        raise top.error(f"unknown manifest version {version!r} (only '1' exists)", "version")
    try:
        chunk_index = parse_chunk_index(top.raw("chunkIndex"), "chunkIndex", context)
        segment_indexes = _segment_indexes(top)
        compression = top.boolean("compression")
        encryption = _encryption(top)
        metadata = _remote_log_segment_metadata(top)
    except ValueError as exc:  # pragma: no cover - a model check the field checks missed
        raise CorruptManifestError(f"{context}{exc}") from exc
    return SegmentManifest(chunk_index, segment_indexes, compression, encryption, metadata)
