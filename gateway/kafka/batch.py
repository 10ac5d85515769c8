"""Record batch v2 framing (mirrors ``org.apache.kafka.common.record.DefaultRecordBatch`` and
``RemoteLogInputStream``).

Header, 61 bytes, big-endian, offsets relative to the batch start::

     0  int64   baseOffset
     8  int32   batchLength            total batch size - 12
    12  int32   partitionLeaderEpoch   -1 = none; not covered by the CRC
    16  int8    magic                  2
    17  uint32  crc                    CRC-32C of bytes [21, end)
    21  int16   attributes             codec 0x07, timestamp type 0x08, transactional 0x10,
                                       control 0x20, delete horizon 0x40
    23  int32   lastOffsetDelta
    27  int64   baseTimestamp          the delete horizon when that bit is set
    35  int64   maxTimestamp
    43  int64   producerId
    51  int16   producerEpoch
    53  int32   baseSequence
    57  int32   recordsCount
    61  ...     records (one compressed blob when codec != none)

Framing follows the broker's remote read path: fewer than 17 bytes left, or a batch whose
``12 + batchLength`` bytes run past the end, ends the stream cleanly (a byte range may end
mid-batch); ``batchLength < 14`` is corruption; magic 0/1 is refused as a legacy format. Frames
are ``memoryview`` slices of the caller's buffer: nothing is copied until records are decoded.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator, Sequence
from typing import Final

import crc32c

from gateway.errors import (
    CorruptRecordError,
    CrcMismatchError,
    LegacyFormatError,
    UnsupportedFormatError,
)
from gateway.kafka import fast
from gateway.kafka.codecs import DEFAULT_MAX_DECOMPRESSED, Codec, codec_from_id, decompress
from gateway.kafka.ints import INT64_MIN
from gateway.kafka.records import RecordLike, decode_records

HEADER: Final = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE: Final = HEADER.size  # 61
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength
PEEK: Final = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
PEEK_SIZE: Final = PEEK.size  # 17: RemoteLogInputStream's HEADER_SIZE_UP_TO_MAGIC
MIN_BATCH_LENGTH_ANY_MAGIC: Final = 14  # LegacyRecord.RECORD_OVERHEAD_V0
MIN_BATCH_LENGTH_V2: Final = HEADER_SIZE - LOG_OVERHEAD  # 49
CRC_START: Final = 21
ATTRIBUTES_LOW_BYTE: Final = 22
MAGIC_V2: Final = 2

CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
DELETE_HORIZON_MASK: Final = 0x40


class RecordBatch:
    """One v2 batch: header fields parsed with one unpack, records decoded on demand."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "records_count",
        "view",
    )

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    view: memoryview
    position: int

    def __init__(self, view: memoryview, position: int = 0) -> None:
        """``view`` holds exactly one batch; ``position`` is where it sits in its segment."""
        if len(view) < HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch at position {position} is {len(view)} bytes, "
                f"shorter than the {HEADER_SIZE}-byte v2 header"
            )
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = HEADER.unpack_from(view, 0)
        self.view = view
        self.position = position

    # --- attributes ----------------------------------------------------------------------

    @property
    def codec(self) -> Codec:
        return codec_from_id(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    # --- offsets and size ------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    # --- integrity -------------------------------------------------------------------------

    def compute_crc(self) -> int:
        return int(crc32c.crc32c(self.view[CRC_START:]))

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        computed = self.compute_crc()
        if computed != self.crc:
            raise CrcMismatchError(
                f"record batch at position {self.position} (base offset {self.base_offset}) "
                f"has CRC {self.crc:#010x} but its bytes give {computed:#010x}"
            )

    # --- records ---------------------------------------------------------------------------

    def payload(self) -> memoryview:
        """The records bytes as stored (compressed when the codec is not none)."""
        return self.view[HEADER_SIZE:]

    def records(
        self,
        *,
        verify_crc: bool = True,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    ) -> Sequence[RecordLike]:
        """Decode every record (control records included) after checking the CRC."""
        if verify_crc:
            self.ensure_valid()
        if self.records_count < 0:
            raise CorruptRecordError(
                f"record batch at position {self.position} has invalid record count "
                f"{self.records_count}"
            )
        codec = self.codec
        if codec is Codec.NONE:
            data = self.view[HEADER_SIZE:]
            decoded = fast.decode(self.view, self.records_count, self.base_offset)
        else:
            data = memoryview(decompress(codec, self.payload(), max_decompressed))
            header = self.view[:HEADER_SIZE]
            decoded = fast.decode_decompressed(header, data, self.records_count, self.base_offset)
        if decoded is not None:
            return decoded
        try:
            return decode_records(
                data,
                self.records_count,
                base_offset=self.base_offset,
                base_timestamp=self.base_timestamp,
                max_timestamp=self.max_timestamp,
                log_append_time=bool(self.attributes & TIMESTAMP_TYPE_MASK),
            )
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"record batch at position {self.position} (base offset {self.base_offset}): {exc}"
            ) from exc

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"position={self.position}, size={self.size_in_bytes}, codec={self.codec.label}, "
            f"records={self.records_count})"
        )


