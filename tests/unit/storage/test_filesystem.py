"""The filesystem store: the protocol's semantics, atomic writes, and keys that try to escape."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from gateway.errors import (
    ConfigurationError,
    GatewayError,
    InvalidKeyError,
    ObjectNotFoundError,
    StorageError,
)
from gateway.storage.base import ObjectInfo
from gateway.storage.factory import open_store
from gateway.storage.filesystem import TMP_PREFIX, FilesystemStore

NOBODY = 65534


@pytest.fixture
def store(tmp_path: Path) -> FilesystemStore:
    root = tmp_path / "bucket"
    root.mkdir()
    return FilesystemStore(root)


async def _keys(store: FilesystemStore, prefix: str) -> list[str]:
    return [info.key async for info in store.list(prefix)]


async def test_put_get_range_head_delete(store: FilesystemStore) -> None:
    data = bytes(range(256)) * 10
    await store.put("t-abc/0/00000000000000000000-xyz.log", data)
    assert await store.get("t-abc/0/00000000000000000000-xyz.log") == data
    assert await store.get_range("t-abc/0/00000000000000000000-xyz.log", 10, 20) == data[10:20]
    assert await store.get_range("t-abc/0/00000000000000000000-xyz.log", 2550, 9999) == data[2550:]
    assert await store.get_range("t-abc/0/00000000000000000000-xyz.log", 5000, 6000) == b""
    info = await store.head("t-abc/0/00000000000000000000-xyz.log")
    assert (info.key, info.size) == ("t-abc/0/00000000000000000000-xyz.log", 2560)
    await store.delete("t-abc/0/00000000000000000000-xyz.log")
    await store.delete("t-abc/0/00000000000000000000-xyz.log")  # idempotent, as S3
    with pytest.raises(ObjectNotFoundError, match="not found"):
        await store.get("t-abc/0/00000000000000000000-xyz.log")
    with pytest.raises(ObjectNotFoundError):
        await store.head("t-abc/0/00000000000000000000-xyz.log")
    with pytest.raises(ObjectNotFoundError):
        await store.get_range("nope", 0, 1)


async def test_a_directory_is_not_an_object(store: FilesystemStore) -> None:
    await store.put("a/b", b"x")
    with pytest.raises(ObjectNotFoundError):
        await store.head("a")
    with pytest.raises(ObjectNotFoundError):
        await store.get("a")


async def test_list_is_a_string_prefix_in_key_order(store: FilesystemStore) -> None:
    keys = ["topic-b/0/x", "topic-a/1/y", "topic-a/0/z", "topic-a/0/a", "other/0/q", "top"]
    for k in keys:
        await store.put(k, k.encode())
    assert await _keys(store, "") == sorted(keys)
    assert await _keys(store, "topic-a/") == ["topic-a/0/a", "topic-a/0/z", "topic-a/1/y"]
    assert await _keys(store, "topic-") == [
        "topic-a/0/a",
        "topic-a/0/z",
        "topic-a/1/y",
        "topic-b/0/x",
    ]
    assert await _keys(store, "topic-a/0/") == ["topic-a/0/a", "topic-a/0/z"]
    assert await _keys(store, "missing/") == []
    infos = [i async for i in store.list("top")]
    assert ObjectInfo("top", 3, infos[0].last_modified) in infos


async def test_writes_are_atomic_and_temporaries_invisible(store: FilesystemStore) -> None:
    (store.root / "d").mkdir()
    (store.root / "d" / f"{TMP_PREFIX}leftover").write_bytes(b"half")
    await asyncio.gather(*(store.put("d/obj", bytes([i]) * 100_000) for i in range(20)))
    got = await store.get("d/obj")
    assert len(got) == 100_000 and len(set(got)) == 1  # one whole write, never a mix
    assert await _keys(store, "d/") == ["d/obj"]


@pytest.mark.parametrize(
    "key",
    ["", "/etc/passwd", "../outside", "a/../../outside", "a//b", "./a", "a/.", "a\\b", "a\x00b",
     f"a/{TMP_PREFIX}x"],
)  # fmt: skip
async def test_keys_that_leave_the_root_are_refused(store: FilesystemStore, key: str) -> None:
    with pytest.raises(InvalidKeyError):
        await store.put(key, b"x")
    with pytest.raises(InvalidKeyError):
        await store.get(key)


async def test_symlink_escape_is_refused(store: FilesystemStore, tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key.pem").write_bytes(b"private")
    os.symlink(outside, store.root / "link")
    with pytest.raises(InvalidKeyError, match="outside the store root"):
        await store.get("link/key.pem")
    with pytest.raises(InvalidKeyError):
        [i async for i in store.list("link/")]


async def test_open_store_urls(tmp_path: Path) -> None:
    store = await open_store(f"file://{tmp_path}")
    assert isinstance(store, FilesystemStore) and store.root == tmp_path.resolve()
    for bad in ("file://relative/dir", "file://host/abs", "gs://bucket", "nonsense", "s3://b/x"):
        with pytest.raises(ConfigurationError):
            await open_store(bad)


async def test_symlink_loop_is_an_invalid_key(store: FilesystemStore) -> None:
    os.symlink(store.root / "loop-b", store.root / "loop-a")
    os.symlink(store.root / "loop-a", store.root / "loop-b")
    for op in (store.get("loop-a/x"), store.put("loop-a/x", b"1"), store.head("loop-a")):
        with pytest.raises((InvalidKeyError, ObjectNotFoundError)):
            await op


async def test_listing_a_store_root_that_is_not_there_fails(tmp_path: Path) -> None:
    """A missing root (an unmounted volume, a moved directory) is not an empty bucket: a scan
    would take every object for deleted. A missing prefix directory under it lists nothing."""
    store = FilesystemStore(tmp_path / "bucket")
    with pytest.raises(StorageError, match="not a directory"):
        await _keys(store, "tiered/")
    (tmp_path / "bucket").mkdir()
    assert await _keys(store, "tiered/") == []


def _list(root: Path, prefix: str) -> str:
    """What the filesystem store's listing gives: a count, or the error it raises."""
    try:
        return f"listed {len(asyncio.run(_keys(FilesystemStore(root), prefix)))}"
    except GatewayError as exc:
        return f"{type(exc).__name__}: {exc}"


def _list_as_nobody(root: Path, prefix: str) -> str:
    """:func:`_list` in a forked child that dropped root (as root, mode 000 denies nothing)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, _list(root, prefix).encode())
        except BaseException as exc:
            os.write(write_end, f"child failed: {exc!r}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        out = pipe.read().decode()
    os.waitpid(pid, 0)
    return out


def test_a_directory_that_cannot_be_read_fails_the_listing() -> None:
    """Permission denied below the prefix: an error, never a listing with a hole in it."""
    root = Path(tempfile.mkdtemp(prefix="tiered-gateway-perm-"))  # reachable by any user
    try:
        root.chmod(0o755)
        for key in ("t/a/00.rsm-manifest", "t/b/00.rsm-manifest", "t/c/00.rsm-manifest"):
            path = root.joinpath(*key.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"{}")
        for d in (root / "t", root / "t" / "a", root / "t" / "b", root / "t" / "c"):
            d.chmod(0o755)
        assert _list(root, "t/") == "listed 3"
        (root / "t" / "b").chmod(0)
        out = _list_as_nobody(root, "t/") if os.geteuid() == 0 else _list(root, "t/")
        assert out.startswith("ConfigurationError: access denied to object 't/'"), out
    finally:
        (root / "t" / "b").chmod(0o755)
        shutil.rmtree(root)
