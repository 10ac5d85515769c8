"""The bulk record writer (issue 15) writes exactly what ``orjson.dumps`` of each record's
object wrote before it: every format, null keys and values, headers, both timestamp types,
with and without a leader epoch, from decoded batches and from plain record lists."""

from __future__ import annotations

import binascii
import json
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.api.formats import BASE64, EmbeddedFormat, Encoders
from gateway.api.render import ndjson_lines, ndjson_prefix, records_document
from gateway.errors import InvalidFormatError
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.records import Record
from gateway.service.records import ColumnRecords, DecodedRecords, decode_records
from gateway.service.types import FetchedBatches, FetchedRecord, FetchResult, IsolationLevel

RU = IsolationLevel.READ_UNCOMMITTED
FORMATS = list(EmbeddedFormat)


def _oracle_field(fmt: EmbeddedFormat, data: bytes | None) -> Any:
    """The pre-issue-15 encoders (dicts for orjson), as the reference."""
    if data is None:
        return None
    if fmt is EmbeddedFormat.BASE64:
        return binascii.b2a_base64(data, newline=False).decode()
    if fmt is EmbeddedFormat.HEX:
        return data.hex()
    if fmt is EmbeddedFormat.STRING:
        return data.decode()
    json.loads(data)  # the cases below only feed JSON here
    return orjson.Fragment(data.replace(b"\n", b" ").replace(b"\r", b" "))


def _oracle(records: list[FetchedRecord], fmts: tuple[EmbeddedFormat, ...]) -> list[bytes]:
    key, value, header = fmts
    return [
        orjson.dumps(
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestamp_type": "LogAppendTime" if r.log_append_time else "CreateTime",
                "key": _oracle_field(key, r.record.key),
                "value": _oracle_field(value, r.record.value),
                "headers": [
                    {"key": k, "value": _oracle_field(header, v)} for k, v in r.record.headers
                ],
                "leader_epoch": r.leader_epoch,
            }
        )
        for r in records
    ]


def _result(records: int, batches: bytes) -> FetchResult:
    part = FetchedBatches(0, batches, 0, records - 1)
    return FetchResult("t", uuid.UUID(int=7), 0, (part,), records, 0, records, None)


TEXT = st.sampled_from(
    [b'{"a": [1, 2.5e3, "\xc3\xa9\\n"]}', b'[1,\r\n"y"]', b"null", b" 12 ", b"[]"]
)
FIELD = st.none() | TEXT
HEADERS = st.lists(st.tuples(st.text(max_size=4), FIELD), max_size=2)
RECORD = st.tuples(FIELD, FIELD, HEADERS)
PLAIN = st.tuples(FIELD, FIELD, st.just([]))  # batches without headers are written by column


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.tuples(
            st.lists(RECORD, min_size=1, max_size=5) | st.lists(PLAIN, min_size=1, max_size=5),
            st.booleans(),  # log append time
            st.sampled_from([-1, 0, 7]),  # leader epoch (-1: none)
        ),
        min_size=1,
        max_size=4,
    ),
    start=st.integers(0, 3),
    fmts=st.tuples(*(st.sampled_from(FORMATS),) * 3),
)
def test_the_bytes_are_orjsons(
    batches: list[tuple[list[tuple[bytes | None, bytes | None, list[Any]]], bool, int]],
    start: int,
    fmts: tuple[EmbeddedFormat, EmbeddedFormat, EmbeddedFormat],
) -> None:
    data, offset, written = [], 0, []
    for recs, log_append, epoch in batches:
        inputs = [
            RecordInput(v, key=k, headers=h, timestamp=1000 + i) for i, (k, v, h) in enumerate(recs)
        ]
        stamp = 5000 if log_append else None
        batch = build_batch(offset, inputs, log_append_time=stamp, partition_leader_epoch=epoch)
        data.append(batch)
        offset += len(recs)
        epoch_seen = epoch if epoch >= 0 else None
        written += [(k, v, [(hk, hv) for hk, hv in h], stamp or 1000 + i, epoch_seen)
                    for i, (k, v, h) in enumerate(recs)]  # fmt: skip
    result = _result(offset, b"".join(data))
    decoded = decode_records(result.batches, start, RU, None)
    assert isinstance(decoded, DecodedRecords | ColumnRecords)
    plain = list(decoded)
    assert [r.offset for r in plain] == list(range(start, offset))
    assert [
        (r.record.key, r.record.value, list(r.record.headers), r.timestamp, r.leader_epoch)
        for r in plain
    ] == written[start:]
    want = _oracle(plain, fmts)
    encoders = Encoders.of(*fmts)
    for records in (decoded, plain):
        assert ndjson_lines(records, encoders) == b"".join(w + b"\n" for w in want)
        document = records_document(result, records, encoders)
        assert document == orjson.dumps(
            {
                "topic": "t",
                "topic_id": "AAAAAAAAAAAAAAAAAAAABw",
                "partition": 0,
                "records": [orjson.Fragment(w) for w in want],
                "next_offset": offset,
                "log_start_offset": 0,
                "log_end_offset": offset,
                "last_stable_offset": None,
                "end_of_remote_log": True,
            }
        )


