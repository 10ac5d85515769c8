"""The Fetch response on the wire (versions 4-18), encoded around views of the stored batches.

Kafka's ``FetchResponse.json`` (kafka-python's ``FetchResponse`` decodes the same bytes; the
unit tests compare the two, v4-v18). Arrays are ``int32 count`` to v11 and ``uvarint
count + 1`` from v12 (flexible), strings and bytes likewise (``int16`` / ``int32`` length to
v11); ``[tags]`` is an empty tagged-field section, ``0x00``, from v12::

    response header: correlation_id int32 [tags]
    throttle_time_ms int32                 (always 0)
    error_code int16, session_id int32     v7+ (session 0: none kept)
    topics: array of
        topic                              string to v12, uuid (16 bytes) from v13 (KIP-516)
        partitions: array of
            partition_index int32, error_code int16, high_watermark int64,
            last_stable_offset int64
            log_start_offset int64         v5+
            aborted_transactions           nullable array of
                                           (producer_id int64, first_offset int64 [tags])
            preferred_read_replica int32   v11+ (always -1)
            records                        bytes (never null here): the batches as stored
            [tags]
        [tags]
    [tags]

:func:`encode_response` returns the frame as a list of buffers, the encoded fields around the
batch views (no copy of a batch: kafka-python's encoder copies the records into its buffer,
measured in docs/kafka-listener.md); :func:`cut_to` trims a partition's batches to whole
batches within a byte budget.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from gateway.kafka.varint import encode_uvarint
from gateway.listener import codes
from gateway.listener.framing import Buffer, nbytes, response_header, size_prefix
from gateway.service.types import AbortedTransaction

FLEXIBLE_FROM: Final = 12
TOPIC_IDS_FROM: Final = 13
"""From this version topics are named by id (KIP-516) in the request and the answer."""
_BATCH_LENGTH: Final = struct.Struct(">i")  # at byte 8 of a batch: the bytes after byte 12
_BATCH_OVERHEAD: Final = 12  # base offset, length

TopicKey = str | uuid.UUID
"""How a Fetch names a topic: by name to v12, by id from v13 (:data:`TOPIC_IDS_FROM`)."""


@dataclass(slots=True)
class PartitionAnswer:
    """One partition of a Fetch response; ``records`` are views of stored batches."""

    partition: int
    error: int = codes.NONE
    high_watermark: int = -1
    log_start_offset: int = -1
    aborted: Sequence[AbortedTransaction] | None = None
    records: list[Buffer] = field(default_factory=list)
    last_stable_offset: int | None = None  # None: the high watermark

    @property
    def size(self) -> int:
        return sum(nbytes(b) for b in self.records)


def cut_to(records: list[Buffer], budget: int) -> list[Buffer]:
    """The whole batches of ``records`` (each a run of whole batches) within ``budget``."""
    out: list[Buffer] = []
    left = budget
    for run in records:
        size = nbytes(run)
        if size <= left:
            out.append(run)
            left -= size
            continue
        view = memoryview(run)
        pos = 0
        while pos + _BATCH_OVERHEAD <= size:
            (length,) = _BATCH_LENGTH.unpack_from(view, pos + 8)
            end = pos + _BATCH_OVERHEAD + length
            if end > left:
                break
            pos = end
        if pos:
            out.append(view[:pos])
        break
    return out


def encode_response(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[TopicKey, Sequence[PartitionAnswer]]],
    error: int = codes.NONE,
) -> list[Buffer]:
    """A whole Fetch response frame (versions 4-18) as buffers: the fields, encoded here,
    around the record views, which are not copied. Topics are keyed by name to v12, by id from
    v13; the tagged fields (v12+: a partition's diverging epoch, current leader, snapshot id;
    v16+: the response's node endpoints) are never written."""
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM
    parts: list[Buffer] = []
    out = bytearray()

    def array(n: int) -> None:
        out.extend(encode_uvarint(n + 1) if flexible else struct.pack(">i", n))

    out += struct.pack(">i", 0)  # throttle_time_ms
    if version >= 7:
        out += struct.pack(">hi", error, 0)  # error_code, session_id: no session kept
    array(len(topics))
    for topic, partitions in topics:
        if by_id != isinstance(topic, uuid.UUID):
            raise ValueError(f"Fetch v{version} names a topic by {'id' if by_id else 'name'}, "
                             f"not {topic!r}")  # fmt: skip
        if isinstance(topic, uuid.UUID):
            out += topic.bytes
        else:
            raw = topic.encode()
            out += encode_uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))
            out += raw
        array(len(partitions))
        for p in partitions:
            out += struct.pack(">ihq", p.partition, p.error, p.high_watermark)
            lso = p.high_watermark if p.last_stable_offset is None else p.last_stable_offset
            out += struct.pack(">q", lso)
            if version >= 5:
                out += struct.pack(">q", p.log_start_offset)
            if p.aborted is None:
                out += b"\x00" if flexible else struct.pack(">i", -1)
            else:
                array(len(p.aborted))
                for t in p.aborted:
                    out += struct.pack(">qq", t.producer_id, t.first_offset)
                    if flexible:
                        out += b"\x00"
            if version >= 11:
                out += struct.pack(">i", -1)  # preferred_read_replica: none
            size = p.size
            out += encode_uvarint(size + 1) if flexible else struct.pack(">i", size)
            if p.records:
                parts.append(bytes(out))
                parts.extend(p.records)
                out = bytearray()
            if flexible:
                out += b"\x00"  # the partition's tagged fields
        if flexible:
            out += b"\x00"  # the topic's
    if flexible:
        out += b"\x00"  # the response's
    parts.append(bytes(out))
    header = response_header(correlation_id, flexible)
    total = len(header) + sum(nbytes(b) for b in parts)
    return [size_prefix(total) + header, *parts]
