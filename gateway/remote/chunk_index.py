"""Chunk index of a ``.rsm-manifest``: where each chunk of the original segment sits in the ``.log``
object (spec §3). Mirrors ``io.aiven.kafka.tieredstorage.manifest.index.{AbstractChunkIndex,
FixedSizeChunkIndex, VariableSizeChunkIndex}``; the writer's builder is :mod:`.chunk_index_builder`.

The original segment (``originalFileSize`` bytes) is cut into ``n = ceil(size / chunk)`` chunks
of ``originalChunkSize`` bytes, the last one holding the remainder. Chunk ``i`` covers original
bytes ``[i*chunk, min((i+1)*chunk, size))`` and is stored, transformed, at ``t_0 + ... + t_(i-1)``
of the ``.log`` object (no framing). JSON forms (properties in this order, compact)::

    {"type":"fixed","originalChunkSize":100,"originalFileSize":250,
     "transformedChunkSize":110,"finalTransformedChunkSize":30}
        t_i = transformedChunkSize for i < n-1, t_(n-1) = finalTransformedChunkSize
        (no compression: no transform at all, or AES-GCM's constant +28 bytes per chunk)

    {"type":"variable","originalChunkSize":100,"originalFileSize":250,
     "transformedChunks":"KLUv/SAPeQAAAAAAAwAAAAoBAAoAAAAe"}
        one t_i per chunk: standard padded Base64 of ONE zstd frame (content size in the
        header, at most 10 MiB declared) of the big-endian chunk-size codec, both owned by
        ``chunk_sizes.py`` (compression on)

Reading: chunk ids come from the original position by division (original chunks all have the
same size), stored positions from a prefix-sum array: no scan. A decoded index costs 8 bytes per
chunk. Degenerate ``originalFileSize == 0``: no chunks (the Java code materializes one empty
chunk; here :meth:`ChunkIndex.chunks` is empty).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

from gateway.kafka.ints import INT32_MAX, check_int
from gateway.remote._json import JsonFields
from gateway.remote.chunk_sizes import decode_transformed_positions, encode_transformed_chunks

__all__ = [
    "Chunk",
    "ChunkIndex",
    "FixedChunkIndex",
    "VariableChunkIndex",
    "parse_chunk_index",
]


# --- value types -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: its original byte span in the segment and its stored span in the ``.log``."""

    id: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int

    @property
    def original_end(self) -> int:
        """First original byte after the chunk."""
        return self.original_position + self.original_size

    @property
    def transformed_end(self) -> int:
        """First stored byte after the chunk (exclusive end of its ranged GET)."""
        return self.transformed_position + self.transformed_size


