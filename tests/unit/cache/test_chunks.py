"""The decoded-chunk cache: single flight, failures not kept, bounds, read-ahead."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.cache.chunks import ChunkCache
from gateway.deadline import Deadline
from gateway.errors import StorageUnavailableError
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.remote.tiering import (
    TieringOptions,
)
from gateway.storage.filesystem import FilesystemStore
from tests.unit.cache.helpers import Tiered, tiered_demo

CHUNK = 1024


@pytest.fixture
async def tiered(tmp_path: Path) -> AsyncIterator[Tiered]:
    async with tiered_demo(tmp_path, TieringOptions(chunk_size=CHUNK, compression=True)) as t:
        yield t


SID = uuid.UUID(int=1)


async def test_concurrent_misses_share_one_load(
    tiered: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    reader, remote, log = tiered
    cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=0)
    reads = await asyncio.gather(
        *(cache.read(remote, SID, 100, 5000, Deadline.after(10)) for _ in range(50))
    )
    assert set(reads) == {log[100:5000]}
    assert reader.counters.gets == 1 and cache.stats().loads == 1
    assert await cache.read(remote, SID, 0, 3000, Deadline.after(10)) == log[:3000]
    assert reader.counters.gets == 1  # all from memory now
    assert await cache.invalidate(SID) == 5 and cache.stats().entries == 0


@pytest.mark.parametrize("compression", [True, False], ids=["chunks", "blocks"])
async def test_a_failed_load_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: bool
) -> None:
    options = TieringOptions(chunk_size=CHUNK, compression=compression)
    async with tiered_demo(tmp_path, options) as (reader, remote, log):
        cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=0, block_bytes=256)
        await _fails_then_reads(cache, remote, log, monkeypatch)


async def _fails_then_reads(
    cache: ChunkCache, remote: RemoteSegment, log: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = FilesystemStore.get_range

    async def down(self: FilesystemStore, key: str, start: int, end: int) -> bytes:
        raise StorageUnavailableError("503")

    monkeypatch.setattr(FilesystemStore, "get_range", down)
    with pytest.raises(StorageUnavailableError):
        await cache.read(remote, SID, 0, 100, Deadline.after(10))
    monkeypatch.setattr(FilesystemStore, "get_range", real)
    assert await cache.read(remote, SID, 0, 100, Deadline.after(10)) == log[:100]
    assert cache.stats().load_failures == 1


async def test_memory_is_bounded_by_bytes(
    tiered: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    reader, remote, log = tiered
    cache = ChunkCache(reader, max_bytes=4 * CHUNK, readahead_bytes=0)
    assert await cache.read(remote, SID, 0, len(log), Deadline.after(10)) == log
    assert cache.stats().bytes_held <= 4 * CHUNK and cache.stats().evictions > 0


async def test_forward_paging_reads_ahead_random_access_does_not(
    tiered: tuple[SegmentReader, RemoteSegment, bytes],
) -> None:
    reader, remote, log = tiered
    cache = ChunkCache(reader, max_bytes=1 << 20, readahead_bytes=4 * CHUNK)
    # A page reads chunks 0-4; the next page restarts at an index entry inside it (chunk 3).
    await cache.read(remote, SID, 0, 5 * CHUNK, Deadline.after(10))
    await cache.settle()
    assert cache.stats().readahead_chunks == 0  # one read is no pattern yet
    await cache.read(remote, SID, 3 * CHUNK + 10, 6 * CHUNK, Deadline.after(10))
    await cache.settle()
    assert cache.stats().readahead_chunks == 4
    gets = reader.counters.gets
    assert (
        await cache.read(remote, SID, 6 * CHUNK, 10 * CHUNK, Deadline.after(10))
        == log[6 * CHUNK : 10 * CHUNK]
    )
    assert reader.counters.gets == gets  # already read ahead
    await cache.settle()
    assert cache.stats().readahead_chunks == 8  # and that read, forward again, read on
    other = uuid.UUID(int=2)  # the same bytes under another id: a cold segment
    await cache.read(remote, other, 12 * CHUNK, 13 * CHUNK, Deadline.after(10))
    await cache.read(remote, other, 2 * CHUNK, 3 * CHUNK, Deadline.after(10))  # backwards
    await cache.settle()
    assert cache.stats().readahead_chunks == 8
