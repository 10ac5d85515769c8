"""Writing a ``.rsm-manifest`` byte for byte as the plugin does (Jackson's
``writeValueAsString`` of ``SegmentManifestV1``); the layout and the reader are in
:mod:`gateway.remote.manifest`.

Strings are escaped as Jackson does: ``"``, ``\\``, ``\\b \\t \\n \\f \\r`` and other
control characters as ``\\u00XX`` (upper-case hex); nothing else, non-ASCII stays raw.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Final

from gateway.kafka.uuids import encode_uuid
from gateway.remote.manifest import (
    MANIFEST_VERSION,
    EncryptionMetadata,
    IndexType,
    ManifestIndexes,
    ManifestSegmentMetadata,
    SegmentIndex,
    SegmentManifest,
)

__all__ = ["serialize_manifest"]

_JSON_ESCAPE_RE: Final = re.compile(r'[\x00-\x1f"\\]')
_JSON_SHORT_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    return _JSON_SHORT_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def _json_string(value: str) -> str:
    """A JSON string literal escaped as Jackson escapes it."""
    return '"' + _JSON_ESCAPE_RE.sub(_json_escape, value) + '"'


def _segment_index_json(index: SegmentIndex | None) -> str:
    if index is None:
        return "null"
    return f'{{"position":{index.position},"size":{index.size}}}'


def _segment_indexes_json(indexes: ManifestIndexes) -> str:
    return "{" + ",".join(f'"{t.value}":{_segment_index_json(indexes[t])}' for t in IndexType) + "}"


def _encryption_json(encryption: EncryptionMetadata) -> str:
    aad = base64.b64encode(encryption.aad).decode("ascii")
    return f'{{"dataKey":{_json_string(encryption.data_key_text)},"aad":"{aad}"}}'


def _epochs_json(epochs: Iterable[tuple[int, int]]) -> str:
    return "{" + ",".join(f'"{epoch}":{offset}' for epoch, offset in epochs) + "}"


def _metadata_json(m: ManifestSegmentMetadata | None) -> str:
    if m is None:
        return "null"
    return (
        '{"remoteLogSegmentId":{"topicIdPartition":{'
        f'"topicId":"{encode_uuid(m.topic_id)}",'
        f'"topicPartition":{{"topic":{_json_string(m.topic)},"partition":{m.partition}}}}},'
        f'"id":"{encode_uuid(m.segment_id)}"}},'
        f'"startOffset":{m.start_offset},"endOffset":{m.end_offset},'
        f'"maxTimestampMs":{m.max_timestamp_ms},"brokerId":{m.broker_id},'
        f'"eventTimestampMs":{m.event_timestamp_ms},'
        f'"segmentLeaderEpochs":{_epochs_json(m.segment_leader_epochs)}'
        + ("" if m.txn_idx_empty is None else f',"txnIdxEmpty":{str(m.txn_idx_empty).lower()}')
        + "}"
    )


def serialize_manifest(manifest: SegmentManifest) -> bytes:
    """The manifest bytes, byte-identical to what the plugin writes for the same values."""
    parts = [
        f'{{"version":"{MANIFEST_VERSION}"',
        f',"chunkIndex":{manifest.chunk_index.to_json()}',
        f',"segmentIndexes":{_segment_indexes_json(manifest.segment_indexes)}',
        f',"compression":{"true" if manifest.compression else "false"}',
    ]
    if manifest.encryption is not None:
        parts.append(f',"encryption":{_encryption_json(manifest.encryption)}')
    parts.append(
        f',"remoteLogSegmentMetadata":{_metadata_json(manifest.remote_log_segment_metadata)}'
    )
    parts.append("}")
    return "".join(parts).encode("utf-8")
