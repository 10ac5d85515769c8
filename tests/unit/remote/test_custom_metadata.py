"""The plugin's custom segment metadata (spec §1.3): golden bytes, corruption, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptDataError
from gateway.remote.custom_metadata import (
    SegmentCustomMetadata,
    decode_custom_metadata,
    encode_custom_metadata,
)

SETTINGS = settings(max_examples=200, deadline=None)


def test_custom_metadata_golden() -> None:
    golden = bytes.fromhex("02 00 02 C8 01 02 04 04 66 6F 6F")
    metadata = SegmentCustomMetadata(remote_size=100, object_key="foo")
    assert encode_custom_metadata(metadata) == golden
    assert decode_custom_metadata(golden) == metadata
    assert encode_custom_metadata(SegmentCustomMetadata()) == b""
    assert decode_custom_metadata(b"") == SegmentCustomMetadata()


def test_custom_metadata_all_fields_and_unknown_tag() -> None:
    data = encode_custom_metadata(SegmentCustomMetadata(-1, "pre/", "main"))
    assert data[:3] == bytes([3, 0, 1]) and data[3] == 1  # 3 fields, tag 0, len 1, zig-zag(-1)=1
    assert decode_custom_metadata(data) == SegmentCustomMetadata(-1, "pre/", "main")
    # An unknown tag 5 after the known ones is skipped.
    with_unknown = bytes([4]) + data[1:] + bytes([5, 2, 0xAA, 0xBB])
    assert decode_custom_metadata(with_unknown) == SegmentCustomMetadata(-1, "pre/", "main")


@pytest.mark.parametrize(
    "hexdata",
    [
        "01",  # count without field
        "01 00",  # tag without length
        "01 00 05 01",  # value runs past the end
        "02 02 01 01 00 01 00",  # tags out of order
        "02 00 01 00 00 01 00",  # repeated tag
        "01 01 01 00",  # null compact string
        "01 01 02 05 61",  # string length does not match the field
        "01 00 02 C8 01 FF",  # trailing byte
        "01 00 03 C8 01 00",  # varlong does not fill its field
        "01 01 03 03 FF FE",  # not UTF-8
        "FF FF FF FF FF FF",  # over-long varint
        "01 00 0B FF FF FF FF FF FF FF FF FF FF 01",  # varlong over 10 bytes
    ],
)
def test_corrupt_custom_metadata(hexdata: str) -> None:
    with pytest.raises(CorruptDataError):
        decode_custom_metadata(bytes.fromhex(hexdata))


def test_a_varlong_past_int64_reads_as_kafka_reads_it() -> None:
    """The plugin's serde reads remote_size with Kafka's ``Type.VARLONG``
    (``ByteUtils.readVarlong``), which shifts a 10th byte's bits past 64 out: all ones with a
    10th byte of 0x7F is the zig-zag of the all-ones long, -2^63."""
    metadata = decode_custom_metadata(bytes.fromhex("01 00 0A FF FF FF FF FF FF FF FF FF 7F"))
    assert metadata.remote_size == -(2**63)


@SETTINGS
@given(
    remote_size=st.none() | st.integers(-(1 << 63), (1 << 63) - 1),
    object_prefix=st.none() | st.text(max_size=30),
    object_key=st.none() | st.text(max_size=30),
)
def test_custom_metadata_round_trip(
    remote_size: int | None, object_prefix: str | None, object_key: str | None
) -> None:
    metadata = SegmentCustomMetadata(remote_size, object_prefix, object_key)
    assert decode_custom_metadata(encode_custom_metadata(metadata)) == metadata


@SETTINGS
@given(st.binary(max_size=40))
def test_custom_metadata_random_bytes(data: bytes) -> None:
    try:
        decoded = decode_custom_metadata(data)
    except CorruptDataError:
        return
    assert decode_custom_metadata(encode_custom_metadata(decoded)) == decoded


def test_encoding_refuses_what_cannot_be_decoded() -> None:
    with pytest.raises(ValueError, match="remote_size"):
        encode_custom_metadata(SegmentCustomMetadata(remote_size=1 << 63))
    with pytest.raises(ValueError, match="longer than 32767"):
        encode_custom_metadata(SegmentCustomMetadata(object_key="x" * 0x8000))
