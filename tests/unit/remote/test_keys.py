"""Object keys: §1.1 examples, Kafka Uuid text, parsing from the right, §1.3 custom metadata."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptDataError, InvalidKeyError
from gateway.remote.keys import (
    ObjectKey,
    SegmentCustomMetadata,
    Suffix,
    b64decode_standard,
    decode_custom_metadata,
    decode_uuid,
    encode_custom_metadata,
    encode_uuid,
    parse_object_key,
    validate_topic,
)

SETTINGS = settings(max_examples=200, deadline=None)

ID0 = "AAAAAAAAAAAAAAAAAAAAAA"
ID1 = "AAAAAAAAAAAAAAAAAAAAAQ"


# --- golden ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        (
            "prefix/topic-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
            ("prefix/", "topic", ID1, 7, 1234, ID0, Suffix.LOG),
        ),
        (
            "test/topic-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000000023-AAAAAAAAAAAAAAAAAAAAAA"
            ".rsm-manifest",
            ("test/", "topic", ID1, 7, 23, ID0, Suffix.MANIFEST),
        ),
        (
            "tiered-storage-test-zjCAoo05TfOtzEaZ4BnsAw/0/00000000000001857762-"
            "qPXBijDMQ46h0ALQU_itqw.log",
            (
                "",
                "tiered-storage-test",
                "zjCAoo05TfOtzEaZ4BnsAw",
                0,
                1857762,
                "qPXBijDMQ46h0ALQU_itqw",
                Suffix.LOG,
            ),
        ),
    ],
)
def test_spec_examples(key: str, parts: tuple[str, str, str, int, int, str, Suffix]) -> None:
    prefix, topic, topic_id, partition, offset, segment_id, suffix = parts
    parsed = parse_object_key(key)
    assert parsed == ObjectKey(
        prefix, topic, decode_uuid(topic_id), partition, offset, decode_uuid(segment_id), suffix
    )
    assert parsed.key == key
    assert str(parsed) == key
    assert parse_object_key(key, prefix=prefix) == parsed


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


def test_key_for_other_suffixes_and_main_path() -> None:
    key = parse_object_key(
        "p/t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.rsm-manifest"
    )
    main = "t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA"
    assert key.main_path == main
    assert key.key_for(Suffix.LOG) == f"p/{main}.log"
    assert key.key_for("indexes") == f"p/{main}.indexes"
    assert key.with_suffix(Suffix.INDEXES).key == f"p/{main}.indexes"
    assert key.with_suffix("log").suffix is Suffix.LOG
    assert key.with_suffix(Suffix.LOG).with_suffix(Suffix.MANIFEST) == key


def test_custom_metadata_overrides_data_keys_only() -> None:
    key = parse_object_key(
        "p/t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.rsm-manifest"
    )
    main = key.main_path
    both = SegmentCustomMetadata(remote_size=10, object_prefix="old/", object_key="x/y")
    assert key.key_for(Suffix.LOG, both) == "old/x/y.log"
    assert key.key_for(Suffix.INDEXES, both) == "old/x/y.indexes"
    assert key.key_for(Suffix.MANIFEST, both) == f"p/{main}.rsm-manifest"
    only_prefix = SegmentCustomMetadata(object_prefix="")
    assert key.key_for(Suffix.LOG, only_prefix) == f"{main}.log"
    only_key = SegmentCustomMetadata(object_key="k")
    assert key.key_for(Suffix.LOG, only_key) == "p/k.log"
    assert key.key_for(Suffix.LOG, SegmentCustomMetadata()) == f"p/{main}.log"


def test_prefix_without_slash_needs_the_prefix() -> None:
    key = "abctopic-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log"
    assert parse_object_key(key, prefix="abc").topic == "topic"
    # Without it the prefix cannot be told apart from the topic name.
    assert parse_object_key(key).topic == "abctopic"
    with pytest.raises(InvalidKeyError, match="does not start with the prefix"):
        parse_object_key(key, prefix="xyz/")


def test_topic_names_with_dashes_and_ids_with_dashes() -> None:
    topic_id = "-AAAAAAAAAAAAAAAAAAAAA"
    segment_id = "---------------------w"
    key = ObjectKey(
        "", "a-b-", decode_uuid(topic_id), 0, 0, decode_uuid(segment_id), Suffix.INDEXES
    )
    assert key.key == f"a-b--{topic_id}/0/{'0' * 20}-{segment_id}.indexes"
    assert parse_object_key(key.key) == key


MAIN = "t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA"


@pytest.mark.parametrize(
    "key",
    [
        "",
        f"{MAIN}.txt",
        f"{MAIN}.index",  # pre-release per-index suffix
        f"{MAIN}",
        f"{MAIN}.LOG",
        "t-AAAAAAAAAAAAAAAAAAAAAQ/7/0000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",  # 19 digits
        "t-AAAAAAAAAAAAAAAAAAAAAQ/7/000000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",  # 21
        "t-AAAAAAAAAAAAAAAAAAAAAQ/7/99999999999999999999-AAAAAAAAAAAAAAAAAAAAAA.log",  # > int64
        "t-AAAAAAAAAAAAAAAAAAAAAQ/7/0000000000000000123\u0664-AAAAAAAAAAAAAAAAAAAAAA.log",
        "t-AAAAAAAAAAAAAAAAAAAAAQ/07/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "t-AAAAAAAAAAAAAAAAAAAAAQ/-1/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "t-AAAAAAAAAAAAAAAAAAAAAQ/2147483648/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "t-AAAAAAAAAAAAAAAAAAAAAQ//00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234_AAAAAAAAAAAAAAAAAAAAAA.log",
        "t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAA.log",
        "t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAB.log",
        "t-AAAAAAAAAAAAAAAAAAAAB/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "tAAAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "p/-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "t t-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        ".-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "..-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        f"{'x' * 250}-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
        "00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log",
    ],
)
def test_malformed_keys(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        parse_object_key(key)


def test_non_string_key() -> None:
    with pytest.raises(InvalidKeyError):
        parse_object_key(b"x.log")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"partition": -1},
        {"partition": 1 << 31},
        {"partition": True},
        {"start_offset": -1},
        {"start_offset": 1 << 63},
        {"topic": ""},
        {"topic": "a/b"},
        {"topic": "x" * 250},
        {"suffix": "txt"},
        {"prefix": None},
        {"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"},
    ],
)
def test_invalid_object_key_values(kwargs: dict[str, object]) -> None:
    values: dict[str, object] = {
        "prefix": "",
        "topic": "t",
        "topic_id": uuid.UUID(int=1),
        "partition": 0,
        "start_offset": 0,
        "segment_id": uuid.UUID(int=2),
        "suffix": Suffix.LOG,
    }
    values.update(kwargs)
    with pytest.raises(InvalidKeyError):
        ObjectKey(**values)  # type: ignore[arg-type]


def test_validate_topic() -> None:
    validate_topic("a" * 249)
    validate_topic("._-aZ09")
    with pytest.raises(InvalidKeyError):
        validate_topic("a" * 250)


def test_largest_values_render() -> None:
    key = ObjectKey(
        "", "t", uuid.UUID(int=0), (1 << 31) - 1, (1 << 63) - 1, uuid.UUID(int=0), Suffix.LOG
    )
    assert "/2147483647/09223372036854775807-" in key.key
    assert parse_object_key(key.key) == key


# --- round trips -----------------------------------------------------------------------------

TOPICS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=249,
).filter(lambda t: t not in (".", ".."))
UUIDS = st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1))
SLASH_PREFIXES = st.one_of(st.just(""), st.text(max_size=20).map(lambda p: p + "/"))


KEYS = st.builds(
    ObjectKey,
    prefix=SLASH_PREFIXES,
    topic=TOPICS,
    topic_id=UUIDS,
    partition=st.integers(0, (1 << 31) - 1),
    start_offset=st.integers(0, (1 << 63) - 1),
    segment_id=UUIDS,
    suffix=st.sampled_from(Suffix),
)


@SETTINGS
@given(KEYS)
def test_round_trip(key: ObjectKey) -> None:
    text = key.key
    assert parse_object_key(text) == key
    assert parse_object_key(text, prefix=key.prefix) == key
    assert decode_uuid(encode_uuid(key.topic_id)) == key.topic_id
    assert len(encode_uuid(key.segment_id)) == 22


@SETTINGS
@given(prefix=st.text(max_size=20), topic=TOPICS, topic_id=UUIDS, segment_id=UUIDS)
def test_round_trip_any_prefix_when_known(
    prefix: str, topic: str, topic_id: uuid.UUID, segment_id: uuid.UUID
) -> None:
    key = ObjectKey(prefix, topic, topic_id, 3, 42, segment_id, Suffix.MANIFEST)
    assert parse_object_key(key.key, prefix=prefix) == key


KEYISH = st.lists(
    st.sampled_from(
        ["a", "-", "/", "0", "1", "7", ".log", ".indexes", ".rsm-manifest", "A" * 22, "0" * 20, "_"]
    ),
    max_size=12,
).map("".join)


@SETTINGS
@given(text=st.one_of(st.text(max_size=120), KEYISH))
def test_any_text_is_a_key_that_renders_back_or_invalid(text: str) -> None:
    try:
        key = parse_object_key(text)
    except InvalidKeyError:
        return
    assert key.key == text


@SETTINGS
@given(key=KEYS, data=st.data())
def test_mutated_keys_invalid_or_exact(key: ObjectKey, data: st.DataObject) -> None:
    text = key.key
    pos = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.characters())
    mutated = text[:pos] + char + text[pos + 1 :]
    try:
        parsed = parse_object_key(mutated)
    except InvalidKeyError:
        return
    assert parsed.key == mutated


# --- Base64 helper ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "raw"),
    [("", b""), ("CgsMDQ==", b"\n\x0b\x0c\r"), ("CgsMDQ", b"\n\x0b\x0c\r"), ("+/8=", b"\xfb\xff")],
)
def test_b64decode_standard(text: str, raw: bytes) -> None:
    assert b64decode_standard(text) == raw


@pytest.mark.parametrize(
    "text", ["C", "CgsMDQ=", "CgsMDQ===", "Cg==Cg==", "Cg sM", "-_8=", "=", "Zm9v\n"]
)
def test_b64decode_standard_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        b64decode_standard(text)


# --- custom metadata (§1.3) ------------------------------------------------------------------


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
        "01 00 0A FF FF FF FF FF FF FF FF FF 7F",  # varlong past int64
    ],
)
def test_corrupt_custom_metadata(hexdata: str) -> None:
    with pytest.raises(CorruptDataError):
        decode_custom_metadata(bytes.fromhex(hexdata))


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
