"""Chunk index: §3 golden vectors, §8 range mapping, codec round trips, bombs, corruption."""

from __future__ import annotations

import base64
import itertools
import json
import random
import struct

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptManifestError
from gateway.remote.chunk_index import (
    Chunk,
    ChunkIndex,
    FixedChunkIndex,
    VariableChunkIndex,
    parse_chunk_index,
)
from gateway.remote.chunk_index_builder import build_chunk_index
from gateway.remote.chunk_sizes import (
    MAX_CHUNK_SIZES_BYTES,
    decode_chunk_sizes,
    decode_transformed_chunks,
    encode_chunk_sizes,
    encode_transformed_chunks,
)
from tests.unit.remote.mutations import mutate

SETTINGS = settings(max_examples=200, deadline=None)
MAX = 2147483647

FIXED_JSON = (
    '{"type":"fixed","originalChunkSize":100,"originalFileSize":250,'
    '"transformedChunkSize":110,"finalTransformedChunkSize":30}'
)
VARIABLE_JSON = (
    '{"type":"variable","originalChunkSize":100,"originalFileSize":250,'
    '"transformedChunks":"KLUv/SAPeQAAAAAAAwAAAAoBAAoAAAAe"}'
)


def parse(text: str) -> ChunkIndex:
    return parse_chunk_index(json.loads(text))


# --- golden vectors --------------------------------------------------------------------------


def test_fixed_vector() -> None:
    index = parse(FIXED_JSON)
    assert isinstance(index, FixedChunkIndex)
    assert index.chunks() == [
        Chunk(0, 0, 100, 0, 110),
        Chunk(1, 100, 100, 110, 110),
        Chunk(2, 200, 50, 220, 30),
    ]
    assert index.to_json() == FIXED_JSON
    assert index.chunk_count == 3
    assert index.transformed_file_size == 250
    assert index == FixedChunkIndex(100, 250, 110, 30)


def test_variable_vector() -> None:
    index = parse(VARIABLE_JSON)
    assert isinstance(index, VariableChunkIndex)
    assert index.chunks() == [
        Chunk(0, 0, 100, 0, 10),
        Chunk(1, 100, 100, 10, 20),
        Chunk(2, 200, 50, 30, 30),
    ]
    assert index.transformed_chunks == (10, 20, 30)
    assert index.transformed_file_size == 60
    assert index.to_json() == VARIABLE_JSON
    assert index == VariableChunkIndex(100, 250, [10, 20, 30])
    assert hash(index) == hash(VariableChunkIndex(100, 250, (10, 20, 30)))


def test_variable_vector_layers() -> None:
    text = "KLUv/SAPeQAAAAAAAwAAAAoBAAoAAAAe"
    frame = base64.b64decode(text)
    payload = bytes.fromhex("00000003 0000000A 01 00 0A 0000001E")
    assert frame == bytes.fromhex("28B52FFD 20 0F 790000") + payload
    assert encode_chunk_sizes([10, 20, 30]) == payload
    assert encode_transformed_chunks([10, 20, 30]) == text
    assert decode_transformed_chunks(text) == [10, 20, 30]


def test_codec_full_example() -> None:
    golden = bytes.fromhex("00000005 00000000 02 0000 03E8 0002 ABE2 00000171")
    assert encode_chunk_sizes([0, 1000, 2, 44002, 369]) == golden
    assert decode_chunk_sizes(golden) == [0, 1000, 2, 44002, 369]


@pytest.mark.parametrize(
    ("values", "width", "length"),
    [
        ([0, 1000, 2, 44002, 369], 2, 21),
        ([MAX, MAX - 1, MAX - 2, 10], 1, 16),
        ([1, 2, 3, MAX], 1, 16),
        ([1, 0xFF + 10, 0xFF + 20, 0xFF + 30, MAX], 2, 21),
        ([1, 0xFFFF + 10, 0xFFFF + 20, 0xFFFF + 30, MAX], 3, 25),
        ([1, 0xFFFFFF + 10, 0xFFFFFF + 20, 0xFFFFFF + 30, MAX], 4, 29),
        ([0, MAX, 0], 4, 21),
        ([], None, 4),
        ([7], None, 8),
    ],
)
def test_codec_upstream_examples(values: list[int], width: int | None, length: int) -> None:
    encoded = encode_chunk_sizes(values)
    assert len(encoded) == length
    assert struct.unpack_from(">i", encoded)[0] == len(values)
    if width is not None:
        assert encoded[8] == width
        assert struct.unpack_from(">i", encoded, 4)[0] == min(values[:-1])
        assert struct.unpack_from(">i", encoded, len(encoded) - 4)[0] == values[-1]
    assert decode_chunk_sizes(encoded) == values


