"""The chunk index a writer builds for the chunks it stored (spec §3). Mirrors
``io.aiven.kafka.tieredstorage.manifest.index.{Fixed,Variable}SizeChunkIndexBuilder`` as the
plugin's ``TransformFinisher`` drives them.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.kafka.ints import INT32_MAX, check_int
from gateway.remote.chunk_index import ChunkIndex, FixedChunkIndex, VariableChunkIndex

__all__ = ["build_chunk_index"]


def build_chunk_index(
    original_chunk_size: int,
    original_sizes: Sequence[int],
    transformed_sizes: Sequence[int],
    *,
    compression: bool,
) -> ChunkIndex:
    """The index the plugin's ``TransformFinisher`` builds for chunks written with these sizes.

    ``original_sizes``: the plaintext size of each chunk (all ``original_chunk_size`` but the
    last, which is 1..``original_chunk_size``); ``transformed_sizes``: each stored size.
    Variable iff ``compression`` (compressed sizes are unpredictable); otherwise fixed, with
    ``transformedChunkSize`` = ``original_chunk_size`` + the constant per-chunk overhead of the
    last chunk (0 untransformed, 28 encrypted), which every other chunk must show too.
    An empty segment gets ``fixed(chunk, 0, chunk, 0)``: what the plugin writes for an
    untransformed empty file (it fails on an empty file with a transform; any flags read fine).
    ``ValueError`` for inconsistent input.
    """
    check_int("original chunk size", original_chunk_size, 1, INT32_MAX)
    if len(original_sizes) != len(transformed_sizes):
        raise ValueError(
            f"{len(original_sizes)} original sizes but {len(transformed_sizes)} transformed sizes"
        )
    n = len(original_sizes)
    if n == 0:
        return FixedChunkIndex(original_chunk_size, 0, original_chunk_size, 0)
    if any(size != original_chunk_size for size in original_sizes[:-1]) or not (
        1 <= original_sizes[-1] <= original_chunk_size
    ):
        raise ValueError(
            f"original chunks must all be {original_chunk_size} bytes but the last, which must "
            "be 1 byte or more"
        )
    file_size = (n - 1) * original_chunk_size + original_sizes[-1]
    if compression:
        return VariableChunkIndex(original_chunk_size, file_size, transformed_sizes)
    overhead = transformed_sizes[-1] - original_sizes[-1]
    stored_chunk_size = original_chunk_size + overhead
    if any(size != stored_chunk_size for size in transformed_sizes[:-1]):
        raise ValueError(
            f"without compression every stored chunk but the last must be {stored_chunk_size} "
            "bytes (chunk size + the last chunk's overhead)"
        )
    return FixedChunkIndex(original_chunk_size, file_size, stored_chunk_size, transformed_sizes[-1])
