"""The remote last stable offset in the service itself (no server): its edges.

The bucket of :mod:`tests.integration.test_kafka_listener_stable` in small (partitions ending
inside a transaction; ``open-span.v1``'s opened in the segment before the last), read by a
:class:`~gateway.service.core.GatewayService` over a filesystem store:

* read_committed pages stop at the LSO, an offset in [LSO, end) is ``TransactionPendingError``
  carrying the bounds, ListOffsets latest answers it, a timestamp first reached past it none;
* the snapshot is read once per tail segment for any number of concurrent readers, and a
  failed read is not kept;
* a manifest that cannot be read after the readable tail (it may hold the marker): no stable
  point is said, ``CorruptManifestError`` instead (before, a pending answer with an LSO too
  low: a bounded reader ended early);
* retention past the open transaction's first offset: the LSO is the remote log start (as a
  broker clamps it to its log start).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import pytest

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import (
    CorruptManifestError,
    StorageUnavailableError,
    TransactionPendingError,
)
from gateway.remote.keys import Suffix
from gateway.remote.manifest import IndexType
from gateway.remote.tiering import SegmentObjects, TieringOptions
from gateway.service.core import GatewayService
from gateway.service.types import IsolationLevel
from gateway.storage.filesystem import FilesystemStore
from tests.integration.independent_bucket import (
    KEY_ID,
    KEY_PREFIX,
    IndependentBucket,
    Shape,
    TopicSpec,
    WrittenPartition,
    upload_all,
    write_independent_bucket,
)
from tests.unit.service.support import ready_service

COMMITTED: Final = IsolationLevel.READ_COMMITTED
SMALL: Final = {"big_value": 5000, "max_value": 40, "index_interval_bytes": 256}
TAIL: Final = (
    TopicSpec("open-tail.v1", TieringOptions(chunk_size=1000)),
    TopicSpec("open-tail-sealed.v2", TieringOptions(chunk_size=512, encrypt_with=KEY_ID)),
)
SPAN: Final = (TopicSpec("open-span.v1", TieringOptions(chunk_size=700)),)


@dataclasses.dataclass(frozen=True)
class Built:
    tail: IndependentBucket
    span: IndependentBucket
    folder: Path  # the bucket, both written into it

    @property
    def partitions(self) -> dict[tuple[str, int], WrittenPartition]:
        return {**self.tail.partitions, **self.span.partitions}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("stable-service")
    tail = write_independent_bucket(root / "tail", topics=TAIL, shape=Shape(batches=44, **SMALL))
    span = write_independent_bucket(
        root / "span", topics=SPAN, shape=Shape(batches=36, roll_every=17, **SMALL)
    )
    folder = root / "bucket"
    folder.mkdir()
    asyncio.run(upload_all(FilesystemStore(folder), tail))
    asyncio.run(upload_all(FilesystemStore(folder), span))
    return Built(tail, span, folder)


def _settings(built: Built, folder: Path | None = None) -> Settings:
    return Settings(
        store=(folder or built.folder).as_uri(),
        key_prefix=KEY_PREFIX,
        key_pairs=[built.tail.key_pair_spec],
    )


@pytest.fixture
async def service(built: Built) -> AsyncIterator[GatewayService]:
    async with ready_service(_settings(built)) as svc:
        yield svc


def _deadline() -> Deadline:
    return Deadline.after(30)


async def test_read_committed_stops_at_the_last_stable_offset(
    service: GatewayService, built: Built
) -> None:
    for (topic, partition), written in built.partitions.items():
        stable = written.last_stable_offset
        assert written.open_from is not None and stable < written.next_offset
        offsets: list[int] = []
        offset = 0
        while offset < stable:
            result = await service.fetch(topic, partition, offset, max_bytes=2000,
                                         isolation=COMMITTED, deadline=_deadline())  # fmt: skip
            assert result.last_stable_offset == stable
            assert result.next_offset > offset
            offsets += [r.offset for r in await service.decode(result, offset, COMMITTED)]
            offset = result.next_offset
        assert offset == stable
        assert offsets == [w.offset for w in written.stable()], topic
        for at in (stable, written.next_offset - 1):
            with pytest.raises(TransactionPendingError) as caught:
                await service.fetch(topic, partition, at, max_bytes=2000, isolation=COMMITTED,
                                    deadline=_deadline())  # fmt: skip
            bounds = (caught.value.log_start_offset, caught.value.log_end_offset,
                      caught.value.last_stable_offset)  # fmt: skip
            assert bounds == (0, written.next_offset, stable)
            assert caught.value.topic_id == (await service.partition(topic, partition)).topic_id
        uncommitted = await service.fetch(topic, partition, stable, max_bytes=1 << 20,
                                          isolation=IsolationLevel.READ_UNCOMMITTED,
                                          deadline=_deadline())  # fmt: skip
        assert uncommitted.last_stable_offset is None and uncommitted.batches
        latest = await service.list_offsets(topic, partition, "latest", _deadline(),
                                            isolation=COMMITTED)  # fmt: skip
        assert latest.offset == stable
        end = await service.list_offsets(topic, partition, "latest", _deadline())
        assert end.offset == written.next_offset


async def test_a_timestamp_first_reached_past_the_stable_offset_is_none_for_read_committed(
    service: GatewayService, built: Built
) -> None:
    for (topic, partition), written in built.partitions.items():
        stable = written.last_stable_offset
        before = max(s.batch_max_timestamp for s in written.stamps if s.offset < stable)
        found = await service.list_offsets(topic, partition, before + 1, _deadline())
        assert found.offset >= stable  # read_uncommitted: in the open transaction
        none = await service.list_offsets(topic, partition, before + 1, _deadline(),
                                          isolation=COMMITTED)  # fmt: skip
        assert (none.offset, none.timestamp) == (-1, -1)
        inside = await service.list_offsets(topic, partition, before, _deadline(),
                                            isolation=COMMITTED)  # fmt: skip
        assert 0 <= inside.offset < stable


async def test_the_snapshot_is_read_once_and_a_failed_read_is_not_kept(
    service: GatewayService, built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader: Any = service.source._reader  # counting the GETs of the piece
    real = reader.read_index_piece
    calls: list[IndexType] = []
    fail = [True]
    flights: Any = service.source._reading_txns  # the single flight the callers join
    join = flights.join
    joined = {"n": 0, "all": asyncio.Event()}

    def counted_join(key: Any, load: Any) -> Any:
        joined["n"] += 1
        if joined["n"] == 20:
            joined["all"].set()
        return join(key, load)

    monkeypatch.setattr(flights, "join", counted_join)

    async def counting(segment: Any, kind: IndexType, deadline: Deadline) -> bytes | None:
        calls.append(kind)
        if fail[0]:  # the read ends only once all 20 callers have joined it: no timing
            try:
                await asyncio.wait_for(joined["all"].wait(), 60)
            except TimeoutError:
                raise AssertionError(f"only {joined['n']} of 20 callers joined") from None
        if fail[0]:
            raise StorageUnavailableError("injected")
        return await real(segment, kind, deadline)  # type: ignore[no-any-return]

    monkeypatch.setattr(reader, "read_index_piece", counting)
    written = built.partitions[("open-tail.v1", 0)]

    def latest() -> Any:
        return service.list_offsets("open-tail.v1", 0, "latest", _deadline(), isolation=COMMITTED)

    outcomes = await asyncio.gather(*(latest() for _ in range(20)), return_exceptions=True)
    assert all(isinstance(o, StorageUnavailableError) for o in outcomes), outcomes
    assert calls == [IndexType.PRODUCER_SNAPSHOT]  # one read for the 20
    fail[0] = False
    answers = await asyncio.gather(*(latest() for _ in range(20)))
    assert {a.offset for a in answers} == {written.last_stable_offset}
    assert len(calls) == 2  # the failure was not kept; the success is
    await latest()
    assert len(calls) == 2


def _meta(objects: SegmentObjects) -> Any:
    meta = objects.manifest.remote_log_segment_metadata
    assert meta is not None
    return meta


def _uploads(bucket: IndependentBucket, topic: str) -> list[SegmentObjects]:
    return sorted((o for o in bucket.uploads if _meta(o).topic == topic),
                  key=lambda o: _meta(o).start_offset)  # fmt: skip


def _copy(built: Built, dest: Path, change: Callable[[Path], None]) -> Path:
    folder = dest / "bucket"
    shutil.copytree(built.folder, folder)
    change(folder)
    return folder


async def test_an_unreadable_manifest_after_the_tail_says_no_stable_offset(
    built: Built, tmp_path: Path
) -> None:
    """The unreadable segment may hold the marker: the LSO (and the end) are unknown."""
    tail = _uploads(built.tail, "open-tail.v1")[-1]
    written = built.partitions[("open-tail.v1", 0)]

    def garbage_after_the_tail(folder: Path) -> None:
        key = dataclasses.replace(
            tail.key, start_offset=written.next_offset, segment_id=uuid.UUID(int=77)
        ).with_suffix(Suffix.MANIFEST)
        (folder / key.key).write_bytes(b"{not a manifest")

    folder = _copy(built, tmp_path, garbage_after_the_tail)
    async with ready_service(_settings(built, folder)) as svc:
        stable = written.last_stable_offset
        with pytest.raises(CorruptManifestError, match="cannot be read"):
            await svc.fetch("open-tail.v1", 0, stable, max_bytes=2000, isolation=COMMITTED,
                            deadline=_deadline())  # fmt: skip
        with pytest.raises(CorruptManifestError):
            await svc.list_offsets("open-tail.v1", 0, "latest", _deadline(), isolation=COMMITTED)
        before = max(s.batch_max_timestamp for s in written.stamps if s.offset < stable)
        with pytest.raises(CorruptManifestError):
            await svc.list_offsets("open-tail.v1", 0, before + 1, _deadline(),
                                   isolation=COMMITTED)  # fmt: skip


async def test_retention_past_the_open_transaction_start_clamps_to_the_log_start(
    built: Built, tmp_path: Path
) -> None:
    """``open-span.v1``'s transaction opened in the segment before the last; retention deleted
    every segment but the last: the LSO is the remote log start, and read_committed reads
    nothing (its first batches belong to the undecided transaction)."""
    uploads = _uploads(built.span, "open-span.v1")
    last = uploads[-1]
    written = built.partitions[("open-span.v1", 0)]
    assert written.open_from is not None and written.open_from < _meta(last).start_offset

    def delete_all_but_the_last(folder: Path) -> None:
        for objects in uploads[:-1]:
            for suffix in (Suffix.MANIFEST, Suffix.LOG, Suffix.INDEXES):
                (folder / objects.key.with_suffix(suffix).key).unlink()

    folder = _copy(built, tmp_path, delete_all_but_the_last)
    async with ready_service(_settings(built, folder)) as svc:
        start = _meta(last).start_offset
        with pytest.raises(TransactionPendingError) as caught:
            await svc.fetch("open-span.v1", 0, start, max_bytes=2000, isolation=COMMITTED,
                            deadline=_deadline())  # fmt: skip
        assert caught.value.last_stable_offset == start
        assert caught.value.log_start_offset == start
        latest = await svc.list_offsets("open-span.v1", 0, "latest", _deadline(),
                                        isolation=COMMITTED)  # fmt: skip
        assert latest.offset == start
