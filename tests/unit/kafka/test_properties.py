"""Hypothesis properties of the batch codec: round trips, fast == reference, corruption."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.kafka import fast
from gateway.kafka.batch import iter_batches
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.codecs import Codec

Decoded = list[tuple[object, ...]]

headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3
)
record = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=64)),
    key=st.one_of(st.none(), st.binary(max_size=16)),
    headers=headers,
    timestamp=st.integers(0, 2**41),
)
batch_args = st.fixed_dictionaries(
    {
        "records": st.lists(record, min_size=1, max_size=8),
        "codec": st.sampled_from(list(Codec)),
        "log_append_time": st.one_of(st.none(), st.integers(0, 2**41)),
        "partition_leader_epoch": st.integers(-1, 2**31 - 1),
    }
)
segments = st.lists(batch_args, min_size=1, max_size=4)


def _segment(args: list[dict[str, object]]) -> bytes:
    out, offset = [], 0
    for a in args:
        recs = a["records"]
        assert isinstance(recs, list)
        out.append(build_batch(offset, **a))  # type: ignore[arg-type]
        offset += len(recs)
    return b"".join(out)


def _decode(
    data: bytes, verify_crc: bool = True, offset_range: tuple[int, int] | None = None
) -> Decoded:
    return [
        (r.offset, r.timestamp, r.key, r.value, r.headers)
        for b in iter_batches(data, offset_range=offset_range)
        for r in b.records(verify_crc=verify_crc)
    ]


@contextmanager
def _reference_only() -> Iterator[None]:
    saved = fast._CBatch
    fast._CBatch = None
    try:
        yield
    finally:
        fast._CBatch = saved


def _expected(args: list[dict[str, object]]) -> Decoded:
    out: Decoded = []
    offset = 0
    for a in args:
        recs = a["records"]
        assert isinstance(recs, list)
        lat = a["log_append_time"]
        for r in recs:
            ts = lat if lat is not None else r.timestamp
            out.append((offset, ts, r.key, r.value, list(r.headers)))
            offset += 1
    return out


@settings(max_examples=200, deadline=None)
@given(segments)
def test_round_trip_on_both_decoders(args: list[dict[str, object]]) -> None:
    data = _segment(args)
    assert _decode(data) == _expected(args)
    with _reference_only():
        assert _decode(data) == _expected(args)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments, st.integers(min_value=0), st.integers(1, 255))
def test_any_flipped_byte_gives_a_typed_error_or_a_correct_decode(
    args: list[dict[str, object]], where: int, xor: int
) -> None:
    data = bytearray(_segment(args))
    data[where % len(data)] ^= xor
    expected = _expected(args)
    try:
        got = _decode(bytes(data), offset_range=(0, len(expected) - 1))
    except GatewayError:
        return
    # Only bytes the CRC does not cover can change without an error: the leader epoch, which
    # leaves the records as they were, a base offset that still fits the segment's range and
    # order (caught by the range check otherwise), or a length that truncates the tail.
    assert got == expected[: len(got)]


@settings(max_examples=200, deadline=None)
@given(segments, st.integers(min_value=0))
def test_any_truncation_gives_a_prefix(args: list[dict[str, object]], cut: int) -> None:
    data = _segment(args)
    got = _decode(data[: cut % (len(data) + 1)])
    assert got == _expected(args)[: len(got)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_args, st.integers(min_value=0), st.integers(1, 255))
def test_fast_path_agrees_with_reference_on_crc_valid_garbage(
    args: dict[str, object], where: int, xor: int
) -> None:
    """Corrupt the records, then fix the CRC as a buggy producer would. Wherever Kafka's reader
    (the reference decoder) accepts the batch, the fast path returns exactly its records; where
    it rejects, the fast path raises the same typed error. A broker never stores such a batch:
    it parses every record with Java's strict reader when it appends."""
    raw = bytearray(_segment([{**args, "codec": Codec.NONE}]))
    pos = 61 + where % max(1, len(raw) - 61)
    if pos >= len(raw):
        return
    raw[pos] ^= xor
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    outcomes = []
    for ref in (False, True):
        try:
            if ref:
                with _reference_only():
                    outcomes.append(("ok", _decode(bytes(raw))))
            else:
                outcomes.append(("ok", _decode(bytes(raw))))
        except GatewayError as exc:
            outcomes.append(("error", type(exc).__name__))
    fast_outcome, reference_outcome = outcomes
    assert fast_outcome == reference_outcome


def _attribute_positions(batch: bytes) -> set[int]:
    """Where each record's attributes byte sits (the byte after its length varint)."""
    from gateway.kafka.varint import read_varint  # noqa: PLC0415

    out, pos = set(), 61
    for _ in range(struct.unpack_from(">i", batch, 57)[0]):
        length, body = read_varint(batch, pos)
        out.add(body)
        pos = body + length
    return out


def test_attribute_byte_divergence() -> None:
    """aiokafka's C decoder reads the (unused) attributes byte as a varint: a byte of 0x80 or
    more, which no Kafka client writes, shifts its parse. Such a batch never reaches it."""
    rec = [
        RecordInput(None, key=b"\x00\x00\x00", timestamp=65),
        RecordInput(None, key=b"\x00", headers=[("", None)], timestamp=0),
    ]
    raw = bytearray(build_batch(0, rec))
    (second,) = sorted(_attribute_positions(bytes(raw)))[1:]
    raw[second] = 0x80
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    fast_result = _decode(bytes(raw))
    with _reference_only():
        assert fast_result == _decode(bytes(raw))


def _with_offset_delta(encoded: bytes) -> bytes:
    """Two records whose second's offset delta (1) is written as ``encoded``."""
    raw = bytearray(
        build_batch(0, [RecordInput(None, timestamp=0), RecordInput(None, timestamp=1)])
    )
    (_, second) = sorted(_attribute_positions(bytes(raw)))
    delta_at = second + 2  # attributes, then timestampDelta (1 byte), then offsetDelta
    raw[delta_at : delta_at + 1] = encoded
    raw[second - 1] += 2 * (len(encoded) - 1)  # the record length (zig-zag)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


@pytest.mark.parametrize("compiled", [True, False])
def test_varints_read_as_java_reads_them(compiled: bool) -> None:
    """aiokafka's C decoder reads int32 varints as int64 of any length. Java (``ByteUtils``)
    reads at most 5 bytes and drops a 5th byte's bits past 32: ``82 80 80 80 10`` (2^32 + 2,
    zig-zag) is the offset delta 1 there, and 6 bytes are refused. Such batches never reach the
    C decoder; every path answers what Java answers."""
    fast.use_compiled(compiled)
    try:
        wide = _decode(_with_offset_delta(b"\x82\x80\x80\x80\x10"))
        assert [r[0] for r in wide] == [0, 1]
        with _reference_only():
            assert _decode(_with_offset_delta(b"\x82\x80\x80\x80\x10")) == wide
        for reference in (False, True):
            with (
                _reference_only() if reference else contextlib.nullcontext(),
                pytest.raises(GatewayError, match="longer than 5 bytes"),
            ):
                _decode(_with_offset_delta(b"\x82\x80\x80\x80\x80\x00"))
    finally:
        fast.use_compiled(True)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_foreign_exceptions(blob: bytes) -> None:
    for verify in (True, False):
        with contextlib.suppress(GatewayError):
            _decode(blob, verify_crc=verify)
