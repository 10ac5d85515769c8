"""The listener's topic-id map (:class:`gateway.listener.context.TopicIds`): Fetch v13+ names
topics by id, and listing the catalog for every request scanned every topic; the map is kept,
and listed again only when stale or when an id asked is not in it (at most every 100 ms)."""

from __future__ import annotations

import asyncio
import uuid

from gateway.errors import NotReadyError
from gateway.listener.context import TOPIC_IDS_MAX_AGE_S, TOPIC_IDS_MISS_S, TopicIds

OLD, NEW, OTHER = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


class Catalog:
    def __init__(self) -> None:
        self.topics_by_name: dict[str, list[uuid.UUID]] = {"t": [OLD]}
        self.listings = 0

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        self.listings += 1
        return {name: list(ids) for name, ids in self.topics_by_name.items()}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_known_ids_are_listed_once_unknown_ones_at_most_every_miss_interval() -> None:
    async def run() -> None:
        catalog, clock = Catalog(), Clock()
        ids = TopicIds(clock)
        assert await ids.names(catalog, [OLD]) == {OLD: "t"}  # type: ignore[arg-type]
        for _ in range(5):
            clock.now += 1
            assert await ids.names(catalog, [OLD]) == {OLD: "t"}  # type: ignore[arg-type]
        assert catalog.listings == 1
        assert OTHER not in await ids.names(catalog, [OTHER])  # type: ignore[arg-type]
        assert catalog.listings == 2  # a miss lists again...
        assert OTHER not in await ids.names(catalog, [OTHER])  # type: ignore[arg-type]
        assert catalog.listings == 2  # ...but not twice within the interval
        clock.now += 1.5 * TOPIC_IDS_MISS_S
        catalog.topics_by_name["t"] = [NEW, OLD]  # re-created: the newest id is served
        assert await ids.names(catalog, [NEW]) == {NEW: "t"}  # type: ignore[arg-type]
        assert catalog.listings == 3
        catalog.topics_by_name["u"] = [OTHER]
        clock.now += TOPIC_IDS_MAX_AGE_S  # stale: listed again though nothing is missing
        assert await ids.names(catalog, [NEW]) == {NEW: "t", OTHER: "u"}  # type: ignore[arg-type]
        assert catalog.listings == 4

    asyncio.run(run())


class GatedCatalog(Catalog):
    """Each listing waits for ``gate``; ``fail`` makes the next listing raise."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.fail = False

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        self.listings += 1
        await self.gate.wait()
        if self.fail:
            self.fail = False
            raise NotReadyError("the catalog of remote segments is not loaded yet")
        return {name: list(ids) for name, ids in self.topics_by_name.items()}


def test_concurrent_misses_share_one_listing_and_a_failure_is_not_kept() -> None:
    """Twenty Fetches missing an id at once list the catalog once (before: twenty scans);
    a waiter that goes away does not cancel the listing for the others; a failed listing is
    every waiter's error and is not kept: the next request lists again."""

    async def run() -> None:
        catalog, clock = GatedCatalog(), Clock()
        ids = TopicIds(clock)
        waiters = [asyncio.ensure_future(ids.names(catalog, [OLD])) for _ in range(20)]  # type: ignore[arg-type]
        for _ in range(5):
            await asyncio.sleep(0)
        waiters[0].cancel()
        catalog.gate.set()
        results = await asyncio.gather(*waiters[1:])
        assert results == [{OLD: "t"}] * 19
        assert catalog.listings == 1

        clock.now += TOPIC_IDS_MAX_AGE_S
        catalog.gate.clear()
        catalog.fail = True
        failing = [asyncio.ensure_future(ids.names(catalog, [OLD])) for _ in range(5)]  # type: ignore[arg-type]
        for _ in range(5):
            await asyncio.sleep(0)
        catalog.gate.set()
        outcomes = await asyncio.gather(*failing, return_exceptions=True)
        assert all(isinstance(o, NotReadyError) for o in outcomes)
        assert catalog.listings == 2
        assert await ids.names(catalog, [OLD]) == {OLD: "t"}  # type: ignore[arg-type]
        assert catalog.listings == 3

    asyncio.run(run())
