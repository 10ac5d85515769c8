"""The Confluent wire format: message indexes against Confluent's own encoder."""

from __future__ import annotations

import io

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.schemas.wire import WireFormatError, message_indexes, schema_id, split


def _confluent(indexes: list[int]) -> bytes:
    """Message indexes as Confluent's serializer writes them (the ``[0]`` shortcut included)."""
    buf = io.BytesIO()
    if indexes == [0]:
        ProtobufSerializer._write_varint(buf, 0)
    else:
        ProtobufSerializer._encode_varints(buf, indexes)
    return buf.getvalue()


@settings(deadline=None, max_examples=300)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=8), st.binary(max_size=8))
def test_message_indexes_read_what_confluent_writes(indexes: list[int], rest: bytes) -> None:
    found, message = message_indexes(memoryview(_confluent(indexes) + rest))
    assert list(found) == indexes
    assert bytes(message) == rest


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "truncated"),
        (b"\x02", "truncated"),  # one index announced, none there
        (b"\x80\x80\x80\x80\x80\x01", "longer than 5"),
        (b"\xff\xff\xff\xff\x7f", "beyond 32 bits"),
        (b"\x01", "count -1"),  # zigzag 1 = -1
        (b"\x82\x01" + b"\x00" * 65, "count 65"),
        (b"\x02\x01", "negative index"),
    ],
)
def test_malformed_message_indexes_are_typed_errors(data: bytes, why: str) -> None:
    with pytest.raises(WireFormatError, match=why):
        message_indexes(memoryview(data))


def test_the_header_names_its_schema_id() -> None:
    assert schema_id(b"\x00\x00\x00\x01\x02body") == 258
    assert schema_id(b"\x01\x00\x00\x01\x02body") is None
    assert schema_id(b"\x00\x00\x00\x01") is None
    found, body = split(b"\x00\x7f\xff\xff\xffxyz")
    assert (found, bytes(body)) == (2**31 - 1, b"xyz")
    with pytest.raises(WireFormatError, match="magic byte 1"):
        split(b"\x01\x00\x00\x00\x01")
    with pytest.raises(WireFormatError, match="shorter"):
        split(b"\x00\x00")