def test_worked_range_mapping() -> None:
    # §8: encryption only, original [150, 229] inclusive -> GETs [128, 255] and [256, 333].
    index = FixedChunkIndex(100, 250, 128, 78)
    chunks = index.chunks_for_range(150, 230)
    assert [c.id for c in chunks] == [1, 2]
    assert [(c.transformed_position, c.transformed_end - 1) for c in chunks] == [
        (128, 255),
        (256, 333),
    ]
    assert 150 - chunks[0].original_position == 50


def test_range_edges() -> None:
    index = FixedChunkIndex(100, 250, 100, 50)
    assert index.chunks_for_range(0, 0) == []
    assert index.chunks_for_range(99, 100) == [index.chunk(0)]
    assert index.chunks_for_range(99, 101) == [index.chunk(0), index.chunk(1)]
    assert index.chunks_for_range(249, 10**12) == [index.chunk(2)]
    assert index.chunks_for_range(250, 10**12) == []
    assert index.chunk_at(0) == index.chunk(0)
    assert index.chunk_at(249) == index.chunk(2)
    assert index.chunk_at(250) is None
    with pytest.raises(ValueError):
        index.chunks_for_range(-1, 5)
    with pytest.raises(ValueError):
        index.chunks_for_range(5, 4)
    with pytest.raises(ValueError):
        index.chunk_at(-1)
    with pytest.raises(IndexError):
        index.chunk(3)
    with pytest.raises(IndexError):
        index.chunk(-1)


def test_empty_segment() -> None:
    fixed = FixedChunkIndex(100, 0, 100, 0)
    assert fixed.chunk_count == 0
    assert fixed.chunks() == []
    assert fixed.chunks_for_range(0, 100) == []
    assert fixed.chunk_at(0) is None
    assert fixed.transformed_file_size == 0
    # Java needs a final entry in a variable index, even for an empty segment.
    variable = parse(
        '{"type":"variable","originalChunkSize":100,"originalFileSize":0,'
        f'"transformedChunks":"{encode_transformed_chunks([9])}"}}'
    )
    assert variable.chunks() == []
    assert variable.transformed_file_size == 0
    assert parse(variable.to_json()) == variable
    with pytest.raises(CorruptManifestError, match="needs 1"):
        parse(
            '{"type":"variable","originalChunkSize":100,"originalFileSize":0,'
            f'"transformedChunks":"{encode_transformed_chunks([])}"}}'
        )


def test_single_chunk_larger_than_segment() -> None:
    index = VariableChunkIndex(4 * 1024 * 1024, 10, [19])
    assert index.chunks() == [Chunk(0, 0, 10, 0, 19)]
    assert index.chunks_for_range(3, 5) == [Chunk(0, 0, 10, 0, 19)]


def test_equality_and_repr() -> None:
    a = VariableChunkIndex(10, 25, [1, 2, 3])
    assert a != VariableChunkIndex(10, 25, [1, 2, 4])
    assert a != FixedChunkIndex(10, 25, 1, 3)
    assert len({a, VariableChunkIndex(10, 25, [1, 2, 3])}) == 1
    assert repr(a) == "VariableChunkIndex(10, 25, [1, 2, 3])"
    assert "..." in repr(VariableChunkIndex(1, 20, range(20)))
    assert repr(FixedChunkIndex(1, 2, 3, 4)) == "FixedChunkIndex(1, 2, 3, 4)"


# --- the writer's builder --------------------------------------------------------------------


def test_builder_follows_the_plugin() -> None:
    # No transform: fixed, stored = original.
    assert build_chunk_index(100, [100, 100, 50], [100, 100, 50], compression=False) == (
        FixedChunkIndex(100, 250, 100, 50)
    )
    # Encryption only: +28 per chunk, also visible on a single chunk.
    assert build_chunk_index(100, [100, 100, 50], [128, 128, 78], compression=False) == (
        FixedChunkIndex(100, 250, 128, 78)
    )
    assert build_chunk_index(100, [7], [35], compression=False) == FixedChunkIndex(100, 7, 128, 35)
    # Compression (with or without encryption): variable, even if sizes happen to be equal.
    assert build_chunk_index(100, [100, 50], [60, 60], compression=True) == (
        VariableChunkIndex(100, 150, [60, 60])
    )
    # Empty segment: what the plugin writes for an untransformed empty file.
    assert build_chunk_index(100, [], [], compression=True) == FixedChunkIndex(100, 0, 100, 0)


