"""The part of Kafka's ``AbstractIndex`` shared by the offset and time indexes (private).

A read-only index of fixed-size entries over a buffer (bytes, or a memoryview over an mmap):
``entries = len // entry_size`` as Kafka counts them for a file opened read-only, and the
length check both ``sanityCheck`` methods start with.
"""

from __future__ import annotations

from typing import ClassVar

from gateway.errors import CorruptIndexError
from gateway.kafka.ints import BytesLike, as_byte_buffer


class FixedEntryIndex:
    """Subclasses set ``ENTRY_SIZE`` and ``KIND`` and extend :meth:`sanity_check`."""

    ENTRY_SIZE: ClassVar[int]
    KIND: ClassVar[str]  # "offset index", "time index": for messages

    __slots__ = ("_base_offset", "_buf", "_entries")

    def __init__(self, buf: BytesLike, base_offset: int, *, check: bool = True) -> None:
        """Runs Kafka's sanity check (raising :class:`CorruptIndexError`) unless ``check`` is
        false; entries are then ``len(buf) // ENTRY_SIZE``, as Kafka counts them."""
        self._buf = as_byte_buffer(buf)
        self._base_offset = base_offset
        self._entries = len(self._buf) // self.ENTRY_SIZE
        if check:
            self.sanity_check()

    def sanity_check(self) -> None:
        """The length check every Kafka index sanity check starts with."""
        length = len(self._buf)
        if length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{self.KIND} is {length} bytes, which is not a multiple of the "
                f"{self.ENTRY_SIZE}-byte entry size"
            )

    @property
    def base_offset(self) -> int:
        """The base offset of the segment the index belongs to."""
        return self._base_offset

    @property
    def size_in_bytes(self) -> int:
        """Bytes covered by whole entries (Kafka's ``sizeInBytes``)."""
        return self._entries * self.ENTRY_SIZE

    def __len__(self) -> int:
        return self._entries

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_offset={self._base_offset}, entries={self._entries})"

    def _check_slot(self, n: int) -> None:
        if not 0 <= n < self._entries:
            raise IndexError(f"entry {n} is outside this {self.KIND} of {self._entries} entries")
