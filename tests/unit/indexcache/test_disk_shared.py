"""The index disk tier shared by the worker processes of one server (``serve --workers N``):
real processes on one directory, the bound of the whole directory, siblings' sets, starts
that leave a sibling's set being written alone."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

from indexcache import DiskTier, SegmentIndexBytes
from indexcache.share import INCOMPLETE_GRACE_S, DiskShare
from tests.unit.indexcache.cache_support import key, segment_bytes

KEYS = [key(n) for n in range(16)]


def _raw(n: int) -> SegmentIndexBytes:
    return segment_bytes(KEYS[n].start_offset, 20)


def _work(directory: str, index: int, max_bytes: int, rounds: int) -> tuple[int, int]:
    """Worker ``index`` of 2: writes its sets, reads every set, again and again; a set read
    must be the right one. Returns (hits, wrong)."""
    tier = DiskTier(directory, max_bytes, share=DiskShare(index, 2, time.time()))
    tier.open()
    hits = wrong = 0
    for _ in range(rounds):
        for n in range(index, len(KEYS), 2):
            tier.write(KEYS[n], _raw(n))
        for n, k in enumerate(KEYS):
            entry = tier.read(k)
            if entry is not None:
                hits += 1
                wrong += entry.raw != _raw(n)
    return hits, wrong


def _on_disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if not p.name.endswith(".tmp"))


def test_two_processes_share_one_directory_within_its_bound(tmp_path: Path) -> None:
    bound = 5 * _raw(0).size  # 16 sets written: both processes evict all the time
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_work, [(str(tmp_path), i, bound, 20) for i in range(2)])
    assert all(wrong == 0 for _, wrong in results)
    assert all(hits > 0 for hits, _ in results)
    assert 0 < _on_disk(tmp_path) <= bound


def test_a_sibling_reads_a_set_the_other_wrote(tmp_path: Path) -> None:
    since = time.time()
    a = DiskTier(tmp_path, 1 << 20, share=DiskShare(0, 2, since))
    b = DiskTier(tmp_path, 1 << 20, share=DiskShare(1, 2, since))
    a.open()
    b.open()
    assert a.write(KEYS[0], _raw(0))
    entry = b.read(KEYS[0])
    assert entry is not None and entry.raw == _raw(0)
    assert KEYS[0] not in b  # read, not accounted by b
    assert b.read(KEYS[1]) is None


def test_each_process_accounts_for_its_share_of_the_sets_found(tmp_path: Path) -> None:
    writer = DiskTier(tmp_path, 1 << 20)
    writer.open()
    for n, k in enumerate(KEYS):
        writer.write(k, _raw(n))
    old = time.time() - 10
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    since = time.time()
    kept = [DiskTier(tmp_path, 1 << 20, share=DiskShare(i, 2, since)).open().kept for i in (0, 1)]
    assert sum(kept) == len(KEYS) and all(kept)


def test_a_start_leaves_a_young_partial_set_to_its_writer(tmp_path: Path) -> None:
    writer = DiskTier(tmp_path, 1 << 20)
    writer.open()
    writer.write(KEYS[0], _raw(0))
    index_file = tmp_path / f"{KEYS[0].file_stem}.index"
    index_file.unlink()  # as if a sibling were renaming the set into place
    scan = DiskTier(tmp_path, 1 << 20, share=DiskShare(1, 2, time.time())).open()
    assert scan.incomplete_removed == 0 and len(list(tmp_path.iterdir())) == 3
    old = time.time() - INCOMPLETE_GRACE_S - 5
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    scan = DiskTier(tmp_path, 1 << 20, share=DiskShare(1, 2, time.time())).open()
    assert scan.incomplete_removed == 1 and not list(tmp_path.iterdir())
