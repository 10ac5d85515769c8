"""The decoded-chunk disk tier: round trips, restarts, bounds, and never a wrong byte."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.cache.chunk_disk import ChunkDiskTier
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import StorageUnavailableError
from gateway.storage.filesystem import FilesystemStore
from tests.unit.service.support import ready_service
from tests.unit.service.test_service_demo import RU, expected_records, walk

SID = uuid.UUID(int=7)


def test_round_trip_restart_and_permissions(tmp_path: Path) -> None:
    tier = ChunkDiskTier(tmp_path / "chunks", 1 << 20)
    assert tier.open() == 0
    assert stat.S_IMODE((tmp_path / "chunks").stat().st_mode) == 0o700
    tier.write((SID, 0), b"alpha")
    tier.write((SID, 1), b"")
    assert tier.read((SID, 0)) == b"alpha" and tier.read((SID, 1)) == b""
    assert tier.read((SID, 2)) is None
    (file,) = [p for p in (tmp_path / "chunks").iterdir() if p.name.endswith("-0.chunk")]
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    (tmp_path / "chunks" / "x.chunk.abc.tmp").write_bytes(b"torn")
    again = ChunkDiskTier(tmp_path / "chunks", 1 << 20)
    assert again.open() == 2  # the restart keeps both, drops the leftover
    assert not list((tmp_path / "chunks").glob("*.tmp"))
    assert again.read((SID, 0)) == b"alpha"
    assert (again.stats().hits, again.stats().misses) == (1, 0)


def test_bounded_least_recently_used_first(tmp_path: Path) -> None:
    tier = ChunkDiskTier(tmp_path, 3 * (12 + 100))  # three 100-byte chunks with their headers
    tier.open()
    for i in range(3):
        tier.write((SID, i), bytes([i]) * 100)
    assert tier.read((SID, 0)) is not None  # 0 is now the most recently used
    tier.write((SID, 3), b"3" * 100)
    assert tier.read((SID, 1)) is None and tier.read((SID, 0)) is not None
    assert tier.stats().evictions == 1 and tier.stats().bytes <= 3 * 112
    assert len(list(tmp_path.glob("*.chunk"))) == 3
    tier.write((SID, 9), b"x" * 1000)  # larger than the whole tier: not kept
    assert tier.read((SID, 9)) is None
    assert tier.drop_segment(SID) == 3 and not list(tmp_path.glob("*.chunk"))


@given(st.binary(max_size=300), st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_a_damaged_file_is_never_served(chunk: bytes, where: int, flip: int) -> None:
    import tempfile  # noqa: PLC0415 - one directory per example

    with tempfile.TemporaryDirectory() as d:
        tier = ChunkDiskTier(d, 1 << 20)
        tier.open()
        tier.write((SID, 0), chunk)
        (path,) = Path(d).glob("*.chunk")
        data = bytearray(path.read_bytes())
        data[where % len(data)] ^= flip
        path.write_bytes(bytes(data))
        assert tier.read((SID, 0)) is None  # removed and counted, to be fetched again
        assert not path.exists() and tier.stats().corrupt_removed == 1


def test_a_truncated_file_is_never_served(tmp_path: Path) -> None:
    tier = ChunkDiskTier(tmp_path, 1 << 20)
    tier.open()
    tier.write((SID, 0), b"0123456789" * 10)
    (path,) = tmp_path.glob("*.chunk")
    path.write_bytes(path.read_bytes()[:-1])
    assert tier.read((SID, 0)) is None


async def test_a_restarted_gateway_reads_chunks_from_disk(
    demo: DemoBucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        store=demo.store_url, key_prefix=demo.key_prefix, key_pairs=[demo.key_pair_spec],
        chunk_cache_dir=tmp_path / "chunks",
    )  # fmt: skip
    want = [(e.offset, e.value) for e in expected_records(demo.root / "segments" / "orders-0")]
    async with ready_service(settings) as svc:
        got = await walk(svc, "orders", 0, RU, 1 << 20)
        assert [(g[0], g[3]) for g in got] == want
        await svc.source.chunks.settle()  # the background disk writes
    assert os.listdir(tmp_path / "chunks")

    real = FilesystemStore.get_range

    async def no_log_reads(self: FilesystemStore, key: str, start: int, end: int) -> bytes:
        if key.endswith(".log"):
            raise StorageUnavailableError(f"{key}: the bucket is down")
        return await real(self, key, start, end)

    monkeypatch.setattr(FilesystemStore, "get_range", no_log_reads)
    async with ready_service(settings.model_copy(update={"retry_max_attempts": 1})) as svc:
        got = await walk(svc, "orders", 0, RU, 1 << 20)
        assert [(g[0], g[3]) for g in got] == want  # every chunk came from the disk tier
        disk = svc.source.chunks.disk
        assert disk is not None and disk.stats().hits > 0 and disk.stats().misses == 0
        with pytest.raises(StorageUnavailableError):  # and nothing else was cached
            await svc.fetch("orders", 1, 0, max_bytes=100, isolation=RU,
                            deadline=Deadline.after(5))  # fmt: skip


def test_a_write_fetched_before_a_drop_is_never_kept(tmp_path: Path) -> None:
    tier = ChunkDiskTier(tmp_path, 1 << 20)
    tier.open()
    before = tier.generation(SID)
    tier.drop_segment(SID)  # the fetched bytes failed a check while the write was queued
    tier.write((SID, 0), b"damaged", before)
    assert tier.read((SID, 0)) is None and not list(tmp_path.glob("*.chunk"))
    tier.write((SID, 0), b"good", tier.generation(SID))
    assert tier.read((SID, 0)) == b"good"


async def test_bytes_damaged_in_transit_never_reach_the_disk_tier(
    demo: DemoBucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An untransformed chunk is only checked when its batches are framed, after the disk
    write was queued: the CRC failure must drop it there too, and the retry read it anew."""
    real = FilesystemStore.get_range
    damaged: list[str] = []

    async def once(self: FilesystemStore, key: str, start: int, end: int) -> bytes:
        data = await real(self, key, start, end)
        if key.endswith(".log") and not damaged and len(data) > 200:
            damaged.append(key)
            flipped = bytearray(data)
            flipped[100] ^= 1
            data = bytes(flipped)
        return data

    monkeypatch.setattr(FilesystemStore, "get_range", once)
    settings = Settings(
        store=demo.store_url, key_prefix=demo.key_prefix, key_pairs=[demo.key_pair_spec],
        chunk_cache_dir=tmp_path / "chunks", readahead_bytes=0,
    )  # fmt: skip
    want = [(e.offset, e.value) for e in expected_records(demo.root / "segments" / "orders-0")]
    async with ready_service(settings) as svc:
        result = await svc.fetch("orders", 0, 0, max_bytes=1 << 20, isolation=RU,
                                 deadline=Deadline.after(10))  # fmt: skip
        got = await svc.decode(result, 0, RU)
        assert damaged and [(r.offset, r.record.value) for r in got] == want[: len(got)]
        await svc.source.chunks.settle()
    monkeypatch.setattr(FilesystemStore, "get_range", real)
    async with ready_service(settings) as svc:  # a restart: what is on disk must be good
        assert [(g[0], g[3]) for g in await walk(svc, "orders", 0, RU, 1 << 20)] == want
        disk = svc.source.chunks.disk
        assert disk is not None and disk.stats().corrupt_removed == 0
