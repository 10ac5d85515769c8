"""Which ``__remote_log_metadata`` partition holds a user partition's events (spec §6.5).

Mirrors ``org.apache.kafka.server.log.remote.metadata.storage.RemoteLogMetadataTopicPartitioner``
and ``org.apache.kafka.common.utils.Utils.murmur2`` / ``toPositive``::

    h     = Objects.hash(topicId.lsb, topicId.msb, partition)      (int32 arithmetic)
          = 31 * (31 * (31 * 1 + longHash(lsb)) + longHash(msb)) + partition
            longHash(v) = (int) (v ^ (v >>> 32))
    bytes = h as 4 bytes, big-endian                               (the topic name is unused)
    metadata partition = (murmur2(bytes) & 0x7fffffff) % numMetadataPartitions

murmur2: seed 0x9747b28c, m 0x5bd1e995, r 24, the input read as little-endian uint32 words,
then the 1-3 tail bytes, then ``h ^= h >>> 13; h *= m; h ^= h >>> 15`` (the producer's default
partitioner hash). Example: topic id ``AAAAAAAAAAAAAAAAAAAAAQ`` (msb 0, lsb 1), partition 7:
h = 30759, metadata partition 46 of 50. Changing the partition count of the topic breaks the
mapping.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from gateway.kafka.ints import INT32_MAX, INT32_MIN, check_int

__all__ = [
    "DEFAULT_METADATA_PARTITIONS",
    "metadata_partition",
    "murmur2",
    "topic_partition_hash",
]

DEFAULT_METADATA_PARTITIONS: Final = 50  # remote.log.metadata.topic.num.partitions

_MASK32: Final = 0xFFFFFFFF
_MASK64: Final = 0xFFFFFFFFFFFFFFFF
_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_R: Final = 24
_WORD_LE: Final = struct.Struct("<I")
_HASH_BE: Final = struct.Struct(">I")


def _to_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka ``Utils.murmur2``: the 32-bit murmur2 hash of ``data`` as a signed int32."""
    buf = memoryview(data).cast("B")
    length = len(buf)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for (word,) in _WORD_LE.iter_unpack(buf[:whole]):
        k = (word * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail == 3:
        h ^= buf[whole + 2] << 16
    if tail >= 2:
        h ^= buf[whole + 1] << 8
    if tail >= 1:
        h ^= buf[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def _long_hash(value: int) -> int:
    """``Long.hashCode``: ``(int) (v ^ (v >>> 32))`` of the 64-bit two's complement value."""
    value &= _MASK64
    return _to_int32(value ^ (value >> 32))


def topic_partition_hash(topic_id: uuid.UUID, partition: int) -> int:
    """``Objects.hash(topicId.getLeastSignificantBits(), topicId.getMostSignificantBits(),
    partition)`` as a signed int32."""
    check_int("partition", partition, INT32_MIN, INT32_MAX)
    result = 1
    for element in (_long_hash(topic_id.int), _long_hash(topic_id.int >> 64), partition):
        result = _to_int32(31 * result + element)
    return result


def metadata_partition(
    topic_id: uuid.UUID, partition: int, num_partitions: int = DEFAULT_METADATA_PARTITIONS
) -> int:
    """The ``__remote_log_metadata`` partition that carries ``(topic_id, partition)``."""
    if isinstance(num_partitions, bool) or num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions!r}")
    digest = murmur2(_HASH_BE.pack(topic_partition_hash(topic_id, partition) & _MASK32))
    return (digest & 0x7FFFFFFF) % num_partitions
