"""A batch's CRC is checked once, when its bytes enter the process (issue 30, "verified once,
served from memory"): a walk that pages through the log serves every batch, each checked
exactly once over the whole walk, however many pages slice it; a damaged record byte is still
a typed error."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gateway.deadline import Deadline
from gateway.demo import DemoBucket
from gateway.errors import CrcMismatchError
from gateway.kafka.batch import HEADER_SIZE, RecordBatch, iter_batches
from tests.unit.service.support import ready_service
from tests.unit.service.test_proofs import RU, TOPIC, edit, objects, settings, walk


async def test_every_batch_served_is_checked_exactly_once_over_a_walk(
    demo: DemoBucket, demo_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: Counter[int] = Counter()
    compute = RecordBatch.compute_crc

    def counting(batch: RecordBatch) -> int:
        checked[batch.base_offset] += 1
        return compute(batch)

    monkeypatch.setattr(RecordBatch, "compute_crc", counting)
    async with ready_service(settings(demo, demo_copy)) as svc:
        info = await svc.partition(TOPIC, 0)
        offset, served = info.remote_log_start_offset, Counter[int]()
        pages = 0
        while offset < info.remote_log_end_offset:
            result = await svc.fetch(
                TOPIC, 0, offset, max_bytes=4096, isolation=RU, deadline=Deadline.after(20)
            )
            await svc.decode(result, offset, RU)
            page = [b.base_offset for p in result.batches for b in iter_batches(p.data)]
            assert page, "every fetch serves a batch"
            served.update(page)
            offset, pages = result.next_offset, pages + 1
        assert pages > 10  # pages much smaller than a read window: most are sliced warm
        assert set(served.values()) == {1}
        assert {base: checked[base] for base in served} == dict.fromkeys(served, 1)


async def test_a_damaged_record_byte_is_a_crc_mismatch(demo: DemoBucket, demo_copy: Path) -> None:
    log = objects(demo_copy, "log")[0]
    first = next(iter_batches(log.read_bytes()))
    at = HEADER_SIZE + first.batch_length // 2  # inside the records, covered by the CRC

    def flip(data: bytearray) -> None:
        data[at] ^= 0x01

    edit(log, flip)
    async with ready_service(settings(demo, demo_copy)) as svc:
        with pytest.raises(CrcMismatchError):
            await walk(svc)
