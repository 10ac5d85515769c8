"""Every answer proves itself complete (issue 13): one damaged byte, one typed error.

Each case damages one object of the demo bucket's untransformed ``orders`` topic (so the bytes
in the bucket are the segment's own), walks the partition by ``next_offset`` and requires a
typed error where the damage would change what a reader gets. On the code before the read core
each of these answered 200 with records missing or wrong (or never answered).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.api.statuses import http_status
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import (
    CorruptDataError,
    CorruptIndexError,
    CorruptManifestError,
    CorruptRecordError,
    GatewayError,
    OffsetOutOfRangeError,
    RemoteGapError,
)
from gateway.remote.manifest import IndexType, parse_manifest
from gateway.service.core import GatewayService
from gateway.service.protocol import OffsetSpec
from gateway.service.types import IsolationLevel
from tests.unit.service.support import ready_service

RU = IsolationLevel.READ_UNCOMMITTED
TOPIC = "orders"


@pytest.fixture
def bucket(demo_copy: Path) -> Path:
    """A copy of the demo bucket this test may damage."""
    return demo_copy


def objects(bucket: Path, suffix: str) -> list[Path]:
    """The ``orders`` partition-0 objects with ``suffix``, in offset order."""
    found = [p for p in bucket.rglob(f"*.{suffix}") if f"/{TOPIC}-" in str(p) and "/0/" in str(p)]
    return sorted(found, key=lambda p: p.name)


def edit(path: Path, change: Callable[[bytearray], None]) -> None:
    data = bytearray(path.read_bytes())
    change(data)
    path.write_bytes(bytes(data))


def index_piece(log: Path, kind: IndexType) -> tuple[Path, int, int]:
    """The ``.indexes`` object of ``log``'s segment and where ``kind`` sits in it."""
    manifest_path = log.with_suffix(".rsm-manifest")
    manifest = parse_manifest(manifest_path.read_bytes(), str(manifest_path))
    piece = manifest.segment_indexes[kind]
    assert piece is not None
    return log.with_suffix(".indexes"), piece.position, piece.size


def last_batch(data: bytes) -> tuple[int, int]:
    """Where the last batch of a segment's bytes starts, and its length field."""
    pos = 0
    while True:
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if pos + 12 + length >= len(data):
            return pos, length
        pos += 12 + length


def settings(demo: DemoBucket, bucket: Path) -> Settings:
    return Settings(
        store=f"file://{bucket}",
        key_prefix=demo.key_prefix,
        key_pairs=[demo.key_pair_spec],
        retry_max_attempts=1,
    )


async def walk(svc: GatewayService, max_bytes: int = 2048) -> list[int]:
    """Every offset a paging consumer reads; raises what the service raises."""
    info = await svc.partition(TOPIC, 0)
    offset, got = info.remote_log_start_offset, list[int]()
    while offset < info.remote_log_end_offset:
        result = await svc.fetch(
            TOPIC, 0, offset, max_bytes=max_bytes, isolation=RU, deadline=Deadline.after(20)
        )
        assert result.next_offset > offset
        got.extend(r.offset for r in await svc.decode(result, offset, RU))
        offset = result.next_offset
    return got


async def walk_error(demo: DemoBucket, bucket: Path) -> GatewayError:
    async with ready_service(settings(demo, bucket)) as svc:
        with pytest.raises(GatewayError) as caught:
            await asyncio.wait_for(walk(svc), 60)
        return caught.value


async def test_the_undamaged_walk_is_contiguous(demo: DemoBucket, bucket: Path) -> None:
    async with ready_service(settings(demo, bucket)) as svc:
        got = await walk(svc)
    info_end = got[-1] + 1
    assert got == list(range(info_end))


async def test_a_batch_running_past_a_segment_end_is_corrupt_not_a_truncated_tail(
    demo: DemoBucket, bucket: Path
) -> None:
    """Before: the rest of the segment was taken for the broker's truncated tail and the walk
    went on with the next segment, records missing, 200."""
    log = objects(bucket, "log")[0]
    data = log.read_bytes()
    pos, length = last_batch(data)
    edit(log, lambda b: struct.pack_into(">i", b, pos + 8, length + 100))
    exc = await walk_error(demo, bucket)
    assert isinstance(exc, CorruptRecordError)
    assert "past the segment" in str(exc)


