"""Object keys: §1.1 examples, parsing from the right, the §1.3 override, segment keys."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidKeyError
from gateway.kafka.uuids import decode_uuid, encode_uuid
from gateway.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from gateway.remote.custom_metadata import (
    SegmentCustomMetadata,
)
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key, segment_key

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


# --- segment keys from RLMM metadata ---------------------------------------------------------


def test_segment_key_from_rlmm_metadata() -> None:
    tp = TopicIdPartition(decode_uuid(ID1), 7, "topic")
    meta = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, decode_uuid(ID0)), 1234, 2000, 0, 0, 0, ((0, 1234),), 10
    )
    key = segment_key("prefix/", meta)
    assert key.key == (
        "prefix/topic-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log"
    )
    assert segment_key("prefix/", meta, Suffix.MANIFEST) == key.with_suffix(Suffix.MANIFEST)
    assert segment_key("prefix/", meta, "indexes").suffix is Suffix.INDEXES