@pytest.mark.parametrize(
    ("chunk", "original", "transformed", "compression"),
    [
        (100, [100, 50], [100], False),  # length mismatch
        (100, [90, 50], [90, 50], False),  # non-final chunk not full
        (100, [100, 0], [100, 0], False),  # empty final chunk
        (100, [100, 101], [100, 101], False),  # final chunk too big
        (100, [100, 50], [128, 50], False),  # inconsistent overhead
        (0, [], [], False),
        (100, [100, 50], [-1, 50], True),
        (100, [100, 50], [1 << 31, 50], True),
    ],
)
def test_builder_refuses_inconsistent_sizes(
    chunk: int, original: list[int], transformed: list[int], compression: bool
) -> None:
    with pytest.raises(ValueError):
        build_chunk_index(chunk, original, transformed, compression=compression)


# --- range mapping against brute force -------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn) -> tuple[ChunkIndex, list[int]]:
    """A random index plus the stored size of every chunk (brute-force reference)."""
    chunk = draw(st.one_of(st.just(1), st.integers(1, 40), st.integers(1000, 5000)))
    size = draw(st.integers(0, 400))
    n = -(-size // chunk)
    if draw(st.booleans()):
        sizes = draw(st.lists(st.integers(0, 300), min_size=max(n, 1), max_size=max(n, 1)))
        return VariableChunkIndex(chunk, size, sizes), sizes[:n]
    t = draw(st.integers(0, 300))
    final = draw(st.integers(0, 300))
    return FixedChunkIndex(chunk, size, t, final), [t] * (n - 1) + [final] * (n > 0)


def brute_chunks(index: ChunkIndex, stored: list[int]) -> list[Chunk]:
    chunks = []
    original = transformed = 0
    for i, t in enumerate(stored):
        size = min(index.original_chunk_size, index.original_file_size - original)
        chunks.append(Chunk(i, original, size, transformed, t))
        original += size
        transformed += t
    return chunks


def test_final_short_chunk_is_not_skipped() -> None:
    # Java's AbstractChunkIndex.chunksForRange steps from ``start`` by whole chunk sizes and so
    # misses a final chunk shorter than start's offset inside its chunk ([1, 2] -> chunk 0 only).
    index = FixedChunkIndex(2, 3, 2, 1)
    assert [c.id for c in index.chunks_for_range(1, 3)] == [0, 1]


@SETTINGS
@given(layout=layouts(), start=st.integers(0, 450), length=st.integers(0, 450))
def test_chunks_for_range_matches_brute_force(
    layout: tuple[ChunkIndex, list[int]], start: int, length: int
) -> None:
    index, stored = layout
    all_chunks = brute_chunks(index, stored)
    assert index.chunks() == all_chunks
    assert index.transformed_file_size == sum(stored)
    end = start + length
    expected = [c for c in all_chunks if c.original_position < end and start < c.original_end]
    got = index.chunks_for_range(start, end)
    assert got == (expected if length else [])
    at = index.chunk_at(start)
    assert at == next(
        (c for c in all_chunks if c.original_position <= start < c.original_end), None
    )
    # Covering: the chunks are contiguous and span the clipped range.
    if got:
        assert got[0].original_position <= start
        assert got[-1].original_end >= min(end, index.original_file_size)
        for a, b in itertools.pairwise(got):
            assert a.original_end == b.original_position
            assert a.transformed_end == b.transformed_position


def test_chunks_for_range_large_index_is_direct() -> None:
    rng = random.Random(7)
    sizes = [rng.randint(900, 1100) for _ in range(100_000)]
    index = VariableChunkIndex(1024, 1024 * 100_000, sizes)
    chunks = index.chunks_for_range(1024 * 77_777 + 5, 1024 * 77_779)
    assert [c.id for c in chunks] == [77_777, 77_778]
    assert chunks[0].transformed_position == sum(sizes[:77_777])


# --- round trips -----------------------------------------------------------------------------

SIZES = st.lists(
    st.one_of(st.integers(0, MAX), st.integers(0, 300), st.integers(MAX - 300, MAX)), max_size=60
)


@SETTINGS
@given(SIZES)
def test_codec_round_trip(values: list[int]) -> None:
    encoded = encode_chunk_sizes(values)
    assert decode_chunk_sizes(encoded) == values
    assert decode_transformed_chunks(encode_transformed_chunks(values)) == values


@SETTINGS
@given(SIZES, st.integers(0, 400))
def test_codec_matches_reference_encoder(values: list[int], _: int) -> None:
    """An independent, literal transcription of the §3.3 layout."""
    if len(values) < 2:
        ref = struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)
    else:
        body = values[:-1]
        base = min(body)
        width = max(
            1 if v - base <= 0xFF else 2 if v - base <= 0xFFFF else 3 if v - base <= 0xFFFFFF else 4
            for v in body
        )
        ref = struct.pack(">iiB", len(values), base, width)
        ref += b"".join((v - base).to_bytes(width, "big") for v in body)
        ref += struct.pack(">i", values[-1])
    assert encode_chunk_sizes(values) == ref


