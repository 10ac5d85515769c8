"""The ``transformedChunks`` value of a variable chunk index (spec §3): the stored size of every
chunk of a compressed segment. Mirrors ``io.aiven.kafka.tieredstorage.manifest.index.serde.
{ChunkSizesBinaryCodec, TransformedChunksSerializer, TransformedChunksDeserializer}``.

Chunk-size codec (``ChunkSizesBinaryCodec``), big-endian, values int32 >= 0::

    count 0    int32 count
    count 1    int32 count, int32 value
    count >=2  int32 count, int32 base, uint8 B, (count-1) x B-byte unsigned (v - base),
               int32 lastValue
    base = min of all values but the last; B in 1..4 = bytes needed for the largest v - base.

    [10, 20, 30] -> 00000003 0000000A 01 00 0A 0000001E

The ``transformedChunks`` JSON string is standard padded Base64 of ONE zstd frame (level 3,
content size in the header, no checksum) of those codec bytes, at most 10 MiB declared::

    [10, 20, 30] -> "KLUv/SAPeQAAAAAAAwAAAAoBAAoAAAAe"

Reading checks the zstd frame's declared size before anything is allocated (a bomb in a manifest
cannot take the process down) and decodes straight into the prefix-sum array of stored positions
(``[0, t_0, t_0 + t_1, ...]``, 8 bytes per chunk) that :class:`~gateway.remote.chunk_index.
VariableChunkIndex` keeps.
"""

from __future__ import annotations

import base64
import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate, chain
from typing import Final

import zstandard

from gateway.errors import CorruptManifestError
from gateway.kafka.ints import INT32_MAX, check_int
from gateway.remote._json import b64decode_standard

__all__ = [
    "MAX_CHUNK_SIZES_BYTES",
    "decode_chunk_sizes",
    "decode_transformed_chunks",
    "decode_transformed_positions",
    "encode_chunk_sizes",
    "encode_transformed_chunks",
]

MAX_CHUNK_SIZES_BYTES: Final = 10 * 1024 * 1024
"""``TransformedChunksDeserializer.MAX_DECOMPRESSED_SIZE``: cap on the codec payload."""

ZSTD_LEVEL: Final = 3
"""zstd-jni's default level, used by ``TransformedChunksSerializer``."""

_INT32: Final = struct.Struct(">i")
_HEAD: Final = struct.Struct(">iiB")  # count, base, bytes per value (count >= 2)
_COUNT_SIZE: Final = 4
_HEAD_SIZE: Final = _HEAD.size  # 9
_LAST_SIZE: Final = 4
_U32: Final = next(code for code in "IL" if array(code).itemsize == 4)
_SWAP: Final = sys.byteorder == "little"


def _bytes_needed(value: int) -> int:
    return 1 if value <= 0xFF else 2 if value <= 0xFFFF else 3 if value <= 0xFFFFFF else 4


def encode_chunk_sizes(values: Sequence[int]) -> bytes:
    """``ChunkSizesBinaryCodec.encode``; ``ValueError`` for a value outside int32 >= 0."""
    for v in values:
        check_int("chunk size", v, 0, INT32_MAX)
    count = len(values)
    if count == 0:
        return _INT32.pack(0)
    if count == 1:
        return _INT32.pack(1) + _INT32.pack(values[0])
    body = values[:-1]
    base = min(body)
    width = _bytes_needed(max(body) - base)
    entries = array(_U32, [v - base for v in body])
    if _SWAP:
        entries.byteswap()
    be = entries.tobytes()
    if width == 4:
        packed = be
    else:
        out = bytearray((count - 1) * width)
        for j in range(width):
            out[j::width] = be[4 - width + j :: 4]
        packed = bytes(out)
    return _HEAD.pack(count, base, width) + packed + _INT32.pack(values[-1])


def _corrupt_sizes(context: str, problem: str) -> CorruptManifestError:
    return CorruptManifestError(f"{context}: {problem}")


