"""The compiled record path (FastColumns + kernel) against independent encoders and against
the reference decoder, including corrupted input (no Spark here)."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import crc32c

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptDataError
from gateway.kafka.batch import HEADER_SIZE, RecordBatch
from gateway.kafka.codecs import Codec
from gateway.kafka.varint import encode_varint, encode_varlong
from gateway.spark.columns import FastColumns, RecordColumns
from tests.unit.kafka.independent import BUILDERS, Rec, as_broker, build

BASE_TS = 1_700_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

headers = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=12))), max_size=3
)
records = st.lists(
    st.builds(
        lambda key, value, hs, dt: (key, value, hs, dt),
        st.one_of(st.none(), st.binary(max_size=24)),
        st.one_of(st.none(), st.binary(max_size=300)),
        headers,
        st.integers(-(2**20), 2**20),
    ),
    min_size=1,
    max_size=12,
)
batch_spec = st.fixed_dictionaries(
    {
        "records": records,
        "builder": st.sampled_from(list(BUILDERS)),
        "codec": st.sampled_from([Codec.NONE, Codec.GZIP, Codec.ZSTD, Codec.LZ4]),
        "log_append": st.one_of(st.none(), st.integers(0, 2**41)),
        "epoch": st.integers(-1, 50),
    }
)


def make_batches(specs: list[dict[str, Any]]) -> tuple[list[bytes], list[tuple[Any, ...]]]:
    """Raw batches at consecutive offsets, and the rows they must give, from the inputs."""
    raws: list[bytes] = []
    rows: list[tuple[Any, ...]] = []
    offset = 0
    for spec in specs:
        recs = [
            Rec(i, BASE_TS + dt, key, value, list(hs))
            for i, (key, value, hs, dt) in enumerate(spec["records"])
        ]
        raw = build(spec["builder"], offset, recs, codec=spec["codec"].value)
        raws.append(as_broker(raw, log_append_time=spec["log_append"], leader_epoch=spec["epoch"]))
        for r in recs:
            ts = spec["log_append"] if spec["log_append"] is not None else r.timestamp
            epoch = spec["epoch"] if spec["epoch"] >= 0 else None
            kind = 0 if spec["log_append"] is None else 1
            rows.append((offset + r.offset_delta, r.key, r.value, ts, kind, epoch, r.headers))
        offset += len(recs)
    return raws, rows


def table_rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    out = []
    for r in batch.to_pylist():
        ts = r["timestamp"]
        millis = None if ts is None else (ts - EPOCH) // timedelta(milliseconds=1)
        hs = [(h["key"], h["value"]) for h in r["headers"]]
        out.append(
            (r["offset"], r["key"], r["value"], millis, r["timestampType"], r["leaderEpoch"], hs)
        )
    return out


def fast(raws: list[bytes], lo: int = 0, hi: int = 2**62) -> tuple[pa.RecordBatch, int]:
    cols = FastColumns("t", 0, True, lo, hi)
    for raw in raws:
        cols.add(RecordBatch(memoryview(raw)))
    result = cols.flush()
    return result, cols.fallbacks


def reference(raws: list[bytes], lo: int = 0, hi: int = 2**62) -> pa.RecordBatch:
    cols = RecordColumns("t", 0, True)
    for raw in raws:
        batch = RecordBatch(memoryview(raw))
        cols.add(batch, [r for r in batch.records(verify_crc=False) if lo <= r.offset < hi])
    return cols.flush()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch_spec, min_size=1, max_size=5), st.integers(0, 30), st.integers(0, 70))
def test_equals_the_inputs_of_independent_encoders(
    specs: list[dict[str, Any]], lo: int, width: int
) -> None:
    raws, rows = make_batches(specs)
    got, fallbacks = fast(raws, lo, lo + width)
    assert fallbacks == 0, "valid batches must take the compiled path"
    assert got.schema == reference(raws).schema
    assert table_rows(got) == [r for r in rows if lo <= r[0] < lo + width]


def test_uncompressed_batches_with_every_null_shape() -> None:
    recs = [
        {"records": [(None, None, [], 0), (b"", b"", [("", None)], -5), (b"k", b"v" * 5000, [], 7)],
         "builder": name, "codec": Codec.NONE, "log_append": None, "epoch": -1}
        for name in BUILDERS
    ]  # fmt: skip
    raws, rows = make_batches(recs)
    got, fallbacks = fast(raws)
    assert fallbacks == 0
    assert table_rows(got) == rows
    assert got.column("leaderEpoch").null_count == len(rows)


def _record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def _raw_batch(records_bytes: bytes, count: int) -> bytes:
    """A v2 batch around hand-made record bytes (the CRC is not checked on this path)."""
    header = bytearray(HEADER_SIZE)
    struct.pack_into(">qiib", header, 0, 0, HEADER_SIZE - 12 + len(records_bytes), 3, 2)
    struct.pack_into(">hiqqqhii", header, 21, 0, count - 1, BASE_TS, BASE_TS, -1, -1, -1, count)
    raw = bytes(header) + records_bytes
    crc = crc32c.crc32c(raw[21:])
    return raw[:17] + struct.pack(">I", crc) + raw[21:]


def test_a_header_key_that_is_not_utf8_is_replaced_as_java_does() -> None:
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + encode_varint(-1) + encode_varint(-1)
    body += encode_varint(1) + encode_varint(2) + b"\xff\xfe" + encode_varint(1) + b"x"
    got, fallbacks = fast([_raw_batch(_record(body), 1)])
    assert fallbacks == 1
    assert got.column("headers").to_pylist() == [[{"key": "\ufffd\ufffd", "value": b"x"}]]


def test_a_negative_key_length_is_null_as_java_reads_it() -> None:
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + encode_varint(-7) + encode_varint(1)
    body += b"v" + encode_varint(0)
    got, fallbacks = fast([_raw_batch(_record(body), 1)])
    assert fallbacks == 0
    assert got.column("key").to_pylist() == [None]
    assert table_rows(got) == table_rows(reference([_raw_batch(_record(body), 1)]))


@pytest.mark.parametrize(
    "varint",
    [
        b"\x80\x80\x80\x80\x10",  # 5 bytes past int32
        b"\x80\x80\x80\x80\x80\x00",  # 6 bytes
    ],
)
def test_an_oversized_varint_goes_to_the_reference_path(varint: bytes) -> None:
    """The loop refuses what Java would truncate; the records path decides (the reference
    decoder drops a 5th byte's bits past int32 as Java does and refuses a 6th byte; aiokafka's
    C decoder, which would keep those bits, is never given the batch)."""
    body = b"\x00" + encode_varlong(0) + varint + encode_varint(-1) + encode_varint(-1)
    body += encode_varint(0)
    assert_same_as_reference([_raw_batch(_record(body), 1)], fallbacks=1)


def test_an_attributes_byte_past_0x7f_goes_to_the_reference_path() -> None:
    """aiokafka's C decoder reads the unused attributes byte as a varint, so these bytes
    decode differently there than in Java; the loop must not give a third answer."""
    body = bytes.fromhex("80 00 00 02 01 01 00")
    assert_same_as_reference([_raw_batch(_record(body), 1)], fallbacks=1)


@pytest.mark.parametrize("count", [-1, 0])
def test_a_batch_declaring_no_records_but_holding_some_is_an_error(count: int) -> None:
    body = b"\x00" + encode_varlong(0) + encode_varint(0) + encode_varint(-1) + encode_varint(-1)
    raw = bytearray(_raw_batch(_record(body + encode_varint(0)), 1))
    struct.pack_into(">i", raw, 57, count)
    cols = FastColumns("t", 0, False, 0, 100)
    cols.add(RecordBatch(memoryview(bytes(raw))))
    assert cols.rows == 0 and cols.held == 1  # read_split flushes on held, not rows
    with pytest.raises(CorruptDataError):
        cols.flush()


def assert_same_as_reference(raws: list[bytes], fallbacks: int | None = None) -> None:
    """The fast path gives exactly the reference path's rows, or both raise a typed error
    (and, when given, the compiled loop was left ``fallbacks`` times)."""
    try:
        expected = table_rows(reference(raws))
    except CorruptDataError:
        with pytest.raises(CorruptDataError):
            fast(raws)
        return
    got, left = fast(raws)
    assert table_rows(got) == expected
    if fallbacks is not None:
        assert left == fallbacks


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(batch_spec, min_size=1, max_size=3),
    st.data(),
)
def test_corrupted_records_never_decode_differently_from_the_reference(
    specs: list[dict[str, Any]], data: st.DataObject
) -> None:
    """Damage the records section of one uncompressed batch (flips, truncation, a wrong
    count): the fast path gives exactly the reference decoder's rows or a typed error."""
    for spec in specs:
        spec["codec"] = Codec.NONE
    raws, _ = make_batches(specs)
    i = data.draw(st.integers(0, len(raws) - 1))
    damaged = bytearray(raws[i])
    kind = data.draw(st.sampled_from(["flip", "truncate", "count"]))
    if kind == "flip" and len(damaged) > HEADER_SIZE:
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(HEADER_SIZE, len(damaged) - 1))
            damaged[pos] ^= data.draw(st.integers(1, 255))
    elif kind == "truncate":
        del damaged[data.draw(st.integers(HEADER_SIZE, len(damaged))) :]
    else:
        struct.pack_into(">i", damaged, 57, data.draw(st.integers(-3, 40)))
    raws[i] = bytes(damaged)
    assert_same_as_reference(raws)
