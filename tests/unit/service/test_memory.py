"""Giving freed heap memory back: glibc's calls, and the trimmer driven by the byte budget."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import platform
import subprocess
import sys
import threading

import pytest
from fastapi.testclient import TestClient

from gateway.api import create_app
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.service.admission import ByteBudget
from gateway.service.memory import (
    GLIBC_ENV,
    MMAP_THRESHOLD,
    Glibc,
    Trimmer,
    collector_settled,
    heap_returned,
    limit_arenas,
)
from tests.fakes.orders import orders

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
MIB = 1 << 20


class Recording(Glibc):
    """The process's glibc, noting the threads that trim and the thresholds set."""

    def __init__(self) -> None:
        lib = Glibc.load()
        assert lib is not None
        self.__dict__.update(lib.__dict__)
        self.trim_threads: list[int] = []
        self.thresholds: list[int] = []
        self.held = 0
        self.trimmed = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def trim(self) -> bool:
        self.trim_threads.append(threading.get_ident())
        self.loop.call_soon_threadsafe(self.trimmed.set)
        return super().trim()

    def fix_mmap_threshold(self, nbytes: int = MMAP_THRESHOLD) -> bool:
        self.thresholds.append(nbytes)
        return super().fix_mmap_threshold(nbytes)

    def hold_freed(self) -> bool:
        self.held += 1
        return super().hold_freed()


async def _pass(budget: ByteBudget, nbytes: int) -> None:
    """A response of ``nbytes`` in and out of the budget."""
    async with budget.hold(nbytes, Deadline.after(1)):
        pass


def test_glibc_trims_and_takes_the_mmap_threshold() -> None:
    glibc = Glibc.load()
    assert glibc is not None
    block = bytearray(64 * MIB)  # a freed block for malloc_trim to find
    del block
    assert isinstance(glibc.trim(), bool)
    assert glibc.fix_mmap_threshold()
    assert glibc.hold_freed()


async def test_due_after_enough_bytes_given_back_then_not_until_more() -> None:
    budget = ByteBudget(64 * MIB)
    glibc = Recording()
    trimmer = Trimmer(budget, glibc, min_released=10 * MIB)
    held = await budget.acquire(MIB, Deadline.after(1))  # in flight: the budget never drains
    assert not trimmer.due() and not await trimmer.trim_if_due()
    await _pass(budget, 4 * MIB)
    assert not trimmer.due()
    await _pass(budget, 6 * MIB)
    assert trimmer.due()
    assert await trimmer.trim_if_due()
    assert trimmer.stats.trims == 1 and trimmer.stats.seconds >= trimmer.stats.longest_s > 0
    assert not trimmer.due()  # counted from the last trim
    budget.release(held)


async def test_due_once_the_budget_drains_after_any_release() -> None:
    budget = ByteBudget(64 * MIB)
    trimmer = Trimmer(budget, Recording(), min_released=1 << 40)
    assert not trimmer.due()  # drained, but nothing given back yet
    held = await budget.acquire(MIB, Deadline.after(1))
    await _pass(budget, MIB)
    assert not trimmer.due()  # something still in flight
    budget.release(held)
    assert trimmer.due()
    assert await trimmer.trim_if_due()
    assert not trimmer.due()


async def test_trims_in_a_worker_thread_never_on_the_loop() -> None:
    budget = ByteBudget(MIB)
    glibc = Recording()
    trimmer = Trimmer(budget, glibc, min_released=1)
    await _pass(budget, 1)
    assert await trimmer.trim_if_due()
    assert glibc.trim_threads and threading.get_ident() not in glibc.trim_threads


async def test_without_glibc_nothing_is_ever_due() -> None:
    budget = ByteBudget(MIB)
    trimmer = Trimmer(budget, None, min_released=1)
    await _pass(budget, MIB)
    assert not trimmer.due() and not await trimmer.trim_if_due()
    async with heap_returned(budget, interval_s=0.001) as running:
        assert isinstance(running.glibc, Glibc)  # none given: the process's own, loaded