def iter_batches(
    data: bytes | bytearray | memoryview | mmap.mmap,
    start: int = 0,
    *,
    offset_range: tuple[int, int] | None = None,
) -> Iterator[RecordBatch]:
    """Frame the batches of a segment (or a byte range of one) from ``start``.

    Ends cleanly at a truncated tail, as the broker does; raises CorruptRecordError for a
    batch length below the minimum and LegacyFormatError for magic 0/1 batches.

    The CRC does not cover baseOffset, so offsets are checked against what a log guarantees:
    they strictly increase from batch to batch and, when the caller knows the segment's
    ``offset_range`` (first, last) from its metadata, every batch lies inside it.
    """
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    pos = start
    prev_last = INT64_MIN - 1  # below any offset
    while end - pos >= PEEK_SIZE:
        base_offset, batch_length, _epoch, magic = PEEK.unpack_from(view, pos)
        if batch_length < MIN_BATCH_LENGTH_ANY_MAGIC:
            raise CorruptRecordError(
                f"record batch at position {pos} has size {batch_length}, "
                f"below the minimum of {MIN_BATCH_LENGTH_ANY_MAGIC}"
            )
        total = LOG_OVERHEAD + batch_length
        if pos + total > end:
            return  # a truncated last batch ends the stream without error
        if magic < MAGIC_V2:
            raise LegacyFormatError(
                f"record batch at position {pos} (offset {base_offset}) uses magic {magic}: "
                "legacy format (magic 0/1) not supported"
            )
        if magic > MAGIC_V2:
            raise UnsupportedFormatError(
                f"record batch at position {pos} (offset {base_offset}) has unknown magic {magic}"
            )
        if batch_length < MIN_BATCH_LENGTH_V2:
            raise CorruptRecordError(
                f"record batch at position {pos} has size {batch_length}, "
                f"below the v2 minimum of {MIN_BATCH_LENGTH_V2}"
            )
        batch = RecordBatch(view[pos : pos + total], pos)
        if batch.base_offset <= prev_last or batch.last_offset < batch.base_offset:
            raise CorruptRecordError(
                f"record batch at position {pos} has offsets {batch.base_offset}.."
                f"{batch.last_offset}, not after the previous batch's last offset {prev_last}"
            )
        if offset_range is not None and not (
            offset_range[0] <= batch.base_offset and batch.last_offset <= offset_range[1]
        ):
            raise CorruptRecordError(
                f"record batch at position {pos} has offsets {batch.base_offset}.."
                f"{batch.last_offset}, outside the segment's {offset_range[0]}..{offset_range[1]}"
            )
        prev_last = batch.last_offset
        yield batch
        pos += total
