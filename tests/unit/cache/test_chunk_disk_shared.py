"""The chunk disk tier shared by the worker processes of one server (``serve --workers N``):
real processes on one directory, the bound of the whole directory, siblings' files, starts
that leave a live sibling's work alone."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from gateway.cache.chunk_disk import ChunkDiskTier
from indexcache.share import DiskShare

CHUNK = 1000
FILE = 12 + CHUNK  # header + chunk
SIDS = [uuid.UUID(int=100 + i) for i in range(4)]


def _chunk(key: tuple[uuid.UUID, int]) -> bytes:
    """The bytes of ``key``: any mix-up between keys or processes shows."""
    return (key[0].bytes + key[1].to_bytes(8, "big", signed=True)) * (CHUNK // 24) + bytes(
        CHUNK % 24
    )


def _work(directory: str, index: int, max_bytes: int, rounds: int) -> tuple[int, int]:
    """Worker ``index`` of 2: writes its keys, reads all keys (its sibling's too), again and
    again; every chunk read must be the right one. Returns (hits, wrong)."""
    tier = ChunkDiskTier(directory, max_bytes, share=DiskShare(index, 2, since=time.time()))
    tier.open()
    keys = [(sid, n) for sid in SIDS for n in range(10)]
    mine = [k for i, k in enumerate(keys) if i % 2 == index]
    hits = wrong = 0
    for _ in range(rounds):
        for key in mine:
            tier.write(key, _chunk(key))
        for key in keys:
            got = tier.read(key)
            if got is not None:
                hits += 1
                wrong += got != _chunk(key)
    return hits, wrong


def _on_disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.chunk"))


def test_two_processes_share_one_directory_within_its_bound(tmp_path: Path) -> None:
    """Writers, readers and evictors in two processes at once: never a wrong byte, siblings'
    chunks are hits, and the directory stays within the one bound (not twice it)."""
    bound = 12 * FILE  # 40 keys written: both processes evict all the time
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_work, [(str(tmp_path), i, bound, 30) for i in range(2)])
    assert all(wrong == 0 for _, wrong in results)
    assert all(hits > 0 for hits, _ in results)
    assert 0 < _on_disk(tmp_path) <= bound
    assert not list(tmp_path.glob("*.tmp"))


def test_a_sibling_reads_what_the_other_wrote(tmp_path: Path) -> None:
    since = time.time()
    a = ChunkDiskTier(tmp_path, 1 << 20, share=DiskShare(0, 2, since))
    b = ChunkDiskTier(tmp_path, 1 << 20, share=DiskShare(1, 2, since))
    a.open()
    b.open()
    key = (SIDS[0], 3)
    a.write(key, _chunk(key))
    assert b.read(key) == _chunk(key)
    assert b.stats().hits == 1 and b.stats().entries == 0  # read, not accounted by b
    b.write((SIDS[1], 0), _chunk((SIDS[1], 0)))
    assert a.drop_segment(SIDS[1]) == 0  # none of a's own ...
    assert not list(tmp_path.glob(f"{SIDS[1].hex}-*"))  # ... but b's file is gone too


def test_one_process_reads_only_its_own_books(tmp_path: Path) -> None:
    """One worker: unchanged, a file it did not register is not looked for."""
    a = ChunkDiskTier(tmp_path, 1 << 20)
    a.open()
    key = (SIDS[0], 1)
    ChunkDiskTier(tmp_path, 1 << 20).write(key, _chunk(key))
    assert a.read(key) is None


def test_each_process_accounts_for_half_of_the_files_found_at_start(tmp_path: Path) -> None:
    writer = ChunkDiskTier(tmp_path, 1 << 20)
    writer.open()
    keys = [(sid, n) for sid in SIDS for n in range(25)]
    for key in keys:
        writer.write(key, _chunk(key))
    old = time.time() - 10
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    since = time.time()
    kept = [ChunkDiskTier(tmp_path, 1 << 20, share=DiskShare(i, 2, since)).open() for i in (0, 1)]
    assert sum(kept) == len(keys) and all(kept)  # each file counted once, both have some
    # files modified since the server started (a dead worker's) are counted by a new worker
    recent = ChunkDiskTier(tmp_path, 1 << 20, share=DiskShare(0, 2, old - 1)).open()
    assert recent == len(keys)


def test_each_process_evicts_to_its_part_of_the_bound_at_start(tmp_path: Path) -> None:
    writer = ChunkDiskTier(tmp_path, 1 << 20)
    writer.open()
    for n in range(40):
        writer.write((SIDS[0], n), _chunk((SIDS[0], n)))
    for i in (0, 1):
        ChunkDiskTier(tmp_path, 10 * FILE, share=DiskShare(i, 2, since=time.time() + 1)).open()
    assert _on_disk(tmp_path) <= 10 * FILE


def test_a_start_keeps_the_temporary_files_of_live_siblings(tmp_path: Path) -> None:
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
        live_tmp = tmp_path / f"x-1.chunk.{sibling.pid}-abcdef.tmp"
        dead_tmp = tmp_path / f"x-2.chunk.{dead.stdout.strip()}-abcdef.tmp"
        old_format = tmp_path / "x-3.chunk.abcdef.tmp"
        for p in (live_tmp, dead_tmp, old_format):
            p.write_bytes(b"being written")
        ChunkDiskTier(tmp_path, 1 << 20, share=DiskShare(1, 2, time.time())).open()
        assert live_tmp.exists()
        assert not dead_tmp.exists() and not old_format.exists()
        ChunkDiskTier(tmp_path, 1 << 20).open()  # one process: every leftover goes
        assert not live_tmp.exists()
    finally:
        sibling.kill()
        sibling.wait()
