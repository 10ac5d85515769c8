"""Every record decoder here against Kafka's own reader, on the same damaged bytes (issue 33).

The gateway reads records three ways: the reference decoder (pure Python), aiokafka's C decoder
behind the compiled checks (:mod:`gateway.kafka.fast`), and the compiled loop into columns
(:mod:`gateway.kafka.kernel`, what JSON/NDJSON and Spark read). A broker never stores a batch
its strict reader refuses, but a bucket can hold bytes no broker wrote (a buggy producer with a
valid CRC, a damaged object); then each path must answer what Kafka's Java reader answers: the
same records, or an error (ours is typed).

The cases are seeded (``SEED``) single batches from the builder with one change, the CRC fixed
after it, a quarter of them then compressed (each codec): a record's unused attributes byte set
to 0x80 or more (aiokafka's decoder reads it as a varint); a varint or varlong written longer
than needed, up to past Java's limit (5 and 10 bytes); an int32 varint's 5th byte or a varlong's
10th with bits past the type (Java drops them); a byte flipped anywhere in the records.
``RecordReader.java`` reads each as the Java consumer reads a fetched batch.
"""

from __future__ import annotations

import base64
import contextlib
import json
import random
import struct
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from gateway.errors import GatewayError
from gateway.kafka import fast
from gateway.kafka.batch import iter_batches
from gateway.kafka.builder import RecordInput, build_batch
from gateway.kafka.codecs import Codec, compress
from gateway.kafka.records import RecordLike
from gateway.service.records import ColumnRecords
from tests.realkafka.java import JavaTools

SEED = 33
CASES = 2000
KINDS = ("attributes", "padded", "wide", "flip")
_RECORDS_AT = 61
_CODECS = (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD)

Outcome = tuple[str, object]  # ("ok", rows) or ("error", what)


def _uvarint(value: int, width: int) -> bytes:
    """``value`` in exactly ``width`` 7-bit groups (padded with empty groups: overlong)."""
    out = bytearray()
    for i in range(width):
        group = (value >> (7 * i)) & 0x7F
        out.append(group | (0x80 if i < width - 1 else 0))
    return bytes(out)


