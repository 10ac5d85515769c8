"""The compiled record path of a fetch (:class:`ColumnRecords`) against the record decoders,
on whole and corrupted batches: the same records, or the same typed error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.kafka.builder import RecordInput, build_batch
from gateway.service import records as records_module
from gateway.service.records import ColumnRecords, DecodedRecords, decode_records
from gateway.service.types import FetchedBatches, IsolationLevel

RU = IsolationLevel.READ_UNCOMMITTED
FIELD = st.none() | st.binary(max_size=40)
RECORD = st.tuples(FIELD, FIELD, st.lists(st.tuples(st.text(max_size=3), FIELD), max_size=2))


def _outcome(data: bytes, last: int, offset: int) -> Any:
    try:
        got = decode_records((FetchedBatches(0, data, 0, last),), offset, RU, None)
    except GatewayError as exc:
        return type(exc)
    return [
        (r.offset, r.timestamp, r.record.key, r.record.value, list(r.record.headers),
         r.log_append_time, r.leader_epoch)
        for r in got
    ]  # fmt: skip


def _reference(monkeypatch: pytest.MonkeyPatch, data: bytes, last: int, offset: int) -> Any:
    with monkeypatch.context() as m:
        m.setattr(records_module.ColumnRecords, "decode", classmethod(lambda *a: None))
        return _outcome(data, last, offset)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    recs=st.lists(RECORD, min_size=1, max_size=6),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=3),
    offset=st.integers(0, 3),
    log_append=st.booleans(),
)
def test_corrupted_records_decode_as_the_record_decoders_say(
    monkeypatch: pytest.MonkeyPatch,
    recs: list[tuple[bytes | None, bytes | None, list[Any]]],
    flips: list[tuple[int, int]],
    offset: int,
    log_append: bool,
) -> None:
    inputs = [
        RecordInput(v, key=k, headers=h, timestamp=10 + i) for i, (k, v, h) in enumerate(recs)
    ]
    batch = bytearray(build_batch(0, inputs, log_append_time=99 if log_append else None))
    for where, mask in flips:  # the records section only: the header is the framing's to check
        batch[61 + where % (len(batch) - 61)] ^= mask
    data = bytes(batch)
    assert _outcome(data, len(recs) - 1, offset) == _reference(
        monkeypatch, data, len(recs) - 1, offset
    )


def test_whole_batches_take_the_compiled_path() -> None:
    data = build_batch(5, [RecordInput(b"a", key=b"k"), RecordInput(None)]) + build_batch(
        7, [RecordInput(b"c", headers=[("h", None)])], log_append_time=4, partition_leader_epoch=2
    )
    got = decode_records((FetchedBatches(5, data, 5, 7),), 6, RU, None)
    assert isinstance(got, ColumnRecords)
    assert [(r.offset, r.record.key, r.record.value, list(r.record.headers)) for r in got] == [
        (6, None, None, []),
        (7, None, b"c", [("h", None)]),
    ]
    assert [(r.timestamp, r.log_append_time, r.leader_epoch) for r in got][1] == (4, True, 2)
    assert len(got) == 2 and got[-1].offset == 7
    assert isinstance(DecodedRecords(got.groups)[0].offset, int)


def test_an_offset_past_int64_goes_to_the_record_decoders() -> None:
    """The loop's int64 addition would wrap: it leaves the batch to the record decoders."""
    base = (1 << 63) - 2
    data = build_batch(base, [RecordInput(b"a"), RecordInput(b"b", offset_delta=5)])
    got = decode_records((FetchedBatches(base, data, base, base + 1),), base, RU, None)
    assert isinstance(got, DecodedRecords)
