"""Kafka Uuid text form (``Uuid.toString``/``fromString``) and the user-facing topic-id parser."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ConfigurationError, InvalidKeyError
from gateway.kafka.uuids import KAFKA_UUID_LENGTH, decode_uuid, encode_uuid, parse_topic_id

ID0 = "AAAAAAAAAAAAAAAAAAAAAA"
ID1 = "AAAAAAAAAAAAAAAAAAAAAQ"


def test_uuid_text_form() -> None:
    # Kafka Uuid(0, 1).toString() and Uuid.ZERO_UUID
    assert encode_uuid(uuid.UUID(int=1)) == ID1
    assert encode_uuid(uuid.UUID(int=0)) == ID0
    assert decode_uuid(ID1) == uuid.UUID(int=1)
    # msb first, then lsb, both big-endian
    value = uuid.UUID(bytes=bytes(range(16)))
    assert encode_uuid(value) == "AAECAwQFBgcICQoLDA0ODw"
    assert decode_uuid("-_-_-_-_-_-_-_-_-_-_-w").bytes == bytes.fromhex("fbffbf" * 5 + "fb")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "AAAAAAAAAAAAAAAAAAAAA",  # 21
        "AAAAAAAAAAAAAAAAAAAAAAA",  # 23
        "AAAAAAAAAAAAAAAAAAAAAQ==",  # padded
        "AAAAAAAAAAAAAAAAAAAA+Q",  # standard alphabet
        "AAAAAAAAAAAAAAAAAAAA/Q",
        "AAAAAAAAAAAAAAAAAAAAAB",  # non-zero trailing bits
        "AAAAAAAAAAAAAAAAAAAA\u00c5Q",
        " AAAAAAAAAAAAAAAAAAAAQ",
    ],
)
def test_bad_uuid_text(text: str) -> None:
    with pytest.raises(InvalidKeyError):
        decode_uuid(text)


@settings(max_examples=300, deadline=None)
@given(st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1)))
def test_round_trip(value: uuid.UUID) -> None:
    text = encode_uuid(value)
    assert len(text) == KAFKA_UUID_LENGTH
    assert decode_uuid(text) == value


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_any_text_is_canonical_or_refused(text: str) -> None:
    try:
        value = decode_uuid(text)
    except InvalidKeyError:
        return
    assert encode_uuid(value) == text


def test_parse_topic_id_takes_both_forms() -> None:
    value = uuid.UUID(int=1)
    assert parse_topic_id(str(value)) == value
    assert parse_topic_id(ID1) == value
    with pytest.raises(ConfigurationError, match="--topic-id 'nope' is neither"):
        parse_topic_id("nope", "--topic-id")