def _canonical(value: int) -> bytes:
    return _uvarint(value, max(1, (value.bit_length() + 6) // 7))


def _read(buf: bytes, pos: int) -> tuple[int, int]:
    """(unsigned value, next position) of a varint the builder wrote."""
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _bodies(records: bytes, count: int) -> list[bytes]:
    out, pos = [], 0
    for _ in range(count):
        zz, pos = _read(records, pos)
        out.append(records[pos : pos + (zz >> 1)])
        pos += zz >> 1
    return out


def _fields(body: bytes) -> list[tuple[int, int, int, bool]]:
    """(start, end, unsigned value, is varlong) of the timestamp delta, offset delta and key
    length varints of a record body."""
    out, pos = [], 1
    for is_long in (True, False, False):
        value, end = _read(body, pos)
        out.append((pos, end, value, is_long))
        pos = end
    return out


def _mutate_body(body: bytes, kind: str, rng: random.Random) -> bytes:
    if kind == "attributes":
        return bytes([rng.randrange(0x80, 0x100)]) + body[1:]
    start, end, value, is_long = rng.choice(_fields(body))
    limit = 10 if is_long else 5
    if kind == "padded":  # longer than needed: up to one byte past Java's limit
        width = rng.randint(len(_canonical(value)) + 1, limit + 1)
        encoded = _uvarint(value, width)
    else:  # "wide": the last byte Java reads carries bits past the type
        encoded = bytearray(_uvarint(value, limit))
        encoded[-1] |= (rng.randrange(1, 64) << 1) if is_long else (rng.randrange(1, 8) << 4)
        encoded = bytes(encoded)
    return body[:start] + encoded + body[end:]


def _frame(header: bytes, records: bytes, codec: Codec) -> bytes:
    raw = bytearray(header[:_RECORDS_AT])
    raw[22] = (raw[22] & 0xF8) | codec.value
    raw += compress(codec, records) if codec is not Codec.NONE else records
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


def case(rng: random.Random, kind: str) -> bytes:
    """One batch, changed as ``kind`` says, its CRC fixed."""
    count = rng.randint(1, 5)
    records = [
        RecordInput(
            rng.choice([None, rng.randbytes(rng.randint(0, 40))]),
            key=rng.choice([None, rng.randbytes(rng.randint(0, 12))]),
            headers=[
                (rng.choice(["h", "ü", ""]), rng.choice([None, rng.randbytes(3)]))
                for _ in range(rng.randint(0, 2))
            ],
            timestamp=rng.randint(0, 2**41),
        )
        for _ in range(count)
    ]
    log_append = rng.choice([None, None, None, rng.randint(0, 2**41)])
    built = build_batch(rng.randint(0, 2**40), records, log_append_time=log_append)
    blob = built[_RECORDS_AT:]
    if kind == "flip":
        at = rng.randrange(len(blob))
        changed = bytearray(blob)
        changed[at] ^= rng.randrange(1, 256)
        blob = bytes(changed)
    else:
        bodies = _bodies(blob, count)
        which = rng.randrange(count)
        bodies[which] = _mutate_body(bodies[which], kind, rng)
        blob = b"".join(_canonical(len(b) << 1) + b for b in bodies)
    codec = rng.choice(_CODECS) if rng.random() < 0.25 else Codec.NONE
    return _frame(built, blob, codec)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _row(offset: int, timestamp: int, record: RecordLike) -> list[object]:
    headers = [[k, _b64(v)] for k, v in record.headers]
    return [offset, timestamp, _b64(record.key), _b64(record.value), headers]


@contextlib.contextmanager
def _compiled(on: bool) -> Iterator[None]:
    fast.use_compiled(on)
    try:
        yield
    finally:
        fast.use_compiled(True)


def per_batch(raw: bytes, compiled: bool) -> Outcome:
    """``RecordBatch.records()``: the reference decoder, or (compiled) the checked C path."""
    with _compiled(compiled):
        try:
            rows = [_row(r.offset, r.timestamp, r) for b in iter_batches(raw) for r in b.records()]
            return "ok", rows
        except GatewayError as exc:
            return "error", type(exc).__name__


def columns(raw: bytes) -> Outcome | None:
    """The compiled loop into columns; None when it objects (the reference decoder answers)."""
    try:
        decoded = ColumnRecords.decode(list(iter_batches(raw)), 0)
    except GatewayError as exc:
        return "error", type(exc).__name__
    if decoded is None:
        return None
    return "ok", [_row(r.offset, r.timestamp, r.record) for r in decoded]


@dataclass
class Campaign:
    cases: int = 0
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, java's)
    column_answers: int = 0
    disagreements: list[str] = field(default_factory=list)


def _agree(ours: Outcome, java: Outcome) -> bool:
    return ours[0] == java[0] and (ours[0] == "error" or ours[1] == java[1])


def run(java: JavaTools, seed: int = SEED, cases: int = CASES) -> Campaign:
    rng = random.Random(seed)
    made = [(kind, case(rng, kind)) for kind in (KINDS[i % len(KINDS)] for i in range(cases))]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cases.bin"
        path.write_bytes(b"".join(struct.pack(">i", len(raw)) + raw for _, raw in made))
        lines = java.run(str(path), program="RecordReader").splitlines()
    report = Campaign(cases=len(made))
    for i, ((kind, raw), line) in enumerate(zip(made, lines, strict=True)):
        answer = json.loads(line)
        failed = "error" in answer
        theirs: Outcome = ("error", answer["error"]) if failed else ("ok", answer["records"])
        report.outcomes[kind, theirs[0]] += 1
        for name, ours in (
            ("reference", per_batch(raw, compiled=False)),
            ("aiokafka behind the checks", per_batch(raw, compiled=True)),
            ("columns", columns(raw)),
        ):
            if ours is None:
                continue
            report.column_answers += name == "columns"
            if not _agree(ours, theirs):
                report.disagreements.append(
                    f"case {i} ({kind}, {raw.hex()}): {name} {ours!r} but Java {theirs!r}"
                )
    return report
