"""Metadata-partition mapping: the spec's table (remote-read-semantics.md §6.5), Kafka's
``UtilsTest`` murmur2 vectors, and kafka-python's murmur2 as an independent implementation."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from gateway.kafka.uuids import decode_uuid
from gateway.metadata.partitioner import metadata_partition, murmur2, topic_partition_hash

SPEC_TABLE = [
    ("AAAAAAAAAAAAAAAAAAAAAQ", 0, 30752, 35),
    ("AAAAAAAAAAAAAAAAAAAAAQ", 1, 30753, 6),
    ("AAAAAAAAAAAAAAAAAAAAAQ", 7, 30759, 46),
    ("TkHb8TDfRZ6r0Jm1b9QqvQ", 0, 718910680, 12),
    ("TkHb8TDfRZ6r0Jm1b9QqvQ", 1, 718910681, 41),
    ("TkHb8TDfRZ6r0Jm1b9QqvQ", 7, 718910687, 2),
    ("oAtiIQ95REujbuzNd_lkLQ", 0, 1269558293, 10),
    ("oAtiIQ95REujbuzNd_lkLQ", 1, 1269558294, 13),
    ("oAtiIQ95REujbuzNd_lkLQ", 7, 1269558300, 4),
]

UTILS_TEST_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
]


@pytest.mark.parametrize(("topic_id", "partition", "objects_hash", "expected"), SPEC_TABLE)
def test_spec_table(topic_id: str, partition: int, objects_hash: int, expected: int) -> None:
    tid = decode_uuid(topic_id)
    assert topic_partition_hash(tid, partition) == objects_hash
    assert metadata_partition(tid, partition) == expected
    assert metadata_partition(tid, partition, 50) == expected


@pytest.mark.parametrize(("text", "expected"), UTILS_TEST_VECTORS)
def test_kafka_utils_murmur2_vectors(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected
    assert murmur2(memoryview(text.encode())) == expected


def _java_objects_hash(lsb: int, msb: int, partition: int) -> int:
    """``Objects.hash(Long, Long, Integer)`` written out with signed Java arithmetic."""

    def wrap(v: int) -> int:
        return (v + 2**31) % 2**32 - 2**31

    def signed64(v: int) -> int:
        return (v + 2**63) % 2**64 - 2**63

    def long_hash(v: int) -> int:
        return wrap(signed64(v) ^ ((signed64(v) % 2**64) >> 32))

    result = 1
    for element in (long_hash(lsb), long_hash(msb), partition):
        result = wrap(31 * result + element)
    return result


@given(st.integers(0, 2**128 - 1), st.integers(0, 2**31 - 1))
def test_objects_hash_matches_a_written_out_java_version(value: int, partition: int) -> None:
    tid = uuid.UUID(int=value)
    expected = _java_objects_hash(value & (2**64 - 1), value >> 64, partition)
    assert topic_partition_hash(tid, partition) == expected


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert -(2**31) <= murmur2(data) < 2**31


@given(st.integers(0, 2**128 - 1), st.integers(0, 2**31 - 1), st.integers(1, 1000))
def test_partition_is_in_range(value: int, partition: int, count: int) -> None:
    tid = uuid.UUID(int=value)
    digest = murmur2((topic_partition_hash(tid, partition) & 0xFFFFFFFF).to_bytes(4, "big"))
    assert metadata_partition(tid, partition, count) == (digest & 0x7FFFFFFF) % count


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        metadata_partition(uuid.UUID(int=1), 0, 0)
    with pytest.raises(
        ValueError, match=r"partition 2147483648 is outside \[-2147483648, 2147483647\]"
    ):
        metadata_partition(uuid.UUID(int=1), 2**31)
