"""The durable default backend of the metadata manager: one SQLite table in WAL mode.

``kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID``: the primary key is a B-tree over the byte
keys, so point reads, prefix scans and floor lookups are index seeks, never table scans.
A transaction is ``BEGIN IMMEDIATE`` … ``COMMIT``; a nested one is a ``SAVEPOINT``; an
exception rolls back to where the block began. WAL with ``synchronous=NORMAL`` keeps a commit
durable against a process crash (a power cut may lose the last commits, never corrupt).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.errors import ConfigurationError
from gateway.metadata.backend import prefix_end

_SCHEMA = "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID"
_SCHEMA_VERSION = 1


class SQLiteBackend:
    """An ordered key-value backend in one SQLite file (``:memory:`` for a private one)."""

    in_memory = False  # reads are SQLite calls (I/O for a file), even for ``:memory:``

    def __init__(self, path: Path | str) -> None:
        self._path = str(path)
        try:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: transactions are explicit below.
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            elif version != _SCHEMA_VERSION:
                raise ConfigurationError(
                    f"metadata store {self._path} has schema version {version}; "
                    f"this gateway reads version {_SCHEMA_VERSION}"
                )
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"cannot open the metadata store {self._path}: {exc}") from exc
        self._conn = conn
        self._depth = 0
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self._path!r})"

    def get(self, key: bytes) -> bytes | None:
        row = self._conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, key: bytes, value: bytes) -> None:
        self._conn.execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (key, value))

    def delete(self, key: bytes) -> None:
        self._conn.execute("DELETE FROM kv WHERE k = ?", (key,))

    def scan(
        self, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        end = prefix_end(prefix)
        where = "k >= ?" if end is None else "k >= ? AND k < ?"
        args: tuple[bytes | int, ...] = (prefix,) if end is None else (prefix, end)
        order = "DESC" if reverse else "ASC"
        sql = f"SELECT k, v FROM kv WHERE {where} ORDER BY k {order}"
        if limit is not None:
            sql += " LIMIT ?"
            args = (*args, limit)
        return [(bytes(k), bytes(v)) for k, v in self._conn.execute(sql, args)]

    def floor(self, prefix: bytes, key: bytes) -> tuple[bytes, bytes] | None:
        row = self._conn.execute(
            "SELECT k, v FROM kv WHERE k <= ? AND k >= ? ORDER BY k DESC LIMIT 1", (key, prefix)
        ).fetchone()
        return None if row is None else (bytes(row[0]), bytes(row[1]))

    def delete_prefix(self, prefix: bytes) -> None:
        end = prefix_end(prefix)
        if end is None:
            self._conn.execute("DELETE FROM kv WHERE k >= ?", (prefix,))
        else:
            self._conn.execute("DELETE FROM kv WHERE k >= ? AND k < ?", (prefix, end))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            outer = self._depth == 0
            name = f"sp{self._depth}"
            self._conn.execute("BEGIN IMMEDIATE" if outer else f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    self._conn.execute("ROLLBACK")
                else:
                    self._conn.execute(f"ROLLBACK TO {name}")
                    self._conn.execute(f"RELEASE {name}")
                raise
            self._depth -= 1
            self._conn.execute("COMMIT" if outer else f"RELEASE {name}")

    def close(self) -> None:
        self._conn.close()
