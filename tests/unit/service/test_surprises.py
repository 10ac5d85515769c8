"""Issue 14's surprises in the real service over the demo bucket: a fetch at exactly the remote
log end is an empty answer (Kafka's fetch at the high watermark), not out of range; and the
segment listing says which upload a re-upload displaced."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.demo import DemoBucket, write_demo_bucket
from gateway.errors import OffsetOutOfRangeError
from gateway.service.core import GatewayService
from gateway.service.types import IsolationLevel
from tests.unit.service.support import ready_service


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoBucket:
    return write_demo_bucket(tmp_path_factory.mktemp("demo") / "bucket-root")


@pytest.fixture
async def service(demo: DemoBucket) -> AsyncIterator[GatewayService]:
    settings = Settings(
        store=demo.store_url, key_prefix=demo.key_prefix, key_pairs=[demo.key_pair_spec]
    )
    async with ready_service(settings) as svc:
        yield svc


@pytest.mark.parametrize("isolation", list(IsolationLevel))
@pytest.mark.parametrize(("topic", "partition"), [("orders", 0), ("payments", 1)])
async def test_a_fetch_at_the_log_end_is_empty_and_past_it_out_of_range(
    service: GatewayService, topic: str, partition: int, isolation: IsolationLevel
) -> None:
    end = (await service.partition(topic, partition)).remote_log_end_offset
    assert end > 0
    result = await service.fetch(
        topic, partition, end, max_bytes=100, isolation=isolation, deadline=Deadline.after(10)
    )
    assert (result.batches, result.next_offset, result.log_end_offset) == ((), end, end)
    expect_aborted = () if isolation is IsolationLevel.READ_COMMITTED else None
    assert result.aborted_transactions == expect_aborted
    assert await service.decode(result, end, isolation) == []
    with pytest.raises(OffsetOutOfRangeError) as caught:
        await service.fetch(
            topic, partition, end + 1, max_bytes=100, isolation=isolation,
            deadline=Deadline.after(10),
        )  # fmt: skip
    assert caught.value.log_end_offset == end


async def test_following_next_offset_reaches_the_end_without_an_error(
    service: GatewayService,
) -> None:
    info = await service.partition("orders", 0)
    offset, seen = info.remote_log_start_offset, 0
    while True:
        result = await service.fetch(
            "orders", 0, offset, max_bytes=4096, isolation=IsolationLevel.READ_UNCOMMITTED,
            deadline=Deadline.after(10),
        )  # fmt: skip
        seen += len(result.batches)
        offset = result.next_offset
        if offset >= result.log_end_offset:
            break
    assert offset == info.remote_log_end_offset and seen > 0


async def test_the_listing_marks_the_displaced_re_upload(service: GatewayService) -> None:
    """The demo's ``inventory`` uploads its first segment twice; the later upload displaces
    the first: both are COPY_SEGMENT_FINISHED, only the first is displaced, by the second."""
    segments = await service.segments("inventory", 0)
    displaced = [s for s in segments if s.displaced]
    assert len(displaced) == 1
    (old,) = displaced
    new = next(s for s in segments if s.segment_id == old.displaced_by)
    assert old.state == new.state == "COPY_SEGMENT_FINISHED"
    assert (old.start_offset, old.end_offset) == (new.start_offset, new.end_offset)
    assert new.event_timestamp_ms > old.event_timestamp_ms
    assert not new.displaced and new.displaced_by is None
    others = [s for s in segments if s.segment_id not in (old.segment_id, new.segment_id)]
    assert others and not any(s.displaced or s.displaced_by for s in others)
    for s in await service.segments("orders", 0):
        assert not s.displaced and s.displaced_by is None