@SETTINGS
@given(layout=layouts())
def test_json_round_trip(layout: tuple[ChunkIndex, list[int]]) -> None:
    index, _ = layout
    text = index.to_json()
    again = parse(text)
    assert again == index
    assert again.to_json() == text
    assert json.loads(text)["type"] == index.type_name


# --- corruption ------------------------------------------------------------------------------


def variable_json(text: str, chunk: int = 100, size: int = 250) -> dict[str, object]:
    return {
        "type": "variable",
        "originalChunkSize": chunk,
        "originalFileSize": size,
        "transformedChunks": text,
    }


def zstd(payload: bytes, *, write_content_size: bool = True) -> str:
    cctx = zstandard.ZstdCompressor(write_content_size=write_content_size)
    return base64.b64encode(cctx.compress(payload)).decode()


def test_bomb_declared_over_cap() -> None:
    bomb = zstd(bytes(MAX_CHUNK_SIZES_BYTES + 1))
    assert len(bomb) < 2000
    with pytest.raises(CorruptManifestError, match=r"chunkIndex\.transformedChunks.*cap"):
        parse_chunk_index(variable_json(bomb))


def test_bomb_header_only() -> None:
    # Frame header declaring 2**40 bytes (single segment, 8-byte content size), no blocks.
    header = bytes.fromhex("28B52FFD E0") + (1 << 40).to_bytes(8, "little")
    with pytest.raises(CorruptManifestError, match="cap"):
        decode_transformed_chunks(base64.b64encode(header).decode())


@pytest.mark.parametrize(
    "text",
    [
        zstd(encode_chunk_sizes([10, 20, 30]), write_content_size=False),  # no declared size
        zstd(encode_chunk_sizes([10, 20, 30])) + "=",  # bad padding
        zstd(encode_chunk_sizes([10, 20, 30]))[:-4],  # truncated frame
        base64.b64encode(
            base64.b64decode(zstd(encode_chunk_sizes([1, 2, 3]))) * 2
        ).decode(),  # two frames
        base64.b64encode(base64.b64decode(zstd(encode_chunk_sizes([1, 2, 3]))) + b"\0").decode(),
        base64.b64encode(encode_chunk_sizes([1, 2, 3])).decode(),  # not zstd at all
        " " + zstd(encode_chunk_sizes([1, 2, 3])),
        zstd(b""),
        zstd(encode_chunk_sizes([1, 2])),  # 2 entries for 3 chunks
        zstd(encode_chunk_sizes([1, 2, 3, 4])),  # 4 entries for 3 chunks
        zstd(encode_chunk_sizes([1, 2, 3]) + b"\0"),  # trailing byte in the codec
        zstd(bytes.fromhex("FFFFFFFF")),  # negative count
        zstd(bytes.fromhex("00000003 00000000 05 00 00 00 00 00 00 00 00 00 00 00000001")),
        zstd(bytes.fromhex("00000003 00000000 00 00000001")),  # zero width
        zstd(bytes.fromhex("00000003 7FFFFFFF 01 01 01 00000001")),  # base + entry > int32
        zstd(bytes.fromhex("00000003 FFFFFFFF 01 00 01 00000001")),  # base + entry < 0
        zstd(bytes.fromhex("00000003 00000000 01 01 01 FFFFFFFF")),  # negative last
        zstd(bytes.fromhex("00000001 FFFFFFFF")),
        zstd(bytes.fromhex("00000001 00000001 00")),
        zstd(bytes.fromhex("00000000 00")),
        zstd(bytes.fromhex("000000")),
        zstd(bytes.fromhex("00000003 00000000")),
        zstd(bytes.fromhex("7FFFFFFF 00000000 04 00000001")),  # huge count, tiny body
    ],
)
def test_corrupt_transformed_chunks(text: str) -> None:
    with pytest.raises(CorruptManifestError, match=r"chunkIndex\.transformedChunks"):
        parse_chunk_index(variable_json(text))


