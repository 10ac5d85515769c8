"""The optional disk tier of the index cache: Kafka's ``remote-log-index-cache`` directory.

Mirrors the file layout of ``org.apache.kafka.storage.internals.log.RemoteIndexCache``
(``remote-read-semantics.md`` §13), one file per index, named by the segment's start offset
(plain decimal) and id::

    <startOffset>_<segmentId>.index                    offset index bytes
    <startOffset>_<segmentId>.timeindex                time index bytes
    <startOffset>_<segmentId>.txnindex                 transaction index bytes (empty if none)
    <startOffset>_<segmentId>.leader-epoch-checkpoint  leader-epoch checkpoint text

The content is the loader's bytes, unchanged. Each file is written under a unique
``<name>.<token>.tmp`` name, optionally fsynced, and renamed into place with ``os.replace``;
the ``.index`` file is renamed last and removed first, so a set without it is incomplete.

Start (:meth:`DiskTier.open`): every ``*.tmp`` and ``*.deleted`` leftover is removed (the file
*name* is compared; Kafka 3.6 to 3.9 compared whole path elements with ``Path.endsWith`` and so
never removed them), a set missing any of its four files is removed (as Kafka does), and every
complete set is read and sanity-checked (``kafka-formats.md`` §10); a set that fails is removed
and will be fetched again. Files not named like cache files are left alone, but the directory
should be dedicated to the cache.

Unlike Kafka, disk usage has its own byte bound: when a write would exceed it, the least
recently used sets (by last read or write; the ``.index`` file's mtime carries this across
restarts) are removed. A reader never holds a file open: entries are read into memory, so
removing files never breaks a reader.

The worker processes of ``serve --workers N`` share the directory (:mod:`indexcache.share`):
each accounts for the sets it writes within ``1/N`` of the bound, adopts its hash share of the
sets found at start, reads its siblings' sets too, and at start leaves alone the ``.tmp`` files
of live writers and the partial sets younger than a minute (a sibling may be renaming them
into place); a set that fails its check is still removed.

Every method does blocking file I/O and is meant to run in a worker thread; the bookkeeping is
guarded by a lock, so several threads may use one tier.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.errors import CorruptDataError
from indexcache.segment import SegmentIndexBytes, SegmentIndexes, SegmentKey
from indexcache.share import INCOMPLETE_GRACE_S, DiskShare, current, stale_tmp, tmp_name

__all__ = [
    "DELETED_SUFFIX",
    "SUFFIXES",
    "TMP_SUFFIX",
    "DiskScan",
    "DiskStats",
    "DiskTier",
]

_log = logging.getLogger(__name__)

SUFFIXES: Final = (".txnindex", ".timeindex", ".leader-epoch-checkpoint", ".index")
"""The four files of a set, in the order they are renamed into place (``.index`` last)."""

TMP_SUFFIX: Final = ".tmp"
DELETED_SUFFIX: Final = ".deleted"


@dataclass(frozen=True, slots=True)
class DiskScan:
    """What :meth:`DiskTier.open` found."""

    kept: int
    leftovers_removed: int
    incomplete_removed: int
    corrupt_removed: int
    over_limit_removed: int


@dataclass(frozen=True, slots=True)
class DiskStats:
    """A snapshot of the disk tier's counters."""

    entries: int
    bytes: int
    evictions: int
    corrupt_removed: int
    write_failures: int


def _parts(raw: SegmentIndexBytes) -> tuple[bytes, bytes, bytes, bytes]:
    """The file contents in :data:`SUFFIXES` order."""
    return (raw.txn if raw.txn is not None else b"", raw.time, raw.leader_epoch, raw.offset)


def _mtime(item: os.DirEntry[str]) -> float:
    try:
        return item.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return 0.0  # renamed or removed by its writer meanwhile


def _split_name(name: str) -> tuple[SegmentKey, str] | None:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            key = SegmentKey.from_file_stem(name[: -len(suffix)])
            return None if key is None else (key, suffix)
    return None


