"""How the disk tiers share one directory between the worker processes of one server.

``serve --workers N`` runs N processes that use the same ``--index-cache-dir`` and
``--chunk-cache-dir``. Each file is written under a temporary name and renamed into place, and
a reader reads a file whole (a file unlinked meanwhile stays readable until closed), so
processes never see half a file. What needs care is the accounting of the byte bound, which
each process keeps in memory:

* each worker accounts for (and evicts) the files it writes, bounded by ``1/N`` of the
  directory's budget (:meth:`DiskShare.budget`), so the directory never exceeds the budget;
* at start a worker adopts the files whose name hashes to its index (a stable CRC-32), plus
  every file modified since the server started (:attr:`DiskShare.since`: those a worker that
  died and is being replaced wrote); counting a file twice only makes the bound stricter;
* a worker reads the files of its siblings too (a miss of its own books looks on disk);
* the start of one worker must not delete what a live sibling is writing: a ``.tmp`` name
  carries its writer's pid (:func:`tmp_name`) and only the temporaries of dead writers (or
  older than :data:`TMP_MAX_AGE_S`) are removed (:func:`stale_tmp`).

One process (``count == 1``, the default) keeps the single-process behaviour exactly.
:func:`set_current` is called once by a worker before it opens its service; the tiers take
:func:`current` unless handed a share.
"""

from __future__ import annotations

import os
import secrets
import zlib
from dataclasses import dataclass
from typing import Final

TMP_SUFFIX: Final = ".tmp"
TMP_MAX_AGE_S: Final = 3600.0
"""A temporary file older than this is a leftover whatever its pid says (pids are reused)."""
INCOMPLETE_GRACE_S: Final = 60.0
"""With siblings, a partial index set younger than this may be one being written: kept."""


@dataclass(frozen=True, slots=True)
class DiskShare:
    """The part of a shared disk-cache directory one process accounts for."""

    index: int = 0
    count: int = 1
    since: float = 0.0
    """When the server started (``time.time()``): files modified since are adopted."""

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"worker {self.index} of {self.count}: not a valid share")

    @property
    def shared(self) -> bool:
        return self.count > 1

    def budget(self, total: int) -> int:
        """This process's part of a directory budget of ``total`` bytes (at least 1 when
        ``total`` is positive)."""
        return max(1, total // self.count) if total > 0 else total

    def adopts(self, name: str, mtime: float) -> bool:
        """Whether this process accounts for the file (or index set) ``name`` found at start."""
        if not self.shared or mtime >= self.since:
            return True
        return zlib.crc32(name.encode()) % self.count == self.index


_current = DiskShare()


def current() -> DiskShare:
    """The share of this process (one process: the whole directory)."""
    return _current


def set_current(share: DiskShare) -> None:
    """Declare this process a worker of a server sharing its disk tiers (before they open)."""
    global _current  # noqa: PLW0603 - one fact about the process, set once before the service
    _current = share


def tmp_name(final_name: str) -> str:
    """A unique temporary name beside ``final_name``, naming this process."""
    return f"{final_name}.{os.getpid()}-{secrets.token_hex(6)}{TMP_SUFFIX}"


def stale_tmp(name: str, mtime: float, now: float) -> bool:
    """Whether the temporary file ``name`` is a leftover: its writer is gone (or is this very
    process, which writes nothing before it opens), or it is older than an hour."""
    if now - mtime > TMP_MAX_AGE_S:
        return True
    tag = name.removesuffix(TMP_SUFFIX).rpartition(".")[2]
    pid_text, dash, _ = tag.partition("-")
    if not dash or not pid_text.isdigit():
        return True  # not named by tmp_name: an older version's leftover
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False