BINARY = st.none() | st.binary(max_size=40) | st.binary(min_size=300, max_size=700)
BINARY_HEADERS = st.lists(st.tuples(st.text(max_size=4), BINARY), max_size=2)
BINARY_RECORD = st.tuples(BINARY, BINARY, BINARY_HEADERS)
EMBEDDED = st.sampled_from([EmbeddedFormat.BASE64, EmbeddedFormat.HEX])


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(BINARY_RECORD, min_size=1, max_size=12),
    fmts=st.tuples(EMBEDDED, EMBEDDED, EMBEDDED),
)
def test_binary_fields_of_every_length_are_orjsons(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    fmts: tuple[EmbeddedFormat, EmbeddedFormat, EmbeddedFormat],
) -> None:
    """The compiled writer's base64 (each column encoded whole, a field's last digits padded
    with ``=``) and hex, for keys, values and header values of any length, null and empty."""
    inputs = [RecordInput(v, key=k, headers=h, timestamp=1000 + i)
              for i, (k, v, h) in enumerate(records)]  # fmt: skip
    result = _result(len(records), build_batch(0, inputs))
    decoded = decode_records(result.batches, 0, RU, None)
    assert isinstance(decoded, ColumnRecords)
    want = _oracle(list(decoded), fmts)
    assert ndjson_lines(decoded, Encoders.of(*fmts)) == b"".join(w + b"\n" for w in want)
    document = records_document(result, decoded, Encoders.of(*fmts))
    assert orjson.loads(document)["records"] == [orjson.loads(w) for w in want]


def test_no_records_make_an_empty_list() -> None:
    result = _result(1, b"")
    assert orjson.loads(records_document(result, DecodedRecords([])))["records"] == []
    assert ndjson_lines(DecodedRecords([])) == b""


@pytest.mark.parametrize(
    ("fmt", "bad", "where"),
    [
        (EmbeddedFormat.STRING, b"\xff", "value_format"),
        (EmbeddedFormat.JSON, b"{", "value_format"),
    ],
)
def test_a_record_not_in_its_format_ends_the_lines_before_it(
    fmt: EmbeddedFormat, bad: bytes, where: str
) -> None:
    inputs = [RecordInput(b'"ok"'), RecordInput(b'"ok"'), RecordInput(bad), RecordInput(b"1")]
    data = build_batch(10, inputs[:2]) + build_batch(12, inputs[2:])
    records = decode_records((FetchedBatches(10, data, 10, 13),), 10, RU, None)
    encoders = Encoders.of(EmbeddedFormat.BASE64, fmt, EmbeddedFormat.BASE64)
    lines, error = ndjson_prefix(records, encoders)
    assert [orjson.loads(line)["offset"] for line in lines.splitlines()] == [10, 11]
    assert error is not None
    assert (error.offset, error.parameter) == (12, where)
    assert "offset 12" in str(error)
    with pytest.raises(InvalidFormatError):
        records_document(_result(14, data), records, encoders)


def test_a_header_value_not_in_its_format_names_its_record() -> None:
    data = build_batch(0, [RecordInput(b"v"), RecordInput(b"v", headers=[("h", b"\xfe")])])
    records = decode_records((FetchedBatches(0, data, 0, 1),), 0, RU, None)
    encoders = Encoders.of(EmbeddedFormat.BASE64, EmbeddedFormat.BASE64, EmbeddedFormat.STRING)
    lines, error = ndjson_prefix(records, encoders)
    assert error is not None
    assert (error.offset, error.parameter, len(lines.splitlines())) == (1, "header_format", 1)