class ChunkIndex:
    """Common read side of both index types (``AbstractChunkIndex``). Immutable."""

    __slots__ = ("_count", "_original_chunk_size", "_original_file_size")

    type_name: str = ""
    """The JSON ``type`` id."""

    def __init__(self, original_chunk_size: int, original_file_size: int) -> None:
        check_int("originalChunkSize", original_chunk_size, 1, INT32_MAX)
        check_int("originalFileSize", original_file_size, 0, INT32_MAX)
        self._original_chunk_size = original_chunk_size
        self._original_file_size = original_file_size
        self._count = -(-original_file_size // original_chunk_size)

    @property
    def original_chunk_size(self) -> int:
        return self._original_chunk_size

    @property
    def original_file_size(self) -> int:
        return self._original_file_size

    @property
    def chunk_count(self) -> int:
        """``ceil(originalFileSize / originalChunkSize)``; 0 for an empty segment."""
        return self._count

    @property
    def transformed_file_size(self) -> int:
        """Size of the ``.log`` object: the sum of all stored chunk sizes."""
        raise NotImplementedError

    def _stored(self, i: int) -> tuple[int, int]:
        """(stored position, stored size) of chunk ``i`` (``0 <= i < chunk_count``)."""
        raise NotImplementedError

    def to_json(self) -> str:
        """The compact JSON object, byte-identical to the plugin's."""
        raise NotImplementedError

    def chunk(self, i: int) -> Chunk:
        """Chunk ``i``; ``IndexError`` outside ``[0, chunk_count)``."""
        if not 0 <= i < self._count:
            raise IndexError(f"chunk {i} requested from an index of {self._count} chunks")
        size = self._original_chunk_size
        original_position = i * size
        if i == self._count - 1:
            size = self._original_file_size - original_position
        position, stored_size = self._stored(i)
        return Chunk(i, original_position, size, position, stored_size)

    def chunks(self) -> list[Chunk]:
        """Every chunk, in order."""
        return [self.chunk(i) for i in range(self._count)]

    def chunk_at(self, position: int) -> Chunk | None:
        """The chunk holding original byte ``position``; ``None`` past the end of the segment."""
        if position < 0:
            raise ValueError(f"position must be >= 0, not {position}")
        if position >= self._original_file_size:
            return None
        return self.chunk(position // self._original_chunk_size)

    def chunks_for_range(self, start: int, end_exclusive: int) -> list[Chunk]:
        """The chunks covering original bytes ``[start, end_exclusive)``, in order.

        The range is clipped to the segment, so an empty list means it lies past the end (or is
        empty). ``ValueError`` when ``start < 0`` or ``end_exclusive < start``.
        """
        if start < 0 or end_exclusive < start:
            raise ValueError(f"invalid byte range [{start}, {end_exclusive})")
        end = min(end_exclusive, self._original_file_size)
        if start >= end:
            return []
        first = start // self._original_chunk_size
        last = (end - 1) // self._original_chunk_size
        return [self.chunk(i) for i in range(first, last + 1)]


class FixedChunkIndex(ChunkIndex):
    """``"type":"fixed"``: every stored chunk but the last has the same size."""

    __slots__ = ("_final_transformed_chunk_size", "_transformed_chunk_size")

    type_name = "fixed"

    def __init__(
        self,
        original_chunk_size: int,
        original_file_size: int,
        transformed_chunk_size: int,
        final_transformed_chunk_size: int,
    ) -> None:
        super().__init__(original_chunk_size, original_file_size)
        check_int("transformedChunkSize", transformed_chunk_size, 0, INT32_MAX)
        check_int("finalTransformedChunkSize", final_transformed_chunk_size, 0, INT32_MAX)
        self._transformed_chunk_size = transformed_chunk_size
        self._final_transformed_chunk_size = final_transformed_chunk_size

    @property
    def transformed_chunk_size(self) -> int:
        return self._transformed_chunk_size

    @property
    def final_transformed_chunk_size(self) -> int:
        return self._final_transformed_chunk_size

    @property
    def transformed_file_size(self) -> int:
        if self._count == 0:
            return 0
        return (self._count - 1) * self._transformed_chunk_size + self._final_transformed_chunk_size

    def _stored(self, i: int) -> tuple[int, int]:
        last = i == self._count - 1
        size = self._final_transformed_chunk_size if last else self._transformed_chunk_size
        return i * self._transformed_chunk_size, size

    def to_json(self) -> str:
        return (
            f'{{"type":"fixed","originalChunkSize":{self._original_chunk_size},'
            f'"originalFileSize":{self._original_file_size},'
            f'"transformedChunkSize":{self._transformed_chunk_size},'
            f'"finalTransformedChunkSize":{self._final_transformed_chunk_size}}}'
        )

    def _key(self) -> tuple[int, int, int, int]:
        return (
            self._original_chunk_size,
            self._original_file_size,
            self._transformed_chunk_size,
            self._final_transformed_chunk_size,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FixedChunkIndex):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("fixed", *self._key()))

    def __repr__(self) -> str:
        return "FixedChunkIndex({}, {}, {}, {})".format(*self._key())


class VariableChunkIndex(ChunkIndex):
    """``"type":"variable"``: one stored size per chunk (compressed chunks).

    ``transformed_chunks`` has one entry per chunk; for an empty segment exactly one entry (the
    Java reader needs a final one). Stored internally as an int64 prefix-sum array.
    """

    __slots__ = ("_positions",)

    type_name = "variable"

    def __init__(
        self,
        original_chunk_size: int,
        original_file_size: int,
        transformed_chunks: Iterable[int],
    ) -> None:
        super().__init__(original_chunk_size, original_file_size)
        sizes = array("q")
        try:
            sizes.extend(transformed_chunks)
        except (TypeError, OverflowError) as exc:
            raise ValueError(f"transformedChunks must be int32 values >= 0: {exc}") from None
        if sizes and not (min(sizes) >= 0 and max(sizes) <= INT32_MAX):
            raise ValueError("transformedChunks must be int32 values >= 0")
        self._positions = array("q", accumulate(sizes, initial=0))
        self._check_count()

    @classmethod
    def _from_positions(
        cls, original_chunk_size: int, original_file_size: int, positions: array[int]
    ) -> VariableChunkIndex:
        self = cls.__new__(cls)
        ChunkIndex.__init__(self, original_chunk_size, original_file_size)
        self._positions = positions
        self._check_count()
        return self

    def _check_count(self) -> None:
        entries = len(self._positions) - 1
        expected = max(self._count, 1)
        if entries != expected:
            raise ValueError(
                f"transformedChunks has {entries} entries, but originalFileSize "
                f"{self._original_file_size} / originalChunkSize {self._original_chunk_size} "
                f"needs {expected}"
            )

    @property
    def transformed_chunks(self) -> tuple[int, ...]:
        """The stored size of every chunk, in order."""
        pos = self._positions
        return tuple(pos[i + 1] - pos[i] for i in range(len(pos) - 1))

    @property
    def transformed_file_size(self) -> int:
        return self._positions[self._count] if self._count else 0

    def _stored(self, i: int) -> tuple[int, int]:
        position = self._positions[i]
        return position, self._positions[i + 1] - position

    def to_json(self) -> str:
        return (
            f'{{"type":"variable","originalChunkSize":{self._original_chunk_size},'
            f'"originalFileSize":{self._original_file_size},'
            f'"transformedChunks":"{encode_transformed_chunks(self.transformed_chunks)}"}}'
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VariableChunkIndex):
            return NotImplemented
        return (
            self._original_chunk_size == other._original_chunk_size
            and self._original_file_size == other._original_file_size
            and self._positions == other._positions
        )

    def __hash__(self) -> int:
        return hash(
            (
                "variable",
                self._original_chunk_size,
                self._original_file_size,
                self._positions.tobytes(),
            )
        )

    def __repr__(self) -> str:
        entries = len(self._positions) - 1
        shown = ", ".join(map(str, self.transformed_chunks[:8])) + (", ..." if entries > 8 else "")
        return (
            f"VariableChunkIndex({self._original_chunk_size}, {self._original_file_size}, "
            f"[{shown}])"
        )


# --- JSON ------------------------------------------------------------------------------------

_FIXED_PROPERTIES: Final = (
    "type",
    "originalChunkSize",
    "originalFileSize",
    "transformedChunkSize",
    "finalTransformedChunkSize",
)
_VARIABLE_PROPERTIES: Final = ("type", "originalChunkSize", "originalFileSize", "transformedChunks")


def parse_chunk_index(value: object, path: str = "chunkIndex", context: str = "") -> ChunkIndex:
    """Read the decoded JSON value of a ``chunkIndex`` (:class:`CorruptManifestError`)."""
    fields = JsonFields(value, path, context)
    kind = fields.string("type")
    if kind == "fixed":
        fields.only(*_FIXED_PROPERTIES)
        chunk_size = fields.int32("originalChunkSize", 1)
        file_size = fields.int32("originalFileSize")
        return FixedChunkIndex(
            chunk_size,
            file_size,
            fields.int32("transformedChunkSize"),
            fields.int32("finalTransformedChunkSize"),
        )
    if kind == "variable":
        fields.only(*_VARIABLE_PROPERTIES)
        chunk_size = fields.int32("originalChunkSize", 1)
        file_size = fields.int32("originalFileSize")
        where = fields.where("transformedChunks")
        text = fields.string("transformedChunks")
        positions = decode_transformed_positions(text, context + where)
        try:
            return VariableChunkIndex._from_positions(chunk_size, file_size, positions)
        except ValueError as exc:
            raise fields.error(str(exc), "transformedChunks") from exc
    raise fields.error(
        f"unknown chunk index type {kind!r} (expected 'fixed' or 'variable')", "type"
    )
