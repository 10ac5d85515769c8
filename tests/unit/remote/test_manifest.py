"""Manifest: spec §2.5 / upstream golden JSON byte for byte, round trips, corruption."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptManifestError
from gateway.kafka.uuids import decode_uuid, encode_uuid
from gateway.metadata.manifests import txn_index_empty
from gateway.remote.chunk_index import ChunkIndex, FixedChunkIndex, VariableChunkIndex
from gateway.remote.chunk_sizes import encode_transformed_chunks
from gateway.remote.keys import Suffix, parse_object_key
from gateway.remote.manifest import (
    EncryptionMetadata,
    IndexType,
    ManifestIndexes,
    ManifestSegmentMetadata,
    SegmentIndex,
    SegmentManifest,
    parse_manifest,
)
from gateway.remote.manifest_writer import serialize_manifest
from tests.unit.remote.mutations import mutate

SETTINGS = settings(max_examples=200, deadline=None)

# Upstream SegmentManifestV1SerdeTest constants.
RLSM_JSON = (
    '{"remoteLogSegmentId":{"topicIdPartition":{"topicId":"lZ6vvmajTWKDBUTV6SQAtQ",'
    '"topicPartition":{"topic":"topic1","partition":42}},"id":"adh9f8BMS4anaUnD8KWfWg"},'
    '"startOffset":0,"endOffset":1000,"maxTimestampMs":1000000000,"brokerId":2,'
    '"eventTimestampMs":2000000000,"segmentLeaderEpochs":{"0":100,"1":200,"2":300}}'
)
CHUNK_INDEX_JSON = (
    '{"type":"fixed","originalChunkSize":100,"originalFileSize":1000,'
    '"transformedChunkSize":110,"finalTransformedChunkSize":110}'
)
INDEXES_JSON = (
    '{"offset":{"position":0,"size":1},"timestamp":{"position":1,"size":1},'
    '"producerSnapshot":{"position":2,"size":1},"leaderEpoch":{"position":3,"size":1},'
    '"transaction":{"position":4,"size":1}}'
)
INDEXES_NO_TXN_JSON = INDEXES_JSON.replace('{"position":4,"size":1}', "null")
WRAPPED_KEY = bytes(range(256))  # stands in for an RSA-2048 ciphertext
DATA_KEY_TEXT = "static-key-id:" + base64.b64encode(WRAPPED_KEY).decode()
ENCRYPTION_JSON = f'{{"dataKey":"{DATA_KEY_TEXT}","aad":"CgsMDQ=="}}'


def manifest_json(
    *,
    chunk_index: str = CHUNK_INDEX_JSON,
    indexes: str = INDEXES_JSON,
    compression: str = "false",
    encryption: str | None = None,
    rlsm: str = RLSM_JSON,
) -> bytes:
    enc = "" if encryption is None else f',"encryption":{encryption}'
    return (
        f'{{"version":"1","chunkIndex":{chunk_index},"segmentIndexes":{indexes},'
        f'"compression":{compression}{enc},"remoteLogSegmentMetadata":{rlsm}}}'
    ).encode()


WITHOUT_ENCRYPTION = manifest_json()
WITHOUT_TXN_INDEX = manifest_json(indexes=INDEXES_NO_TXN_JSON)
COMPLETE_EXAMPLE = manifest_json(encryption=ENCRYPTION_JSON)  # §2.5 with concrete values

EXPECTED_RLSM = ManifestSegmentMetadata(
    topic_id=decode_uuid("lZ6vvmajTWKDBUTV6SQAtQ"),
    topic="topic1",
    partition=42,
    segment_id=decode_uuid("adh9f8BMS4anaUnD8KWfWg"),
    start_offset=0,
    end_offset=1000,
    max_timestamp_ms=1000000000,
    broker_id=2,
    event_timestamp_ms=2000000000,
    segment_leader_epochs=((0, 100), (1, 200), (2, 300)),
)
ONE_BYTE_EACH = ManifestIndexes.from_sizes(1, 1, 1, 1, 1)


# --- golden ----------------------------------------------------------------------------------


@pytest.mark.parametrize("golden", [WITHOUT_ENCRYPTION, WITHOUT_TXN_INDEX, COMPLETE_EXAMPLE])
def test_golden_byte_for_byte(golden: bytes) -> None:
    assert serialize_manifest(parse_manifest(golden)) == golden


def test_complete_example_values() -> None:
    manifest = parse_manifest(COMPLETE_EXAMPLE, key="k.rsm-manifest")
    assert manifest == SegmentManifest(
        chunk_index=FixedChunkIndex(100, 1000, 110, 110),
        segment_indexes=ONE_BYTE_EACH,
        compression=False,
        encryption=EncryptionMetadata("static-key-id", WRAPPED_KEY, bytes([10, 11, 12, 13])),
        remote_log_segment_metadata=EXPECTED_RLSM,
    )
    assert manifest.encryption is not None
    assert manifest.encryption.data_key_text == DATA_KEY_TEXT
    assert len(DATA_KEY_TEXT.split(":")[1]) == 344
    assert EncryptionMetadata.IV_SIZE == 12


def test_without_transaction_index() -> None:
    manifest = parse_manifest(WITHOUT_TXN_INDEX)
    indexes = manifest.segment_indexes
    assert indexes.transaction is None
    assert indexes[IndexType.TRANSACTION] is None
    assert indexes[IndexType.LEADER_EPOCH] == SegmentIndex(3, 1)
    assert indexes.total_size == 4
    assert manifest.encryption is None


def test_built_from_values_matches_upstream_json() -> None:
    manifest = SegmentManifest(
        FixedChunkIndex(100, 1000, 110, 110), ONE_BYTE_EACH, False, None, EXPECTED_RLSM
    )
    assert serialize_manifest(manifest) == WITHOUT_ENCRYPTION


def test_variable_index_with_compression() -> None:
    text = encode_transformed_chunks([40, 41, 12])
    chunk_index = (
        f'{{"type":"variable","originalChunkSize":100,"originalFileSize":250,'
        f'"transformedChunks":"{text}"}}'
    )
    golden = manifest_json(chunk_index=chunk_index, compression="true", encryption=ENCRYPTION_JSON)
    manifest = parse_manifest(golden)
    assert manifest.compression is True
    assert manifest.chunk_index == VariableChunkIndex(100, 250, [40, 41, 12])
    assert serialize_manifest(manifest) == golden


def test_leader_epochs_written_in_ascending_order() -> None:
    rlsm = RLSM_JSON.replace('{"0":100,"1":200,"2":300}', '{"10":5,"-1":0,"2":300}')
    manifest = parse_manifest(manifest_json(rlsm=rlsm))
    assert manifest.remote_log_segment_metadata is not None
    assert manifest.remote_log_segment_metadata.segment_leader_epochs == (
        (-1, 0),
        (2, 300),
        (10, 5),
    )
    assert b'"segmentLeaderEpochs":{"-1":0,"2":300,"10":5}' in serialize_manifest(manifest)


def test_unknown_members_inside_metadata_are_ignored() -> None:
    rlsm = RLSM_JSON[:-1] + ',"segmentSizeInBytes":{"x":[1]}}'
    rlsm = rlsm.replace('"partition":42}', '"partition":42,"extra":null}')
    manifest = parse_manifest(manifest_json(rlsm=rlsm))
    assert manifest.remote_log_segment_metadata == EXPECTED_RLSM
    assert serialize_manifest(manifest) == WITHOUT_ENCRYPTION


@pytest.mark.parametrize("value", [True, False])
def test_a_kafka_4_brokers_txn_idx_empty_is_kept_and_written_back(value: bool) -> None:
    """The real plugin on a Kafka 4.1 broker appends ``txnIdxEmpty`` (tests/fixtures/real_kafka)."""
    rlsm = RLSM_JSON[:-1] + f',"txnIdxEmpty":{str(value).lower()}}}'
    data = manifest_json(rlsm=rlsm)
    manifest = parse_manifest(data)
    assert manifest.remote_log_segment_metadata is not None
    assert manifest.remote_log_segment_metadata.txn_idx_empty is value
    assert serialize_manifest(manifest) == data


def test_a_txn_idx_empty_that_is_not_a_boolean_is_corrupt() -> None:
    with pytest.raises(CorruptManifestError, match="txnIdxEmpty"):
        parse_manifest(manifest_json(rlsm=RLSM_JSON[:-1] + ',"txnIdxEmpty":1}'))


@pytest.mark.parametrize("form", ["null", None])
def test_metadata_absent_or_null(form: str | None) -> None:
    data = manifest_json(rlsm="null")
    if form is None:
        data = data.replace(b',"remoteLogSegmentMetadata":null', b"")
    manifest = parse_manifest(data)
    assert manifest.remote_log_segment_metadata is None
    assert serialize_manifest(manifest).endswith(b',"remoteLogSegmentMetadata":null}')


def test_encryption_null_and_unpadded_base64() -> None:
    assert parse_manifest(manifest_json(encryption="null")).encryption is None
    unpadded = '{"dataKey":"k:AAEC","aad":"CgsMDQ"}'
    encryption = parse_manifest(manifest_json(encryption=unpadded)).encryption
    assert encryption == EncryptionMetadata("k", b"\0\1\2", bytes([10, 11, 12, 13]))
    empty_aad = '{"dataKey":"k:AAEC","aad":""}'
    assert parse_manifest(manifest_json(encryption=empty_aad)).encryption == EncryptionMetadata(
        "k", b"\0\1\2", b""
    )


def test_properties_in_any_order_and_whitespace() -> None:
    document = json.loads(COMPLETE_EXAMPLE)
    shuffled = dict(reversed(list(document.items())))
    data = json.dumps(shuffled, indent=2).encode()
    assert serialize_manifest(parse_manifest(data)) == COMPLETE_EXAMPLE


def test_jackson_string_escaping() -> None:
    key_id = 'a"b\\c\nd\te\x01f\x1fg/h\u00e9\u2028\U0001f600'
    manifest = SegmentManifest(
        FixedChunkIndex(1, 1, 1, 1),
        ManifestIndexes.from_sizes(0, 0, 0, 0, None),
        False,
        EncryptionMetadata(key_id, b"\x01", b""),
        None,
    )
    data = serialize_manifest(manifest)
    expected = '"dataKey":"a\\"b\\\\c\\nd\\te\\u0001f\\u001Fg/h\u00e9\u2028\U0001f600:AQ=="'
    assert expected.encode() in data
    assert parse_manifest(data) == manifest


def test_object_key_from_metadata() -> None:
    key = EXPECTED_RLSM.object_key("prefix/")
    assert key.suffix is Suffix.MANIFEST
    assert key.key == (
        "prefix/topic1-lZ6vvmajTWKDBUTV6SQAtQ/42/00000000000000000000-adh9f8BMS4anaUnD8KWfWg"
        ".rsm-manifest"
    )
    assert parse_object_key(key.key) == key
    assert EXPECTED_RLSM.object_key("", "log").key.endswith(".log")


def test_model_validation() -> None:
    with pytest.raises(ValueError):
        SegmentIndex(-1, 0)
    with pytest.raises(ValueError):
        SegmentIndex(0, 1 << 31)
    for key_id in ("", "  ", "a:b"):
        with pytest.raises(ValueError):
            EncryptionMetadata(key_id, b"x", b"")
    with pytest.raises(ValueError):
        EncryptionMetadata("k", b"", b"")
    with pytest.raises(ValueError):
        ManifestSegmentMetadata(
            uuid.UUID(int=0), "t", 0, uuid.UUID(int=0), 0, 0, 0, 0, 0, ((1, 2), (1, 3))
        )
    with pytest.raises(ValueError):
        ManifestSegmentMetadata(uuid.UUID(int=0), "t", -1, uuid.UUID(int=0), 0, 0, 0, 0, 0)


def test_from_sizes_is_cumulative() -> None:
    indexes = ManifestIndexes.from_sizes(80, 120, 0, 30, 44)
    assert [indexes[t] for t in IndexType] == [
        SegmentIndex(0, 80),
        SegmentIndex(80, 120),
        SegmentIndex(200, 0),
        SegmentIndex(200, 30),
        SegmentIndex(230, 44),
    ]
    assert indexes.total_size == 274


# --- corruption ------------------------------------------------------------------------------

GOOD = json.loads(COMPLETE_EXAMPLE)


def with_change(path: str, value: object) -> bytes:
    """GOOD with the property at dotted ``path`` set (``...`` = deleted)."""
    document = json.loads(COMPLETE_EXAMPLE)
    *parents, last = path.split(".")
    node = document
    for name in parents:
        node = node[name]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return json.dumps(document, separators=(",", ":")).encode()


RLSM = "remoteLogSegmentMetadata"


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("version", ..., "version"),
        ("version", "2", "version"),
        ("version", 1, "version"),
        ("chunkIndex", ..., "chunkIndex"),
        ("chunkIndex", None, "chunkIndex"),
        ("chunkIndex.type", "fixedd", "chunkIndex.type"),
        ("chunkIndex.originalChunkSize", -5, "chunkIndex.originalChunkSize"),
        ("segmentIndexes", ..., "segmentIndexes"),
        ("segmentIndexes", [], "segmentIndexes"),
        ("segmentIndexes.transaction", ..., "segmentIndexes.transaction"),
        ("segmentIndexes.offset", None, "segmentIndexes.offset"),
        ("segmentIndexes.offset.position", -1, "segmentIndexes.offset.position"),
        ("segmentIndexes.timestamp.size", "1", "segmentIndexes.timestamp.size"),
        ("segmentIndexes.leaderEpoch.size", 1.5, "segmentIndexes.leaderEpoch.size"),
        ("segmentIndexes.leaderEpoch.extra", 1, "segmentIndexes.leaderEpoch.extra"),
        ("segmentIndexes.timeindex", {"position": 0, "size": 0}, "segmentIndexes.timeindex"),
        ("compression", ..., "compression"),
        ("compression", 0, "compression"),
        ("compression", "false", "compression"),
        ("encryption", "x", "encryption"),
        ("encryption.aad", ..., "encryption.aad"),
        ("encryption.aad", "CgsMDQ=", "encryption.aad"),
        ("encryption.aad", 5, "encryption.aad"),
        ("encryption.dataKey", ..., "encryption.dataKey"),
        ("encryption.dataKey", "AAEC", "encryption.dataKey"),
        ("encryption.dataKey", "a:b:AAEC", "encryption.dataKey"),
        ("encryption.dataKey", " :AAEC", "encryption.dataKey"),
        ("encryption.dataKey", "k:", "encryption.dataKey"),
        ("encryption.dataKey", "k:AA EC", "encryption.dataKey"),
        ("encryption.ivSize", 12, "encryption.ivSize"),
        ("extra", 1, "extra"),
        (RLSM, 5, RLSM),
        (f"{RLSM}.startOffset", ..., f"{RLSM}.startOffset"),
        (f"{RLSM}.startOffset", 1 << 63, f"{RLSM}.startOffset"),
        (f"{RLSM}.brokerId", 1 << 31, f"{RLSM}.brokerId"),
        (f"{RLSM}.segmentLeaderEpochs", [], f"{RLSM}.segmentLeaderEpochs"),
        (f"{RLSM}.segmentLeaderEpochs.01", 5, f"{RLSM}.segmentLeaderEpochs.01"),
        (f"{RLSM}.segmentLeaderEpochs.x", 5, f"{RLSM}.segmentLeaderEpochs.x"),
        (f"{RLSM}.segmentLeaderEpochs.2147483648", 5, f"{RLSM}.segmentLeaderEpochs.2147483648"),
        (f"{RLSM}.segmentLeaderEpochs.3", "5", f"{RLSM}.segmentLeaderEpochs.3"),
        (f"{RLSM}.remoteLogSegmentId.id", "AAAA", f"{RLSM}.remoteLogSegmentId.id"),
        (f"{RLSM}.remoteLogSegmentId.topicIdPartition.topicId", None, "topicIdPartition.topicId"),
        (
            f"{RLSM}.remoteLogSegmentId.topicIdPartition.topicPartition.partition",
            -1,
            "topicPartition.partition",
        ),
        (
            f"{RLSM}.remoteLogSegmentId.topicIdPartition.topicPartition.topic",
            "\ud800",
            "topicPartition.topic",
        ),
    ],
)
def test_malformed_property(path: str, value: object, where: str) -> None:
    data = with_change(path, value)
    with pytest.raises(CorruptManifestError, match=f"manifest 'the-key': .*{where}"):
        parse_manifest(data, key="the-key")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe{}",
        COMPLETE_EXAMPLE[:-1],
        COMPLETE_EXAMPLE + b"x",
        b"[]",
        b"null",
        b'"manifest"',
        COMPLETE_EXAMPLE.replace(b'"size":1', b'"size":NaN', 1),
        COMPLETE_EXAMPLE.replace(b'"size":1', b'"size":Infinity', 1),
        COMPLETE_EXAMPLE.replace(b'"size":1', b'"size":1e2', 1),
        COMPLETE_EXAMPLE.replace(b'"size":1', b'"size":' + b"1" * 5000, 1),
        b"[" * 200_000,
        b'{"a":' * 200_000,
        COMPLETE_EXAMPLE.decode().encode("utf-16"),
    ],
)
def test_not_a_manifest(data: bytes) -> None:
    with pytest.raises(CorruptManifestError):
        parse_manifest(data)


def test_error_chains_from_the_cause() -> None:
    with pytest.raises(CorruptManifestError) as info:
        parse_manifest(b"{")
    assert isinstance(info.value.__cause__, json.JSONDecodeError)
    with pytest.raises(CorruptManifestError) as info:
        parse_manifest(with_change("encryption.aad", "C"))
    assert isinstance(info.value.__cause__, ValueError)


# --- round trips -----------------------------------------------------------------------------

UUIDS = st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1))
INT32 = st.integers(0, (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


@st.composite
def chunk_indexes(draw: st.DrawFn) -> ChunkIndex:
    chunk = draw(st.integers(1, 1 << 20))
    size = draw(st.integers(0, 40 * chunk))
    n = max(-(-size // chunk), 1)
    if draw(st.booleans()):
        return VariableChunkIndex(chunk, size, draw(st.lists(INT32, min_size=n, max_size=n)))
    return FixedChunkIndex(chunk, size, draw(INT32), draw(INT32))


KEY_IDS = TEXT.filter(lambda k: k.strip() != "" and ":" not in k)
ENCRYPTIONS = st.builds(
    EncryptionMetadata, KEY_IDS, st.binary(min_size=1, max_size=600), st.binary(max_size=40)
)
METADATA = st.builds(
    ManifestSegmentMetadata,
    topic_id=UUIDS,
    topic=TEXT,
    partition=INT32,
    segment_id=UUIDS,
    start_offset=INT64,
    end_offset=INT64,
    max_timestamp_ms=INT64,
    broker_id=st.integers(-(1 << 31), (1 << 31) - 1),
    event_timestamp_ms=INT64,
    segment_leader_epochs=st.dictionaries(st.integers(-(1 << 31), (1 << 31) - 1), INT64).map(
        lambda d: tuple(d.items())
    ),
)
MANIFESTS = st.builds(
    SegmentManifest,
    chunk_index=chunk_indexes(),
    segment_indexes=st.builds(
        ManifestIndexes.from_sizes,
        st.integers(0, 1 << 20),
        st.integers(0, 1 << 20),
        st.integers(0, 1 << 20),
        st.integers(0, 1 << 20),
        st.none() | st.integers(0, 1 << 20),
    ),
    compression=st.booleans(),
    encryption=st.none() | ENCRYPTIONS,
    remote_log_segment_metadata=st.none() | METADATA,
)


def reference_json(m: SegmentManifest) -> bytes:
    """An independent encoder: an ordered dict through ``json.dumps``."""
    ci = m.chunk_index
    chunk: dict[str, object] = {
        "type": ci.type_name,
        "originalChunkSize": ci.original_chunk_size,
        "originalFileSize": ci.original_file_size,
    }
    if isinstance(ci, FixedChunkIndex):
        chunk["transformedChunkSize"] = ci.transformed_chunk_size
        chunk["finalTransformedChunkSize"] = ci.final_transformed_chunk_size
    else:
        assert isinstance(ci, VariableChunkIndex)
        chunk["transformedChunks"] = encode_transformed_chunks(ci.transformed_chunks)
    indexes = {
        t.value: None
        if (i := m.segment_indexes[t]) is None
        else {"position": i.position, "size": i.size}
        for t in IndexType
    }
    document: dict[str, object] = {
        "version": "1",
        "chunkIndex": chunk,
        "segmentIndexes": indexes,
        "compression": m.compression,
    }
    if m.encryption is not None:
        wrapped = base64.b64encode(m.encryption.wrapped_data_key).decode()
        document["encryption"] = {
            "dataKey": f"{m.encryption.key_id}:{wrapped}",
            "aad": base64.b64encode(m.encryption.aad).decode(),
        }
    r = m.remote_log_segment_metadata
    document["remoteLogSegmentMetadata"] = (
        None
        if r is None
        else {
            "remoteLogSegmentId": {
                "topicIdPartition": {
                    "topicId": encode_uuid(r.topic_id),
                    "topicPartition": {"topic": r.topic, "partition": r.partition},
                },
                "id": encode_uuid(r.segment_id),
            },
            "startOffset": r.start_offset,
            "endOffset": r.end_offset,
            "maxTimestampMs": r.max_timestamp_ms,
            "brokerId": r.broker_id,
            "eventTimestampMs": r.event_timestamp_ms,
            "segmentLeaderEpochs": {str(e): o for e, o in sorted(r.segment_leader_epochs)},
        }
    )
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def has_control_chars(m: SegmentManifest) -> bool:
    texts = [m.encryption.key_id if m.encryption else ""]
    if m.remote_log_segment_metadata is not None:
        texts.append(m.remote_log_segment_metadata.topic)
    return any(ord(c) < 0x20 for t in texts for c in t)


@SETTINGS
@given(MANIFESTS)
def test_round_trip(manifest: SegmentManifest) -> None:
    data = serialize_manifest(manifest)
    parsed = parse_manifest(data)
    assert parsed == manifest
    assert serialize_manifest(parsed) == data
    assert json.loads(data) == json.loads(reference_json(manifest))
    if not has_control_chars(manifest):
        # json.dumps escapes control characters with lower-case hex; Jackson upper-case.
        assert data == reference_json(manifest)


@SETTINGS
@given(
    manifest=st.one_of(st.sampled_from([parse_manifest(COMPLETE_EXAMPLE)]), MANIFESTS),
    mutations=st.lists(
        st.tuples(
            st.sampled_from(["flip", "delete", "insert", "truncate"]),
            st.integers(0, 10**6),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_corrupted_bytes(manifest: SegmentManifest, mutations: list[tuple[str, int, int]]) -> None:
    data = serialize_manifest(manifest)
    for kind, where, byte in mutations:
        data = mutate(data, kind, where, byte)
    try:
        parsed = parse_manifest(data, key="k")
    except CorruptManifestError:
        return
    assert parse_manifest(serialize_manifest(parsed)) == parsed


@pytest.mark.parametrize(
    ("transaction", "copy", "empty"),
    [
        (None, None, True),  # no transaction index piece
        (SegmentIndex(4, 0), None, True),  # an empty .txnindex handed to the plugin
        (SegmentIndex(4, 96), None, False),
        (SegmentIndex(4, 0), False, False),  # the broker's own copy (Kafka 4.x) wins
        (None, False, False),
        (SegmentIndex(4, 96), True, True),
    ],
)
def test_txn_index_empty_as_the_broker_says(
    transaction: SegmentIndex | None, copy: bool | None, empty: bool
) -> None:
    indexes = ManifestIndexes(*(SegmentIndex(i, 1) for i in range(4)), transaction)
    meta = replace(EXPECTED_RLSM, txn_idx_empty=copy)
    manifest = SegmentManifest(FixedChunkIndex(100, 1000, 110, 110), indexes, False, None, meta)
    assert txn_index_empty(manifest) is empty
