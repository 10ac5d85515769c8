"""Readiness and store faults in the real service over a filesystem copy of the demo bucket:
503 not_ready until the first scan has finished (with the reason when the store cannot be
listed), a rescan aborted by a store fault changes nothing, manifests that cannot be read keep
their claim, and an index load asked for with no time left is started, not dropped."""

from __future__ import annotations

import asyncio
import gc
import re
import shutil
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.api.statuses import http_status
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import (
    CorruptManifestError,
    DeadlineExceededError,
    KeyNotConfiguredError,
    NotReadyError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from gateway.remote.keys import ObjectKey, Suffix
from gateway.service.core import GatewayService
from gateway.service.open import open_service
from gateway.service.types import IsolationLevel
from tests.unit.service.support import metrics_text, ready_service

GHOST_ID = uuid.UUID(int=0x6057)


@pytest.fixture
def bucket(demo_copy: Path) -> Path:
    """A copy of the demo bucket this test may damage."""
    return demo_copy


def _settings(demo: DemoBucket, root: Path) -> Settings:
    return Settings(store=f"file://{root}", key_prefix=demo.key_prefix,
                    key_pairs=[demo.key_pair_spec])  # fmt: skip


@pytest.fixture
async def service(demo: DemoBucket, bucket: Path) -> AsyncIterator[GatewayService]:
    async with ready_service(_settings(demo, bucket)) as svc:
        assert svc.ready()
        yield svc


async def _until(condition: object, what: str, turns: int = 3000) -> None:
    """Wait for ``condition()`` (polled every 20 ms, up to a minute: only a hang fails)."""
    assert callable(condition)
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_data_answers_503_not_ready_until_the_store_can_be_listed(
    demo: DemoBucket, tmp_path: Path
) -> None:
    """A store root that is not there (an unmounted volume) is not an empty bucket: the
    service stays not ready and says why, and every data call is 503 not_ready, not 404."""
    root = tmp_path / "mnt" / "bucket"
    async with open_service(_settings(demo, root)) as svc:
        await _until(lambda: svc.readiness().reason != "the first bucket scan has not finished",
                     "the first scan to fail")  # fmt: skip
        readiness = svc.readiness()
        assert not readiness.ready and not svc.ready()
        assert readiness.reason is not None and "not a directory" in readiness.reason
        deadline = Deadline.after(30)
        calls = [
            svc.topics(),
            svc.partitions("orders"),
            svc.partition("orders", 0),
            svc.segments("orders", 0),
            svc.list_offsets("orders", 0, "earliest", deadline),
            svc.fetch("orders", 0, 0, max_bytes=1000,
                      isolation=IsolationLevel.READ_UNCOMMITTED, deadline=deadline),
        ]  # fmt: skip
        for call in calls:
            with pytest.raises(NotReadyError, match="not a directory") as caught:
                await call
            assert http_status(caught.value) == 503 and caught.value.retriable
        assert "tiered_gateway_ready 0.0" in metrics_text(svc)
        shutil.copytree(demo.root / "bucket", root)  # the volume is back
        await svc.wait_ready()  # the retried first scan
        assert "orders" in await svc.topics()
        assert (await svc.segments("orders", 0))[0].start_offset == 0


async def test_a_rescan_that_cannot_list_the_store_changes_nothing(
    service: GatewayService, bucket: Path
) -> None:
    """Today's bug: a store that could not be listed read as "every segment deleted"."""
    scanner = service.scanner
    before = {t: await service.partitions(t) for t in await service.topics()}
    segments = await service.segments("orders", 0)
    moved = bucket.with_name("bucket.away")
    bucket.rename(moved)
    try:
        with pytest.raises(StorageError, match="not a directory"):
            await scanner.scan()
    finally:
        moved.rename(bucket)
    assert scanner.counters.aborted == 1
    assert {t: await service.partitions(t) for t in await service.topics()} == before
    assert await service.segments("orders", 0) == segments
    assert "tiered_gateway_rescans_aborted_total 1.0" in metrics_text(service)
    assert service.readiness().ready
    report = await scanner.scan()  # the store is back: nothing to do
    assert (report.registered, report.removed) == (0, 0)


async def test_a_partition_whose_only_manifest_is_unreadable_is_502_not_unknown(
    demo: DemoBucket, bucket: Path
) -> None:
    key = ObjectKey(demo.key_prefix, "ghost", GHOST_ID, 3, 1000, uuid.UUID(int=7), Suffix.MANIFEST)
    path = bucket.joinpath(*key.key.split("/"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"version": "1", "chunkIndex": ')  # cut short
    async with ready_service(_settings(demo, bucket)) as svc:
        assert svc.ready()
        for call in (svc.segments("ghost", 3), svc.partition("ghost", 3), svc.partitions("ghost"),
                     svc.list_offsets("ghost", 3, "earliest", Deadline.after(30))):  # fmt: skip
            with pytest.raises(CorruptManifestError, match=re.escape(key.key)) as caught:
                await call
            assert http_status(caught.value) == 502
        with pytest.raises(UnknownTopicOrPartitionError):  # other partitions: unknown as ever
            await svc.segments("ghost", 0)
        assert GHOST_ID in (await svc.topics())["ghost"]
        readiness = svc.readiness()
        assert readiness.ready
        (bad,) = readiness.unreadable
        assert (bad.topic, bad.topic_id, bad.partition) == ("ghost", GHOST_ID, 3)
        assert (bad.start_offset, bad.key) == (1000, key.key)
        assert "CorruptManifestError" in bad.reason
        metrics = metrics_text(svc)
        assert 'tiered_gateway_unreadable_manifests{partition="3",topic="ghost"} 1.0' in metrics


async def test_an_index_load_asked_for_with_no_time_left_is_started_not_dropped(
    service: GatewayService,
) -> None:
    """``timeout_ms=1`` on a cold partition: the waiter gets 504 at once, but the load it asked
    for runs (no "coroutine was never awaited"), so the partition does not stay cold."""
    tp = service.rlmm.partition("orders", 1)
    meta = service.rlmm.list_remote_log_segments(tp)[0]
    cache = service.source.indexes_cache
    assert cache.stats().loads == 0
    passed = Deadline.after(-1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DeadlineExceededError):
            await service.source.indexes(meta, passed)
        gc.collect()
    assert [w for w in caught if "never awaited" in str(w.message)] == []
    await _until(lambda: cache.stats().entries == 1, "the load started for the late request")
    assert await service.source.indexes(meta, passed) is not None  # warm: served even so
    indexes = await service.source.indexes(meta, Deadline.after(30))
    assert indexes.base_offset == meta.start_offset
    stats = cache.stats()
    assert (stats.loads, stats.load_failures) == (1, 0)


async def test_wait_ready_returns_after_the_first_scan_and_raises_when_closing(
    demo: DemoBucket, tmp_path: Path
) -> None:
    """``wait_ready`` returns once the catalog is loaded; a service that closes before its
    first scan ever completes (the store is not there) ends the wait with ``NotReadyError``."""
    async with open_service(_settings(demo, demo.root / "bucket")) as svc:
        await svc.wait_ready()
        assert svc.ready() and "orders" in await svc.topics()
    async with open_service(_settings(demo, tmp_path / "absent")) as svc:
        waiter = asyncio.create_task(svc.wait_ready())
        await asyncio.sleep(0)
        assert not waiter.done()
    with pytest.raises(NotReadyError, match="closing"):
        await waiter


async def test_metrics_have_no_created_series_and_read_the_components(
    service: GatewayService,
) -> None:
    ru = IsolationLevel.READ_UNCOMMITTED
    await service.fetch(
        "orders", 0, 0, max_bytes=1 << 20, isolation=ru, deadline=Deadline.after(30)
    )
    text = metrics_text(service)
    assert "_created" not in text
    gets = re.search(r"^tiered_gateway_remote_gets_total (\S+)$", text, re.MULTILINE)
    assert gets is not None and float(gets.group(1)) == service.reader.counters.gets > 0
    assert 'tiered_gateway_remote_get_seconds_bucket{le="+Inf"}' in text
    assert "tiered_gateway_bucket_scans_total 1.0" in text
    hedges = service.reader.counters.hedges  # a loaded machine may hedge: read, not assumed
    assert f"tiered_gateway_remote_get_hedges_total {float(hedges)}" in text


async def test_an_unconfigured_key_pair_is_warned_at_start_and_answers_key_not_configured(
    demo: DemoBucket, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's ``payments`` topic is encrypted with the ``demo`` key pair: without it the
    start warns once, naming the id, the topic and the flag, and a read of it answers the typed
    500 ``key_not_configured`` (not a bare internal error); other topics read as ever."""
    settings = Settings(store=demo.store_url, key_prefix=demo.key_prefix)
    with caplog.at_level("WARNING", logger="gateway.service.open"):
        async with ready_service(settings) as svc:
            await _until(lambda: any("key pair id" in r.message for r in caplog.records),
                         "the warning after the first scan")  # fmt: skip
            with pytest.raises(KeyNotConfiguredError) as caught:
                await svc.fetch("payments", 0, 0, max_bytes=1 << 20,
                                isolation=IsolationLevel.READ_UNCOMMITTED,
                                deadline=Deadline.after(30))  # fmt: skip
            assert (http_status(caught.value), caught.value.code) == (500, "key_not_configured")
            assert not caught.value.retriable
            assert "'demo'" in str(caught.value) and "--key-pair demo=PATH" in str(caught.value)
            assert (await svc.partition("orders", 0)).partition == 0
    warned = [r.getMessage() for r in caplog.records if "key pair id" in r.getMessage()]
    assert len(warned) == 1
    assert "payments" in warned[0] and "'demo'" in warned[0] and "--key-pair demo=PATH" in warned[0]


async def test_a_bug_in_the_first_scan_surfaces_and_a_store_fault_is_retried(
    demo: DemoBucket, bucket: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: a store fault in the first scan is retried (not ready, saying why); a bug (an
    exception the domain does not name) is not retried forever behind a 503 that looks like a
    store fault: /readyz names it as an internal error, once."""
    from gateway.metadata.scan import BucketScanner  # noqa: PLC0415

    calls = {"n": 0}
    real = BucketScanner.scan

    async def failing(self: BucketScanner) -> object:
        calls["n"] += 1
        raise TypeError("a bug")

    monkeypatch.setattr(BucketScanner, "scan", failing)
    async with open_service(_settings(demo, bucket)) as svc:
        await _until(lambda: "internal error" in (svc.readiness().reason or ""), "the bug shown")
        reason = svc.readiness().reason or ""
        assert "TypeError: a bug" in reason and "not a store fault" in reason
        assert not svc.ready() and calls["n"] == 1
    faults = {"n": 0}

    async def flaky(self: BucketScanner) -> object:
        faults["n"] += 1
        if faults["n"] == 1:
            raise StorageError("the store is away")
        return await real(self)

    monkeypatch.setattr(BucketScanner, "scan", flaky)
    async with open_service(_settings(demo, bucket)) as svc:
        await svc.wait_ready()  # retried after the store fault
        assert faults["n"] >= 2 and "orders" in await svc.topics()
