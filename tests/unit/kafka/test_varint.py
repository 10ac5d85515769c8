"""Varints: the spec's vectors (kafka-formats.md §3.1), round trips, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import CorruptRecordError
from gateway.kafka.varint import encode_varint, encode_varlong, read_varint, read_varlong

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
    with pytest.raises(CorruptRecordError, match="overflows int32"):
        read_varint(b"\xfe\xff\xff\xff\x1f", 0)


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
