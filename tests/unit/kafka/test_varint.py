"""Varints: the spec's vectors (kafka-formats.md §3.1), round trips, malformed input; the
unsigned varint of the tagged fields with its limits and the caller's error type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import CorruptRecordError
from gateway.kafka.varint import (
    encode_uvarint,
    encode_varint,
    encode_varlong,
    read_uvarint,
    read_varint,
    read_varlong,
)

SPEC_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7E"),
    (-64, "7F"),
    (64, "80 01"),
    (100, "C8 01"),
    (-100, "C7 01"),
    (300, "D8 04"),
    (2147483647, "FE FF FF FF 0F"),
    (-2147483648, "FF FF FF FF 0F"),
]


@pytest.mark.parametrize(("value", "hexbytes"), SPEC_VECTORS)
def test_spec_vectors(value: int, hexbytes: str) -> None:
    raw = bytes.fromhex(hexbytes)
    assert encode_varint(value) == raw
    assert read_varint(raw, 0) == (value, len(raw))
    assert read_varlong(raw, 0) == (value, len(raw))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    raw = b"\xaa" + encode_varint(value) + b"\xbb"
    assert read_varint(raw, 1) == (value, len(raw) - 1)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    raw = encode_varlong(value)
    assert len(raw) <= 10
    assert read_varlong(raw, 0) == (value, len(raw))


def test_too_long_and_truncated_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptRecordError, match="past the end"):
        read_varint(b"\x80\x80", 0)


def test_bits_past_the_type_are_dropped_as_java_drops_them() -> None:
    """``ByteUtils.readVarint`` shifts a 5th byte left by 28 in an int, ``readVarlong`` a 10th
    by 63 in a long: the bits past 32 and 64 are lost, not refused (Kafka 4.1's reader agrees on
    thousands of such batches in tests/realkafka/decoders.py)."""
    assert read_varint(b"\xfe\xff\xff\xff\x1f", 0) == (2**31 - 1, 5)
    assert read_varint(b"\xfe\xff\xff\xff\x7f", 0) == (2**31 - 1, 5)
    assert read_varint(b"\x81\x80\x80\x80\x70", 0) == (-1, 5)
    assert read_varlong(b"\x80" * 9 + b"\x02", 0) == (0, 10)
    assert read_varlong(b"\x80" * 9 + b"\x03", 0) == (2**62, 10)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)


@given(st.binary(max_size=12))
def test_any_bytes_give_a_value_or_a_typed_error(raw: bytes) -> None:
    for reader in (read_varint, read_varlong):
        try:
            value, pos = reader(raw, 0)
        except CorruptRecordError:
            continue
        assert 0 < pos <= len(raw)
        encode = encode_varint if reader is read_varint else encode_varlong
        assert reader(encode(value), 0)[0] == value


# --- unsigned varints (ByteUtils.readUnsignedVarint / writeUnsignedVarint) --------------------

UVARINT_VECTORS = [
    (0, "00"),
    (1, "01"),
    (127, "7F"),
    (128, "80 01"),
    (300, "AC 02"),
    (16384, "80 80 01"),
    (2147483647, "FF FF FF FF 07"),
    (2**35 - 1, "FF FF FF FF 7F"),  # 5 bytes hold 35 bits; callers cap with max_value
]


class _CallerError(Exception):
    """A caller's own error type, to check the reader raises what it is given."""


@pytest.mark.parametrize(("value", "hexbytes"), UVARINT_VECTORS)
def test_uvarint_vectors(value: int, hexbytes: str) -> None:
    raw = bytes.fromhex(hexbytes)
    assert encode_uvarint(value) == raw
    assert read_uvarint(raw, 0) == (value, len(raw))
    assert read_uvarint(memoryview(b"\x00" + raw), 1) == (value, len(raw) + 1)


def test_uvarint_overlong_encodings_read_as_java_reads_them() -> None:
    assert read_uvarint(bytes.fromhex("80 00"), 0) == (0, 2)
    assert read_uvarint(bytes.fromhex("81 80 80 80 00"), 0) == (1, 5)


def test_uvarint_errors_name_what_was_read_and_use_the_callers_type() -> None:
    with pytest.raises(_CallerError, match="tag count at byte 1 runs past the end"):
        read_uvarint(b"\x00\x80", 1, "tag count", error=_CallerError)
    with pytest.raises(_CallerError, match="length at byte 0 is longer than 5 bytes"):
        read_uvarint(bytes.fromhex("80 80 80 80 80 00"), 0, "length", error=_CallerError)
    with pytest.raises(
        _CallerError, match="size at byte 0 is 2147483648, over its limit 2147483647"
    ):
        read_uvarint(
            bytes.fromhex("80 80 80 80 08"), 0, "size", max_value=2**31 - 1, error=_CallerError
        )
    with pytest.raises(CorruptRecordError, match="uvarint at byte 0 runs past the end"):
        read_uvarint(b"", 0)
    assert read_uvarint(bytes.fromhex("FF FF FF FF FF FF FF FF FF 01"), 0, max_bytes=10) == (
        2**64 - 1,
        10,
    )


def test_negative_is_not_an_unsigned_varint() -> None:
    with pytest.raises(ValueError, match="negative"):
        encode_uvarint(-1)


@given(st.integers(0, 2**35 - 1), st.binary(max_size=3))
def test_uvarint_round_trip_with_trailing_bytes(value: int, tail: bytes) -> None:
    raw = encode_uvarint(value)
    assert len(raw) <= 5
    assert read_uvarint(raw + tail, 0) == (value, len(raw))


@given(st.integers(0, 2**35 - 1), st.data())
def test_uvarint_corrupted_encodings(value: int, data: st.DataObject) -> None:
    """A truncated encoding runs past the end; with a byte flipped it reads as some value, or a
    typed error: never an IndexError, never past the bytes it was given."""
    raw = encode_uvarint(value)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(_CallerError, match="runs past the end"):
        read_uvarint(raw[:cut], 0, error=_CallerError)
    flipped = bytearray(raw)
    at = data.draw(st.integers(0, len(raw) - 1))
    flipped[at] ^= 1 << data.draw(st.integers(0, 7))
    limit = data.draw(st.none() | st.integers(0, 2**35))
    try:
        got, end = read_uvarint(bytes(flipped), 0, max_value=limit, error=_CallerError)
    except _CallerError:
        return
    assert 0 < end <= len(flipped)
    assert limit is None or got <= limit
    assert read_uvarint(encode_uvarint(got), 0) == (got, len(encode_uvarint(got)))


@given(st.binary(max_size=12), st.integers(1, 10))
def test_uvarint_any_bytes_give_a_value_or_a_typed_error(raw: bytes, max_bytes: int) -> None:
    try:
        value, end = read_uvarint(raw, 0, max_bytes=max_bytes, error=_CallerError)
    except _CallerError:
        return
    assert 0 < end <= min(len(raw), max_bytes)
    assert value < 1 << (7 * max_bytes)
    assert raw[end - 1] < 0x80 and all(b >= 0x80 for b in raw[: end - 1])
