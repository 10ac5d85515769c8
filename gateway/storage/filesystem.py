"""The filesystem store (``file:///abs/dir``): key = path relative to the root directory.

The embedded default and the fast stand-in for a bucket in benchmarks. Keys are ``/``-separated
relative paths; a key that is absolute, has an empty, ``.`` or ``..`` component, a backslash or a
NUL byte, or that resolves (through symlinks) outside the root, is refused with
:class:`~gateway.errors.InvalidKeyError`. Writes go to a hidden temporary file in the target
directory and are renamed into place, so a reader never sees half an object. Blocking calls run
in worker threads; the event loop only awaits.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final, TypeVar

from gateway.errors import ConfigurationError, InvalidKeyError
from gateway.storage.base import ObjectInfo
from gateway.storage.translate import map_exceptions, root_away

T = TypeVar("T")

TMP_PREFIX: Final = ".tiered-gateway-tmp-"


def key_path(root: Path, key: str) -> Path:
    """The file for ``key`` under ``root`` (resolved); touches the filesystem (resolve), so
    async callers run it in a thread. Refuses keys that are not plain relative paths."""
    parts = key.split("/")
    if (
        not key
        or key.startswith("/")
        or "\\" in key
        or "\x00" in key
        or any(p in ("", ".", "..") for p in parts)
        or parts[-1].startswith(TMP_PREFIX)
    ):
        raise InvalidKeyError(f"object key {key!r} is not a plain relative path")
    path = root.joinpath(*parts)
    try:
        resolved = path.resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError on 3.11)
        raise InvalidKeyError(f"object key {key!r} cannot be resolved") from exc
    if resolved != root and root not in resolved.parents:
        raise InvalidKeyError(f"object key {key!r} resolves outside the store root")
    return path


def _walk_error(exc: OSError) -> None:
    """``os.walk``'s ``onerror``: a directory that is gone (deleted during the walk, or never
    there: a prefix with no objects) lists nothing, as in S3; any other failure (permission
    denied, I/O error) fails the listing, never leaves a hole in it."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return
    raise exc


def list_keys(root: Path, prefix: str) -> list[ObjectInfo]:
    """The objects under ``root`` whose key starts with ``prefix``, in S3's order (UTF-8 bytes
    of the key). Walks only below the deepest directory the prefix names; blocking.

    A listing is complete or an error: a directory that cannot be read raises (a bucket scan
    would take the objects it hides for deleted ones), and so does a store root that is not
    there (an unmounted volume, a moved directory: S3's ``NoSuchBucket``). Objects or
    directories deleted while the walk runs are simply not listed."""
    base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    if base_dir:
        key_path(root, base_dir)  # refuses prefixes that leave the root
    start = root.joinpath(*base_dir.split("/")) if base_dir else root
    _require_root(root)
    found: list[ObjectInfo] = []
    for dirpath, _dirs, files in os.walk(start, onerror=_walk_error):
        for name in files:
            if name.startswith(TMP_PREFIX):
                continue
            path = Path(dirpath, name)
            key = path.relative_to(root).as_posix()
            if key.startswith(prefix):
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue  # deleted since the directory was read
                found.append(ObjectInfo(key, st.st_size, st.st_mtime))
    _require_root(root)  # gone during the walk: what it found may be only part
    found.sort(key=lambda info: info.key.encode())
    return found


def _require_root(root: Path) -> None:
    if not root.is_dir():
        raise root_away(root)


class FilesystemStore:
    """An :class:`~gateway.storage.base.ObjectStore` over a local directory."""

    def __init__(self, root: Path) -> None:
        if not root.is_absolute():
            raise ConfigurationError(f"filesystem store root must be absolute, got {root}")
        self._root = root.resolve()

    def __repr__(self) -> str:
        return f"FilesystemStore({str(self._root)!r})"

    @property
    def root(self) -> Path:
        return self._root

    # --- keys ----------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return key_path(self._root, key)

    # --- errors --------------------------------------------------------------------------

    async def _run(self, key: str, fn: Callable[[], T]) -> T:
        with map_exceptions(key, store="filesystem", root=self._root):
            return await asyncio.to_thread(fn)

    # --- the protocol --------------------------------------------------------------------

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"invalid range [{start}, {end})")

        def read() -> bytes:
            fd = os.open(self._path(key), os.O_RDONLY)
            try:
                return os.pread(fd, end - start, start)
            finally:
                os.close(fd)

        return await self._run(key, read)

    async def get(self, key: str) -> bytes:
        return await self._run(key, lambda: self._path(key).read_bytes())

    async def put(self, key: str, data: bytes) -> None:
        def write() -> None:
            path = self._path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{TMP_PREFIX}{uuid.uuid4().hex}")
            try:
                tmp.write_bytes(data)
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

        await self._run(key, write)

    async def head(self, key: str) -> ObjectInfo:
        def stat() -> ObjectInfo:
            path = self._path(key)
            st = path.stat()
            if not path.is_file():
                raise IsADirectoryError(key)
            return ObjectInfo(key, st.st_size, st.st_mtime)

        return await self._run(key, stat)

    async def delete(self, key: str) -> None:
        await self._run(key, lambda: self._path(key).unlink(missing_ok=True))

    async def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        for info in await self._run(prefix, lambda: list_keys(self._root, prefix)):
            yield info

    async def close(self) -> None:
        return None
