"""The one byte-bounded LRU of the process's memory caches (the chunk cache and the index cache):
cachetools' ``LRUCache`` whose ``maxsize`` is a byte budget and whose item size is the entry's
weight, counting what it evicts to make room."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from cachetools import LRUCache

K = TypeVar("K")
V = TypeVar("V")


class ByteLRU(LRUCache[K, V]):
    """At most ``max_bytes`` of entries by ``weight``; :attr:`evictions` counts the entries
    dropped for room (``pop`` and ``del`` are not counted: they are invalidations)."""

    def __init__(self, max_bytes: int, weight: Callable[[V], int]) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=weight)
        self.evictions = 0

    def popitem(self) -> tuple[K, V]:
        # cachetools calls popitem only to make room
        item = super().popitem()
        self.evictions += 1
        return item