async def test_a_cut_off_segment_is_corrupt(demo: DemoBucket, bucket: Path) -> None:
    """Bytes after the last whole batch (or a segment that ends early) cannot be a remote
    segment: its metadata says where it ends. Here the last batch's length shrinks by 20,
    leaving 20 bytes that frame nothing."""
    log = objects(bucket, "log")[0]
    data = log.read_bytes()
    pos, length = last_batch(data)
    edit(log, lambda b: struct.pack_into(">i", b, pos + 8, length - 20))
    exc = await walk_error(demo, bucket)
    assert isinstance(exc, CorruptDataError)


async def test_the_partition_bounds_are_those_a_fetch_checks(
    demo: DemoBucket, bucket: Path
) -> None:
    """The last segment cut off (its last batch's length shrunk by 20): the log end its
    manifest claims is not one its bytes keep. A fetch fails on it, and so does the partition's
    info (before: ``partition()`` reported the claimed end, so the Kafka listener's high
    watermark disagreed with its fetch)."""
    log = objects(bucket, "log")[-1]
    data = log.read_bytes()
    pos, length = last_batch(data)
    edit(log, lambda b: struct.pack_into(">i", b, pos + 8, length - 20))
    async with ready_service(settings(demo, bucket)) as svc:
        with pytest.raises(CorruptDataError):
            await svc.partition(TOPIC, 0)
        with pytest.raises(CorruptDataError):
            await svc.fetch(TOPIC, 0, 0, max_bytes=1024, isolation=RU, deadline=Deadline.after(20))
        listed = {i.partition: i for i in await svc.partitions(TOPIC)}  # no tail read
        assert listed[0].remote_log_end_offset > 0


async def test_a_wrong_offset_index_entry_is_corrupt_not_a_skip(
    demo: DemoBucket, bucket: Path
) -> None:
    """An entry whose position points at a later batch (still rising, still inside the
    segment) sent a fetch of its offset past records. Now: the batch found there starts after
    the entry's offset, a corrupt index."""
    log = objects(bucket, "log")[0]
    indexes, at, size = index_piece(log, IndexType.OFFSET)
    entries = [struct.unpack_from(">ii", indexes.read_bytes(), at + i) for i in range(0, size, 8)]
    assert len(entries) >= 3, entries
    # entry 1 takes entry 2's position minus nothing: positions must still rise, so point it
    # at the batch right after its own (its successor is further on).
    data = log.read_bytes()
    rel, position = entries[1]
    length = struct.unpack_from(">i", data, position + 8)[0]
    following = position + 12 + length
    assert following < entries[2][1]
    edit(indexes, lambda b: struct.pack_into(">i", b, at + 8 + 4, following))
    async with ready_service(settings(demo, bucket)) as svc:
        base = (await svc.segments(TOPIC, 0))[0].start_offset
        with pytest.raises(CorruptRecordError, match="offset-index entry"):
            await svc.fetch(
                TOPIC, 0, base + rel, max_bytes=100, isolation=RU, deadline=Deadline.after(10)
            )


async def test_a_negative_index_position_fails_at_once_and_never_hangs(
    demo: DemoBucket, bucket: Path
) -> None:
    """Before: ``Fetcher._read_segment`` looped forever on the event loop."""
    log = objects(bucket, "log")[0]
    indexes, at, _ = index_piece(log, IndexType.OFFSET)
    edit(indexes, lambda b: b.__setitem__(at + 4, b[at + 4] | 0x80))
    exc = await walk_error(demo, bucket)
    assert isinstance(exc, CorruptIndexError)


async def test_a_time_index_out_of_order_is_corrupt(demo: DemoBucket, bucket: Path) -> None:
    log = objects(bucket, "log")[0]
    indexes, at, size = index_piece(log, IndexType.TIMESTAMP)
    assert size >= 24
    edit(indexes, lambda b: b.__setitem__(at, 0x7F))  # the first timestamp becomes huge
    async with ready_service(settings(demo, bucket)) as svc:
        with pytest.raises(CorruptIndexError):
            await svc.fetch(TOPIC, 0, 0, max_bytes=100, isolation=RU, deadline=Deadline.after(10))


@pytest.mark.parametrize(
    ("byte", "mask", "what"),
    [(12, 0x01, "leader epoch"), (16, 0x03, "magic"), (7, 0x02, "offsets")],
)
async def test_header_fields_outside_the_crc_are_checked(
    demo: DemoBucket, bucket: Path, byte: int, mask: int, what: str
) -> None:
    """partitionLeaderEpoch and baseOffset are not covered by the CRC; a damaged magic is
    corruption in a remote segment, not a legacy format (501)."""
    log = objects(bucket, "log")[1]
    data = log.read_bytes()
    second = 12 + struct.unpack_from(">i", data, 8)[0]  # the segment's second batch
    edit(log, lambda b: b.__setitem__(second + byte, b[second + byte] ^ mask))
    exc = await walk_error(demo, bucket)
    assert isinstance(exc, CorruptRecordError), exc
    assert http_status(exc) == 502
    assert what in str(exc)


