"""The optional disk tier of the decoded-chunk cache: chunks that memory evicted, kept on local
disk so a restart or a wide working set does not go back to the bucket.

One file per chunk, ``<segment uuid hex>-<chunk id>.chunk``, in one dedicated directory (a
block of an untransformed segment has the id ``~offset``, a negative number, see
:mod:`gateway.cache.chunks`)::

    magic "TGC1" (4 bytes) | crc32c of the chunk (uint32 BE) | chunk length (uint32 BE) | chunk

Files are written under a unique ``.tmp`` name (mode 0600) and renamed into place, so a reader
never sees half a file; a file whose header, length or checksum does not hold (a torn write, a
bad disk) is removed and the chunk fetched again: the disk never serves wrong bytes either.
The tier is bounded by ``max_bytes`` of file content and evicts least recently used first (the
order across restarts is the files' mtimes). Chunks are *decoded*: decrypted bytes of encrypted
segments land on this disk, so the directory is created 0700 and the tier is off by default.

The worker processes of ``serve --workers N`` share the directory (:mod:`indexcache.share`):
each accounts for the files it writes within ``1/N`` of the bound, adopts its hash share of the
files found at start, reads its siblings' files too (a file a sibling evicts meanwhile is still
read whole: it stays readable while open), and removes only the ``.tmp`` leftovers of writers
that are gone.

Every method does blocking file I/O and runs in a worker thread; the bookkeeping is guarded by
a lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c

from indexcache.share import DiskShare, current, stale_tmp, tmp_name

log = logging.getLogger(__name__)

ChunkKey = tuple[uuid.UUID, int]
_HEADER: Final = struct.Struct(">4sII")
_MAGIC: Final = b"TGC1"
SUFFIX: Final = ".chunk"
TMP_SUFFIX: Final = ".tmp"


@dataclass(frozen=True, slots=True)
class ChunkDiskStats:
    entries: int
    bytes: int
    hits: int
    misses: int
    evictions: int
    corrupt_removed: int
    write_failures: int


def _name(key: ChunkKey) -> str:
    return f"{key[0].hex}-{key[1]}{SUFFIX}"


def _mtime(item: os.DirEntry[str]) -> float:
    try:
        return item.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return 0.0  # renamed or removed by its writer meanwhile


def _parse_name(name: str) -> ChunkKey | None:
    if not name.endswith(SUFFIX):
        return None
    sid, _, cid = name[: -len(SUFFIX)].partition("-")
    try:
        return uuid.UUID(hex=sid), int(cid)
    except ValueError:
        return None


class ChunkDiskTier:
    """Decoded chunks on disk under ``directory``, bounded by ``max_bytes`` (all the processes
    of ``share`` together; default: :func:`indexcache.share.current`)."""

    def __init__(
        self, directory: str | os.PathLike[str], max_bytes: int, *, share: DiskShare | None = None
    ) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self._dir = Path(directory)
        self._share = share if share is not None else current()
        self._max_bytes = self._share.budget(max_bytes)
        self._lock = threading.Lock()
        self._files: OrderedDict[ChunkKey, int] = OrderedDict()  # LRU first; value: file size
        self._generations: dict[uuid.UUID, int] = {}  # bumped by drop_segment
        self._bytes = 0
        self._hits = self._misses = self._evictions = self._corrupt = self._write_failures = 0

    def stats(self) -> ChunkDiskStats:
        return ChunkDiskStats(
            len(self._files), self._bytes, self._hits, self._misses, self._evictions,
            self._corrupt, self._write_failures,
        )  # fmt: skip

    def open(self) -> int:
        """Create the directory (0700), drop ``.tmp`` leftovers, register the chunk files
        (oldest first; with sibling workers, this worker's share), evict beyond the bound.
        Returns how many chunks were kept."""
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        found: list[tuple[float, ChunkKey, int]] = []
        share, now = self._share, time.time()
        with os.scandir(self._dir) as listing:
            for item in listing:
                if not item.is_file(follow_symlinks=False):
                    continue
                if item.name.endswith(TMP_SUFFIX):
                    if not share.shared or stale_tmp(item.name, _mtime(item), now):
                        self._unlink(Path(item.path))
                elif (key := _parse_name(item.name)) is not None:
                    with contextlib.suppress(FileNotFoundError):  # a sibling evicted it
                        st = item.stat(follow_symlinks=False)
                        if share.adopts(item.name, st.st_mtime):
                            found.append((st.st_mtime, key, st.st_size))
        found.sort(key=lambda f: f[0])
        with self._lock:
            self._files.clear()
            self._bytes = 0
            for _, key, size in found:
                self._files[key] = size
                self._bytes += size
            doomed = self._evict_locked()
            kept = len(self._files)
        for path in doomed:
            self._unlink(path)
        return kept

    def read(self, key: ChunkKey) -> bytes | None:
        """The chunk stored for ``key``, checked; ``None`` when absent or bad (then removed).
        With sibling workers, a key this worker did not write is looked for on disk too."""
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
            elif not self._share.shared:
                self._misses += 1
                return None
        path = self._dir / _name(key)
        try:
            data = path.read_bytes()
        except OSError:
            self._forget(key)
            self._misses += 1
            return None
        chunk = self._checked(data)
        if chunk is None:
            log.warning("chunk file %s failed its check; removed, the chunk is fetched again", path)
            self._forget(key)
            self._unlink(path)
            self._corrupt += 1
            self._misses += 1
            return None
        self._hits += 1
        return chunk

    @staticmethod
    def _checked(data: bytes) -> bytes | None:
        if len(data) < _HEADER.size:
            return None
        magic, crc, length = _HEADER.unpack_from(data)
        chunk = data[_HEADER.size :]
        if magic != _MAGIC or length != len(chunk) or crc32c.crc32c(chunk) != crc:
            return None
        return chunk

    def generation(self, segment_id: uuid.UUID) -> int:
        """Taken when a chunk is fetched, handed to :meth:`write`: a :meth:`drop_segment` in
        between (the bytes failed a check) makes that write a no-op."""
        with self._lock:
            return self._generations.get(segment_id, 0)

    def write(self, key: ChunkKey, chunk: bytes, generation: int = 0) -> None:
        """Store ``chunk`` (a failure is counted and logged, never raised: it is a cache),
        unless its segment was dropped since ``generation`` was taken."""
        size = _HEADER.size + len(chunk)
        if size > self._max_bytes:
            return
        with self._lock:
            if self._generations.get(key[0], 0) != generation:
                return
            if key in self._files:
                self._files.move_to_end(key)
                return
        path = self._dir / _name(key)
        tmp = path.with_name(tmp_name(path.name))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(_HEADER.pack(_MAGIC, crc32c.crc32c(chunk), len(chunk)))
                out.write(chunk)
            os.replace(tmp, path)
        except OSError as exc:
            self._write_failures += 1
            log.warning("cannot write chunk file %s: %s", path, exc)
            self._unlink(tmp)
            return
        with self._lock:
            if self._generations.get(key[0], 0) != generation:
                doomed = [path]  # dropped while this was written: never keep it
            else:
                if key not in self._files:
                    self._files[key] = size
                    self._bytes += size
                doomed = self._evict_locked()
        for old in doomed:
            self._unlink(old)

    def drop_segment(self, segment_id: uuid.UUID) -> int:
        """Remove every chunk file of a segment (bytes that later failed a check), and make
        writes of chunks fetched before now no-ops. With sibling workers, their files of the
        segment go too (their books keep counting them: a stricter bound until evicted)."""
        with self._lock:
            self._generations[segment_id] = self._generations.get(segment_id, 0) + 1
            doomed = [k for k in self._files if k[0] == segment_id]
            for key in doomed:
                self._bytes -= self._files.pop(key)
        for key in doomed:
            self._unlink(self._dir / _name(key))
        if self._share.shared:
            for path in self._dir.glob(f"{segment_id.hex}-*{SUFFIX}"):
                self._unlink(path)
        return len(doomed)

    def _forget(self, key: ChunkKey) -> None:
        with self._lock:
            size = self._files.pop(key, None)
            if size is not None:
                self._bytes -= size

    def _evict_locked(self) -> list[Path]:
        """Forget the least recently used files beyond the bound; the caller unlinks them
        outside the lock."""
        doomed = []
        while self._bytes > self._max_bytes and self._files:
            key, size = self._files.popitem(last=False)
            self._bytes -= size
            self._evictions += 1
            doomed.append(self._dir / _name(key))
        return doomed

    @staticmethod
    def _unlink(path: Path) -> None:
        with contextlib.suppress(OSError):  # already gone, or the disk refuses: a cache
            path.unlink()
