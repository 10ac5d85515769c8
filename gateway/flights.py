"""One load per key at a time (single flight), shared by the caches that load one key per miss:
who misses while a load of the key runs joins it instead of starting another."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Flights(Generic[K, V]):
    """The loads in flight, by key. A load's task leaves as soon as it ends (a caller that
    misses afterwards starts a new one, so a failure is never handed to a later caller), and
    its exception is marked retrieved (every waiter may have given up)."""

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Task[V]] = {}

    def join(self, key: K, load: Callable[[], Coroutine[Any, Any, V]]) -> asyncio.Task[V]:
        """The load of ``key`` that runs, or a new one of ``load()``. Await it shielded or
        within a deadline: one waiter giving up must not cancel it for the others."""
        task = self._running.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._run(key, load))
            self._running[key] = task
            task.add_done_callback(_retrieve)
        return task

    async def _run(self, key: K, load: Callable[[], Coroutine[Any, Any, V]]) -> V:
        try:
            return await load()
        finally:
            if self._running.get(key) is asyncio.current_task():
                del self._running[key]

    def tasks(self) -> list[asyncio.Task[V]]:
        """The loads in flight (to cancel them on close)."""
        return list(self._running.values())

    def __contains__(self, key: object) -> bool:
        return key in self._running


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