def test_negative_base_with_valid_values_decodes() -> None:
    # Java computes base + entry without complaint when the result is a valid size.
    payload = bytes.fromhex("00000003 FFFFFFFF 01 0B 15 0000001E")
    index = parse_chunk_index(variable_json(zstd(payload)))
    assert isinstance(index, VariableChunkIndex)
    assert index.transformed_chunks == (10, 20, 30)


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ([], "chunkIndex"),
        (None, "chunkIndex"),
        ({}, "chunkIndex.type"),
        ({"type": "other"}, "chunkIndex.type"),
        ({"type": 1}, "chunkIndex.type"),
        ({**json.loads(FIXED_JSON), "extra": 1}, "chunkIndex.extra"),
        ({**json.loads(FIXED_JSON), "transformedChunks": "x"}, "chunkIndex.transformedChunks"),
        ({**json.loads(FIXED_JSON), "originalChunkSize": 0}, "chunkIndex.originalChunkSize"),
        ({**json.loads(FIXED_JSON), "originalChunkSize": "100"}, "chunkIndex.originalChunkSize"),
        ({**json.loads(FIXED_JSON), "originalChunkSize": 100.0}, "chunkIndex.originalChunkSize"),
        ({**json.loads(FIXED_JSON), "originalFileSize": -1}, "chunkIndex.originalFileSize"),
        ({**json.loads(FIXED_JSON), "originalFileSize": 1 << 31}, "chunkIndex.originalFileSize"),
        (
            {**json.loads(FIXED_JSON), "transformedChunkSize": True},
            "chunkIndex.transformedChunkSize",
        ),
        (
            {**json.loads(FIXED_JSON), "finalTransformedChunkSize": None},
            "finalTransformedChunkSize",
        ),
        (
            {k: v for k, v in json.loads(FIXED_JSON).items() if k != "finalTransformedChunkSize"},
            "chunkIndex.finalTransformedChunkSize",
        ),
        (
            {**json.loads(VARIABLE_JSON), "transformedChunks": [10, 20, 30]},
            "chunkIndex.transformedChunks",
        ),
        (
            {**json.loads(VARIABLE_JSON), "transformedChunkSize": 1},
            "chunkIndex.transformedChunkSize",
        ),
        (
            {k: v for k, v in json.loads(VARIABLE_JSON).items() if k != "transformedChunks"},
            "chunkIndex.transformedChunks",
        ),
    ],
)
def test_malformed_json(document: object, where: str) -> None:
    with pytest.raises(CorruptManifestError, match=where.replace(".", r"\.")):
        parse_chunk_index(document)


MUTATIONS = st.tuples(
    st.sampled_from(["flip", "delete", "insert", "truncate"]),
    st.integers(0, 10**6),
    st.integers(0, 255),
)


@SETTINGS
@given(values=SIZES, mutation=MUTATIONS)
def test_corrupted_codec_bytes(values: list[int], mutation: tuple[str, int, int]) -> None:
    data = mutate(encode_chunk_sizes(values), *mutation)
    try:
        decoded = decode_chunk_sizes(data)
    except CorruptManifestError:
        return
    assert decode_chunk_sizes(encode_chunk_sizes(decoded)) == decoded


@SETTINGS
@given(values=st.lists(st.integers(0, 5000), min_size=1, max_size=40), mutation=MUTATIONS)
def test_corrupted_transformed_chunks(values: list[int], mutation: tuple[str, int, int]) -> None:
    text = encode_transformed_chunks(values).encode()
    mutated = mutate(text, *mutation).decode("latin-1")
    document = variable_json(mutated, chunk=10, size=10 * len(values))
    try:
        index = parse_chunk_index(document)
    except CorruptManifestError:
        return
    assert parse(index.to_json()) == index


@SETTINGS
@given(st.binary(max_size=64))
def test_random_codec_bytes(data: bytes) -> None:
    try:
        decoded = decode_chunk_sizes(data)
    except CorruptManifestError:
        return
    assert all(0 <= v <= MAX for v in decoded)