def test_offsets_out_of_order_inside_a_batch_are_taken_as_the_consumer_does() -> None:
    """A batch whose records' offsets go back (no broker writes one, but its CRC can be
    valid): each record is kept only when at or past the one after the last kept."""
    inputs = [RecordInput(b"%d" % d, offset_delta=d) for d in (0, 2, 1, 3)]
    data = build_batch(0, inputs)
    got = decode_records((FetchedBatches(0, data, 0, 3),), 0, RU, None)
    assert [(r.offset, r.record.value) for r in got] == [(0, b"0"), (2, b"2"), (3, b"3")]
    got = decode_records((FetchedBatches(0, data, 0, 3),), 3, RU, None)
    assert [r.offset for r in got] == [3]


def test_decoded_records_read_as_a_sequence() -> None:
    data = build_batch(0, [RecordInput(b"a"), RecordInput(b"b")]) + build_batch(
        2, [RecordInput(b"c")], log_append_time=99, partition_leader_epoch=4
    )
    got = decode_records((FetchedBatches(0, data, 0, 2),), 1, RU, None)
    assert len(got) == 2
    assert [r.offset for r in got[:]] == [1, 2]
    assert (got[-1].timestamp, got[-1].log_append_time, got[-1].leader_epoch) == (99, True, 4)
    assert got[0].leader_epoch is None
    with pytest.raises(IndexError):
        got[2]
    assert decode_records((), 0, RU, None) == []


def test_plain_fetched_records_keep_their_own_fields() -> None:
    """Records that do not come from the decoder (a test double) are written from the
    FetchedRecord's offset and timestamp."""
    item = FetchedRecord(Record(0, 1, None, b"v", []), 5, 6, True, None)
    want = b'{"offset":5,"timestamp":6,"timestamp_type":"LogAppendTime","key":null,"value":"dg==","headers":[],"leader_epoch":null}\n'  # noqa: E501
    assert ndjson_lines([item], BASE64) == want


def test_the_compiled_path_takes_plain_batches_and_escapes_header_keys_as_orjson() -> None:
    keys = ['a"b\\c', "\x00\x1f\x7f/", "\b\t\n\f\r", ""]
    inputs = [RecordInput(b"v%d" % i, key=b"k", headers=[(k, b"x")]) for i, k in enumerate(keys)]
    data = build_batch(0, inputs, partition_leader_epoch=3)
    got = decode_records((FetchedBatches(0, data, 0, 3),), 0, RU, None)
    assert isinstance(got, ColumnRecords)  # the loop took it: the kernel writes the text
    for fmts in ((EmbeddedFormat.BASE64,) * 3, (EmbeddedFormat.HEX,) * 3):
        want = b"".join(w + b"\n" for w in _oracle(list(got), fmts))
        assert ndjson_lines(got, Encoders.of(*fmts)) == want
    lines = bytes(ndjson_lines(got)).split()
    assert [orjson.loads(line)["headers"][0]["key"] for line in lines] == keys


@pytest.mark.parametrize(
    ("inputs", "kind"),
    [
        # a header key past ASCII: the columns hold it, the Python writer writes it
        ([RecordInput(b"v", headers=[("é", b"x")])], ColumnRecords),
        # a header key that is not UTF-8 (Java replaces it): the record decoders
        ([RecordInput(b"v", headers=[("~~~", b"x")])], DecodedRecords),
        # offsets that go back inside a batch: the consumer's rule, in the record decoders
        ([RecordInput(b"%d" % d, offset_delta=d) for d in (0, 2, 1, 3)], DecodedRecords),
    ],
)
def test_what_the_compiled_path_leaves_to_the_record_decoders(
    inputs: list[RecordInput], kind: type
) -> None:
    data = build_batch(0, inputs).replace(b"~~~", b"\xff~~")  # the CRC is the fetch's check
    got = decode_records((FetchedBatches(0, data, 0, len(inputs) - 1),), 0, RU, None)
    assert isinstance(got, kind)
    want = _oracle(list(got), (EmbeddedFormat.BASE64,) * 3)
    assert ndjson_lines(got) == b"".join(w + b"\n" for w in want)
