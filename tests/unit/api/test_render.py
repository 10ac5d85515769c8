"""Raw responses keep ``X-Aborted-Transactions`` small: they end early instead."""

from __future__ import annotations

import uuid

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.api.render import MAX_ABORTED_HEADER, fit_aborted_header, raw_headers
from gateway.kafka.batch import iter_batches
from gateway.kafka.builder import RecordInput, build_batch
from gateway.service.types import AbortedTransaction, FetchedBatches, FetchResult


def _result(txns: int, per_segment: int) -> FetchResult:
    """``txns`` single-record transactional batches of distinct producers, all aborted, in
    segments of ``per_segment`` batches."""
    parts, batches = [], []
    for i in range(txns):
        pid = 10_000_000 + i
        batch = build_batch(
            i, [RecordInput(b"v")], producer_id=pid, producer_epoch=0, base_sequence=0,
            transactional=True,
        )  # fmt: skip
        batches.append(batch)
        if len(batches) == per_segment or i == txns - 1:
            first = i - len(batches) + 1
            parts.append(FetchedBatches(first, b"".join(batches), first, i))
            batches = []
    aborted = tuple(AbortedTransaction(10_000_000 + i, i) for i in range(txns))
    return FetchResult("t", uuid.uuid4(), 0, tuple(parts), txns, 0, txns, aborted)


def _offsets(result: FetchResult) -> list[int]:
    return [b.base_offset for part in result.batches for b in iter_batches(part.data)]


def test_a_small_list_is_left_alone() -> None:
    result = _result(20, 7)
    assert fit_aborted_header(result) is result


@given(st.integers(min_value=1, max_value=600), st.integers(min_value=1, max_value=50))
def test_the_header_fits_and_the_batches_are_a_prefix(txns: int, per_segment: int) -> None:
    result = _result(txns, per_segment)
    fitted = fit_aborted_header(result)
    header = raw_headers(fitted)["X-Aborted-Transactions"]
    kept = _offsets(fitted)
    assert kept == _offsets(result)[: len(kept)] and kept  # a prefix, never empty
    assert fitted.next_offset == kept[-1] + 1
    assert len(header) <= MAX_ABORTED_HEADER or len(kept) == 1
    needed = [t for t in result.aborted_transactions or () if t.first_offset <= kept[-1]]
    assert orjson.loads(header) == [
        {"producer_id": t.producer_id, "first_offset": t.first_offset} for t in needed
    ]
    for part in fitted.batches:  # the parts still describe their bytes
        inside = list(iter_batches(part.data))
        assert (inside[0].base_offset, inside[-1].last_offset) == (
            part.first_offset,
            part.last_offset,
        )


def test_the_first_batch_is_kept_even_when_its_list_alone_overflows() -> None:
    fitted = fit_aborted_header(_result(5, 5), limit=10)
    assert _offsets(fitted) == [0] and fitted.next_offset == 1