def _decode_positions(data: bytes, context: str) -> array[int]:
    """Decode the codec straight into the prefix-sum array ``[0, t_0, t_0 + t_1, ...]``."""
    if len(data) < _COUNT_SIZE:
        raise _corrupt_sizes(context, f"chunk-size list is {len(data)} bytes, shorter than 4")
    (count,) = _INT32.unpack_from(data, 0)
    if count < 0:
        raise _corrupt_sizes(context, f"chunk-size list has a negative count {count}")
    if count == 0:
        if len(data) != _COUNT_SIZE:
            raise _corrupt_sizes(context, f"{len(data) - 4} bytes after an empty chunk-size list")
        return array("q", [0])
    if count == 1:
        if len(data) != _COUNT_SIZE + _LAST_SIZE:
            raise _corrupt_sizes(context, f"one-entry chunk-size list is {len(data)} bytes, not 8")
        (value,) = _INT32.unpack_from(data, _COUNT_SIZE)
        if value < 0:
            raise _corrupt_sizes(context, f"chunk size {value} is negative")
        return array("q", [0, value])
    if len(data) < _HEAD_SIZE:
        raise _corrupt_sizes(context, f"chunk-size list is {len(data)} bytes, shorter than 9")
    _, base, width = _HEAD.unpack_from(data, 0)
    if not 1 <= width <= 4:
        raise _corrupt_sizes(context, f"bytes per value is {width}, not 1 to 4")
    k = count - 1
    expected = _HEAD_SIZE + k * width + _LAST_SIZE
    if len(data) != expected:
        raise _corrupt_sizes(
            context,
            f"chunk-size list of {count} entries at {width} bytes each needs {expected} bytes, "
            f"found {len(data)}",
        )
    body = memoryview(data)[_HEAD_SIZE : _HEAD_SIZE + k * width]
    if width == 4:
        wide: bytes | bytearray | memoryview = body
    else:
        wide = bytearray(4 * k)
        for j in range(width):
            wide[4 - width + j :: 4] = body[j::width]
    entries = array(_U32)
    entries.frombytes(wide)
    del wide
    if _SWAP:
        entries.byteswap()
    (last,) = _INT32.unpack_from(data, len(data) - _LAST_SIZE)
    if base + min(entries) < 0 or base + max(entries) > INT32_MAX or last < 0:
        raise _corrupt_sizes(context, "a chunk size is outside int32 >= 0")
    return array("q", accumulate(chain(map(base.__add__, entries), (last,)), initial=0))


def decode_chunk_sizes(
    data: bytes | bytearray | memoryview, context: str = "chunk sizes"
) -> list[int]:
    """``ChunkSizesBinaryCodec.decode``; :class:`CorruptManifestError` for malformed bytes.

    Stricter than Java on purpose: trailing bytes, a width outside 1..4 and values that do not
    fit int32 >= 0 are refused (Java would wrap or throw an unchecked exception).
    """
    positions = _decode_positions(bytes(data), context)
    return [positions[i + 1] - positions[i] for i in range(len(positions) - 1)]


def encode_transformed_chunks(values: Sequence[int]) -> str:
    """The ``transformedChunks`` string: codec -> one zstd frame (level 3, content size, no
    checksum) -> standard padded Base64 (``TransformedChunksSerializer``)."""
    payload = encode_chunk_sizes(values)
    if len(payload) > MAX_CHUNK_SIZES_BYTES:
        raise ValueError(
            f"chunk-size list encodes to {len(payload)} bytes, over {MAX_CHUNK_SIZES_BYTES}"
        )
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True, write_checksum=False)
    return base64.b64encode(cctx.compress(payload)).decode("ascii")


def _unwrap_transformed_chunks(text: str, context: str) -> bytes:
    """Base64 -> exactly one zstd frame with a declared size <= 10 MiB -> codec bytes."""
    try:
        frame = b64decode_standard(text)
    except ValueError as exc:
        raise _corrupt_sizes(context, str(exc)) from exc
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise _corrupt_sizes(context, f"not a zstd frame: {exc}") from exc
    if declared < 0:
        raise _corrupt_sizes(context, "zstd frame does not declare its content size")
    if declared > MAX_CHUNK_SIZES_BYTES:
        raise _corrupt_sizes(
            context, f"zstd frame declares {declared} bytes, over the {MAX_CHUNK_SIZES_BYTES} cap"
        )
    try:
        payload = zstandard.ZstdDecompressor().decompress(
            frame, max_output_size=max(declared, 1), allow_extra_data=False
        )
    except zstandard.ZstdError as exc:
        raise _corrupt_sizes(context, f"zstd frame is corrupt: {exc}") from exc
    if len(payload) != declared:  # pragma: no cover - libzstd checks the content size itself
        raise _corrupt_sizes(context, f"zstd frame declares {declared} bytes, holds {len(payload)}")
    return payload


def decode_transformed_chunks(text: str, context: str = "transformedChunks") -> list[int]:
    """Inverse of :func:`encode_transformed_chunks`; :class:`CorruptManifestError` when bad."""
    return decode_chunk_sizes(_unwrap_transformed_chunks(text, context), context)


def decode_transformed_positions(text: str, context: str = "transformedChunks") -> array[int]:
    """:func:`decode_transformed_chunks` as the prefix-sum array ``[0, t_0, t_0 + t_1, ...]``
    (int64) that :class:`~gateway.remote.chunk_index.VariableChunkIndex` keeps."""
    return _decode_positions(_unwrap_transformed_chunks(text, context), context)