class DiskTier:
    """Index sets on disk under ``directory``, bounded by ``max_bytes`` of file content (all
    the processes of ``share`` together; default: :func:`indexcache.share.current`)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_bytes: int,
        *,
        fsync: bool = False,
        share: DiskShare | None = None,
    ):
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self._dir = Path(directory)
        self._share = share if share is not None else current()
        self._max_bytes = self._share.budget(max_bytes)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._sets: OrderedDict[SegmentKey, int] = OrderedDict()  # LRU first; value: bytes
        self._bytes = 0
        self._evictions = 0
        self._corrupt = 0
        self._write_failures = 0

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def _path(self, key: SegmentKey, suffix: str) -> Path:
        return self._dir / (key.file_stem + suffix)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._sets

    def __len__(self) -> int:
        with self._lock:
            return len(self._sets)

    def stats(self) -> DiskStats:
        """The counters, read without the lock (safe to call on the event loop; a snapshot
        taken while another thread writes may mix before and after)."""
        return DiskStats(
            entries=len(self._sets),
            bytes=self._bytes,
            evictions=self._evictions,
            corrupt_removed=self._corrupt,
            write_failures=self._write_failures,
        )

    def keys(self) -> list[SegmentKey]:
        """The keys on disk, least recently used first."""
        with self._lock:
            return list(self._sets)

    # --- start ------------------------------------------------------------------------------

    def open(self) -> DiskScan:
        """Create the directory if needed, remove leftovers and bad sets, register the rest
        (with sibling workers: this worker's share)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        leftovers = 0
        groups: dict[SegmentKey, set[str]] = {}
        shared, now = self._share.shared, time.time()
        with os.scandir(self._dir) as listing:
            for item in listing:
                if not item.is_file(follow_symlinks=False):
                    continue
                if item.name.endswith(TMP_SUFFIX) and shared:
                    if stale_tmp(item.name, _mtime(item), now):
                        self._unlink(Path(item.path))
                        leftovers += 1
                elif item.name.endswith((TMP_SUFFIX, DELETED_SUFFIX)):
                    self._unlink(Path(item.path))
                    leftovers += 1
                elif (split := _split_name(item.name)) is not None:
                    groups.setdefault(split[0], set()).add(split[1])
        incomplete = corrupt = 0
        found: list[tuple[float, SegmentKey, int]] = []
        for key, suffixes in groups.items():
            if len(suffixes) != len(SUFFIXES):
                if not shared or now - self._newest_mtime(key) > INCOMPLETE_GRACE_S:
                    self._unlink_set(key)
                    incomplete += 1
                continue
            try:
                mtime = self._path(key, ".index").stat().st_mtime
            except OSError:
                mtime = 0.0
            if not self._share.adopts(key.file_stem, mtime):
                continue  # a sibling's share: checked when read
            entry = self._read_checked(key)
            if entry is None:
                corrupt += 1
                continue
            found.append((mtime, key, entry.weight))
        found.sort(key=lambda item: item[0])
        with self._lock:
            self._sets.clear()
            self._bytes = 0
            for _, key, size in found:
                self._sets[key] = size
                self._bytes += size
            before = self._evictions
            self._evict_locked(keep=None)
            over_limit = self._evictions - before
            kept = len(self._sets)
        return DiskScan(kept, leftovers, incomplete, corrupt, over_limit)

    # --- read, write, remove -------------------------------------------------------------------

    def read(self, key: SegmentKey) -> SegmentIndexes | None:
        """The checked entry stored for ``key``; ``None`` when there is none or its files fail
        the sanity check (they are then removed, so the caller fetches them again). With sibling
        workers, a key this worker did not write is looked for on disk too."""
        with self._lock:
            if key in self._sets:
                self._sets.move_to_end(key)
            elif not self._share.shared or not self._path(key, ".index").exists():
                return None
        entry = self._read_checked(key)
        if entry is None:
            self.remove(key)
            return None
        with contextlib.suppress(OSError):
            os.utime(self._path(key, ".index"))  # recency survives a restart
        return entry

    def _read_checked(self, key: SegmentKey) -> SegmentIndexes | None:
        try:
            txn, time, epoch, offset = (self._path(key, s).read_bytes() for s in SUFFIXES)
        except OSError as exc:
            _log.warning("index cache: cannot read %s from %s: %s", key, self._dir, exc)
            self._unlink_set(key)
            return None
        try:
            return SegmentIndexes(
                SegmentIndexBytes(key.start_offset, offset, time, epoch, txn if txn else None)
            )
        except CorruptDataError as exc:
            _log.warning("index cache: dropping corrupt files of %s: %s", key, exc)
            with self._lock:
                self._corrupt += 1
            self._unlink_set(key)
            return None

    def write(self, key: SegmentKey, raw: SegmentIndexBytes) -> bool:
        """Store ``raw`` for ``key`` (replacing what is there) and evict down to the bound.

        Returns ``False`` without writing when the set alone exceeds the bound, and on an
        ``OSError`` (counted, logged, temporary files removed): the disk tier is an
        optimisation, never a reason for a read to fail.
        """
        size = raw.size
        if size > self._max_bytes:
            return False
        temps: list[tuple[Path, Path]] = []
        try:
            for suffix, data in zip(SUFFIXES, _parts(raw), strict=True):
                final = self._path(key, suffix)
                temp = final.with_name(tmp_name(final.name))
                temps.append((temp, final))
                with open(temp, "wb") as out:
                    out.write(data)
                    if self._fsync:
                        out.flush()
                        os.fsync(out.fileno())
            with self._lock:
                for temp, final in temps:
                    os.replace(temp, final)
                self._bytes += size - self._sets.pop(key, 0)
                self._sets[key] = size
                self._evict_locked(keep=key)
            if self._fsync:
                self._fsync_dir()
        except OSError as exc:
            _log.warning("index cache: cannot write %s to %s: %s", key, self._dir, exc)
            with self._lock:
                self._write_failures += 1
            for temp, _ in temps:
                self._unlink(temp)
            return False
        return True

    def remove(self, key: SegmentKey) -> bool:
        """Remove ``key``'s files; ``False`` when it was not registered."""
        with self._lock:
            size = self._sets.pop(key, None)
            if size is not None:
                self._bytes -= size
            self._unlink_set(key)
        return size is not None

    def _evict_locked(self, keep: SegmentKey | None) -> None:
        while self._bytes > self._max_bytes and self._sets:
            victim, size = next(iter(self._sets.items()))
            if victim == keep:
                break  # cannot happen: a set larger than the bound is never written
            del self._sets[victim]
            self._bytes -= size
            self._evictions += 1
            self._unlink_set(victim)

    def _newest_mtime(self, key: SegmentKey) -> float:
        newest = 0.0
        for suffix in SUFFIXES:
            with contextlib.suppress(OSError):
                newest = max(newest, self._path(key, suffix).stat().st_mtime)
        return newest

    def _unlink_set(self, key: SegmentKey) -> None:
        for suffix in reversed(SUFFIXES):  # .index first: the set is incomplete from then on
            self._unlink(self._path(key, suffix))

    def _unlink(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            _log.warning("index cache: cannot remove %s: %s", path, exc)

    def _fsync_dir(self) -> None:
        fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