async def test_a_hole_in_the_lineage_is_a_gap_error_never_hopped(
    demo: DemoBucket, bucket: Path
) -> None:
    """A middle segment deleted from the bucket: the walk used to hop over its offsets."""
    async with ready_service(settings(demo, bucket)) as svc:
        segments = await svc.segments(TOPIC, 0)
        assert len(segments) >= 3
        middle = segments[1]
        for path in bucket.rglob(f"*{middle.segment_id}*"):
            path.unlink()
        assert svc.scanner is not None
        await svc.scanner.scan()
        with pytest.raises(RemoteGapError) as caught:
            await walk(svc, max_bytes=1 << 20)
        assert caught.value.start == middle.start_offset
        assert caught.value.end == middle.end_offset
        assert http_status(caught.value) == 502
        # Reading inside the hole fails the same way; after it, reads go on.
        with pytest.raises(RemoteGapError):
            await svc.fetch(TOPIC, 0, middle.start_offset + 1, max_bytes=100, isolation=RU,
                            deadline=Deadline.after(10))  # fmt: skip
        after = await svc.fetch(TOPIC, 0, middle.end_offset + 1, max_bytes=100, isolation=RU,
                                deadline=Deadline.after(10))  # fmt: skip
        assert after.batches[0].first_offset == middle.end_offset + 1


async def test_reading_past_the_end_is_still_out_of_range(demo: DemoBucket, bucket: Path) -> None:
    async with ready_service(settings(demo, bucket)) as svc:
        info = await svc.partition(TOPIC, 0)
        end = info.remote_log_end_offset
        at_end = await svc.fetch(TOPIC, 0, end, max_bytes=100, isolation=RU,
                                 deadline=Deadline.after(10))  # fmt: skip
        assert (at_end.batches, at_end.next_offset, at_end.log_end_offset) == ((), end, end)
        with pytest.raises(OffsetOutOfRangeError):
            await svc.fetch(TOPIC, 0, end + 1, max_bytes=100, isolation=RU,
                            deadline=Deadline.after(10))  # fmt: skip


@pytest.mark.parametrize("which", [0, 1, -1])
async def test_a_manifest_that_cannot_be_read_still_claims_its_offsets(
    demo: DemoBucket, bucket: Path, which: int
) -> None:
    """First, middle or last segment: its offsets used to vanish (the walk hopped over them,
    or ended early, or started late); now reading them names the manifest."""
    manifest = objects(bucket, "rsm-manifest")[which]
    async with ready_service(settings(demo, bucket)) as svc:
        segments = await svc.segments(TOPIC, 0)
    manifest.write_bytes(b'{"version": "1", "chunkIndex": ')
    async with ready_service(settings(demo, bucket)) as svc:
        lost = segments[which]
        with pytest.raises(CorruptManifestError, match=manifest.name):
            await svc.fetch(TOPIC, 0, lost.start_offset, max_bytes=100, isolation=RU,
                            deadline=Deadline.after(10))  # fmt: skip
        with pytest.raises(CorruptManifestError):
            await walk(svc, max_bytes=1 << 20)
        if which in (0, -1):  # the log's start or end is not known
            spec: OffsetSpec = "earliest" if which == 0 else "latest"
            with pytest.raises(CorruptManifestError):
                await svc.list_offsets(TOPIC, 0, spec, Deadline.after(10))
        with pytest.raises(CorruptManifestError):
            await svc.list_offsets(TOPIC, 0, "max_timestamp", Deadline.after(10))


async def test_leader_epochs_that_do_not_start_at_the_segment_start_are_unreadable(
    demo: DemoBucket, bucket: Path
) -> None:
    """``segmentLeaderEpochs`` {"0":0} damaged to {"0":1}: the remote log used to start at 1."""
    manifest = objects(bucket, "rsm-manifest")[0]
    text = manifest.read_bytes()
    assert b'"segmentLeaderEpochs":{"0":0}' in text
    manifest.write_bytes(
        text.replace(b'"segmentLeaderEpochs":{"0":0}', b'"segmentLeaderEpochs":{"0":1}')
    )
    async with ready_service(settings(demo, bucket)) as svc:
        with pytest.raises(CorruptManifestError, match="segmentLeaderEpochs"):
            await svc.list_offsets(TOPIC, 0, "earliest", Deadline.after(10))
