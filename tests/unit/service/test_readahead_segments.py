"""Read-ahead across a segment border (issue 15; the plugin's prefetch stops at one): a reader
paging on whose read ends near a segment's end has the next segment's head loaded in the
background; a random read near an end loads nothing extra."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.service.core import GatewayService
from gateway.service.types import IsolationLevel
from tests.unit.service.support import ready_service

RU = IsolationLevel.READ_UNCOMMITTED
TOPIC = "orders"  # several segments per partition


@pytest.fixture
async def service(demo: DemoBucket) -> AsyncIterator[GatewayService]:
    settings = Settings(
        store=demo.store_url, key_prefix=demo.key_prefix, key_pairs=[demo.key_pair_spec],
        chunk_cache_bytes=8 << 20, readahead_bytes=1 << 20,
    )  # fmt: skip
    async with ready_service(settings) as svc:
        yield svc


async def _fetch(svc: GatewayService, offset: int) -> int:
    result = await svc.fetch(
        TOPIC, 0, offset, max_bytes=1, isolation=RU, deadline=Deadline.after(10)
    )
    return result.next_offset


async def test_a_paging_reader_has_the_next_segment_loaded_before_it_gets_there(
    service: GatewayService,
) -> None:
    first, second = (await service.segments(TOPIC, 0))[:2]
    cache = service.source.chunks
    # Random reads, one near the first segment's end: no read-ahead past it.
    await _fetch(service, first.end_offset)
    resume = await _fetch(service, first.start_offset)
    assert resume <= first.end_offset  # one batch: still inside the first segment
    await service.source.settle()
    assert cache.stats().readahead_chunks == 0
    # Paging on from there, within read-ahead of the end: the next segment's head loads.
    await _fetch(service, resume)
    await service.source.settle()
    after = cache.stats()
    assert after.readahead_chunks > 0
    await _fetch(service, second.start_offset)
    assert cache.stats().misses == after.misses  # its head was there when the reader came