async def test_heap_returned_holds_freed_blocks_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    glibc = Recording()
    for name in GLIBC_ENV:
        monkeypatch.delenv(name, raising=False)
    async with heap_returned(ByteBudget(MIB), glibc, mmap_threshold=None):
        assert (glibc.thresholds, glibc.held) == ([], 1)
    async with heap_returned(ByteBudget(MIB), glibc, mmap_threshold=MIB):
        assert (glibc.thresholds, glibc.held) == ([MIB], 1)
    for name in GLIBC_ENV:  # glibc read its own thresholds from the environment: left alone
        with monkeypatch.context() as env:
            env.setenv(name, "1048576")
            async with heap_returned(ByteBudget(MIB), glibc, mmap_threshold=None):
                assert (glibc.thresholds, glibc.held) == ([MIB], 1)


async def test_heap_returned_fixes_the_threshold_and_trims_until_the_block_ends() -> None:
    budget = ByteBudget(MIB)
    glibc = Recording()
    async with heap_returned(budget, glibc, interval_s=0.001, min_released=1) as trimmer:
        assert glibc.thresholds == [MMAP_THRESHOLD]
        await _pass(budget, 1)
        await asyncio.wait_for(glibc.trimmed.wait(), 30)
    trims = trimmer.stats.trims
    assert trims >= 1
    await _pass(budget, MIB)  # due again, but the trimmer is gone
    for _ in range(20):
        await asyncio.sleep(0.002)
    assert trimmer.stats.trims == trims and trimmer.due()


def test_the_app_runs_the_trimmer_for_its_lifespan(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.service.memory")
    app = create_app(Settings(store="file:///nonexistent"), orders().factory())
    with TestClient(app, base_url="http://localhost") as client:
        r = client.get("/v1/topics/orders/partitions/0/records", params={"offset": 0})
        assert r.status_code == 200, r.text
        assert not any("heap trims" in m for m in caplog.messages)  # still running
    assert any(m.startswith("heap trims: ") for m in caplog.messages)  # stopped with the app


class _Loading:
    """A service whose catalog loads when told."""

    def __init__(self) -> None:
        self.loaded = asyncio.Event()

    async def wait_ready(self) -> None:
        await self.loaded.wait()


async def test_the_collector_settles_only_once_the_catalog_is_loaded() -> None:
    service = _Loading()
    gc.unfreeze()
    try:
        settling = asyncio.create_task(collector_settled(service))  # type: ignore[arg-type]
        for _ in range(5):
            await asyncio.sleep(0)
        assert not settling.done() and gc.get_freeze_count() == 0
        assert any(o is service for o in gc.get_objects())  # walked by every full collection
        service.loaded.set()
        await asyncio.wait_for(settling, 30)
        assert gc.get_freeze_count() > 0
        assert not any(o is service for o in gc.get_objects())  # out of the collector's sight
    finally:
        gc.unfreeze()


ARENAS = """
import ctypes, sys, threading
from gateway.service.memory import limit_arenas
print(limit_arenas(int(sys.argv[1])), flush=True)
together = threading.Barrier(8)
held = []
def use():
    held.append(bytearray(100_000))  # below the mmap threshold: from this thread's arena
    together.wait()
threads = [threading.Thread(target=use) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()  # "Arena N:" per arena, on stderr
"""


@pytest.mark.parametrize(("arenas", "most"), [(2, 2), (1, 1)])
def test_limit_arenas_bounds_the_arenas_threads_make(arenas: int, most: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    unlimited = subprocess.run(
        [sys.executable, "-c", ARENAS, "0"], capture_output=True, text=True, env=env, check=True
    )
    limited = subprocess.run(
        [sys.executable, "-c", ARENAS, str(arenas)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert unlimited.stdout.split() == ["False"] and limited.stdout.split() == ["True"]
    assert unlimited.stderr.count("Arena ") > 2  # glibc's default: one per thread here
    assert limited.stderr.count("Arena ") == most


def test_limit_arenas_leaves_the_environment_to_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")

    class Refusing(Glibc):
        def __init__(self) -> None:
            pass

        def limit_arenas(self, arenas: int) -> bool:
            raise AssertionError("not called when the environment sets it")

    assert not limit_arenas(2, Refusing())
