"""The storage seam of the metadata manager: an ordered key-value backend.

The manager keeps all of its state as byte keys in one sorted key space (the key factory in
:mod:`gateway.metadata.keys` makes lexicographic order equal numeric order), so a backend only
has to offer what an ordered map offers: point reads and writes, prefix scans in either
direction, and atomic transactions that nest (a nested transaction is a savepoint). Another
store (RocksDB, FoundationDB, a replicated log) is added by implementing this Protocol; the
manager does not change. Two backends ship: :class:`MemoryBackend` (tests, ephemeral runs) and
:class:`gateway.metadata.sqlite.SQLiteBackend` (the default, durable).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from sortedcontainers import SortedDict


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (``None``: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class KeyValueBackend(Protocol):
    """An ordered map of byte keys to byte values with nested atomic transactions.
    ``in_memory``: reads are plain memory lookups (no I/O), cheap enough for an event loop."""

    in_memory: bool

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def scan(
        self, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with ``prefix``, in key order (or reversed)."""
        ...

    def floor(self, prefix: bytes, key: bytes) -> tuple[bytes, bytes] | None:
        """The entry with the greatest key ``k`` such that ``prefix <= k <= key`` (``key``
        starts with ``prefix``, so ``k`` does too)."""
        ...

    def delete_prefix(self, prefix: bytes) -> None: ...

    def transaction(self) -> AbstractContextManager[None]:
        """All writes inside commit together or, when the block raises, none of them."""
        ...

    def close(self) -> None: ...


class MemoryBackend:
    """An in-process ordered map (``sortedcontainers.SortedDict``) with an undo log per
    transaction. Not thread-safe: the manager serialises calls."""

    in_memory = True

    def __init__(self) -> None:
        self._data: SortedDict[bytes, bytes] = SortedDict()
        self._undo: list[list[tuple[bytes, bytes | None]]] = []

    def __len__(self) -> int:
        return len(self._data)

    def _remember(self, key: bytes) -> None:
        if self._undo:
            self._undo[-1].append((key, self._data.get(key)))

    def get(self, key: bytes) -> bytes | None:
        found: bytes | None = self._data.get(key)
        return found

    def put(self, key: bytes, value: bytes) -> None:
        self._remember(key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if key in self._data:
            self._remember(key)
            del self._data[key]

    def _keys(self, prefix: bytes, reverse: bool) -> Iterator[bytes]:
        end = prefix_end(prefix)
        return iter(self._data.irange(prefix, end, inclusive=(True, False), reverse=reverse))

    def scan(
        self, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        for key in self._keys(prefix, reverse):
            if limit is not None and len(out) >= limit:
                break
            out.append((key, self._data[key]))
        return out

    def floor(self, prefix: bytes, key: bytes) -> tuple[bytes, bytes] | None:
        for found in self._data.irange(prefix, key, reverse=True):
            return found, self._data[found]
        return None

    def delete_prefix(self, prefix: bytes) -> None:
        for key in list(self._keys(prefix, False)):
            self.delete(key)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._undo.append([])
        try:
            yield
        except BaseException:
            for key, old in reversed(self._undo.pop()):
                if old is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = old
            raise
        done = self._undo.pop()
        if self._undo:  # nested: the outer transaction must be able to undo these too
            self._undo[-1].extend(done)

    def close(self) -> None:
        self._data.clear()
