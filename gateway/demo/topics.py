"""The demo topics: what each partition holds and how each topic is tiered.

Every partition is filled from its own seeded :class:`random.Random`, so the records (and the
``.log`` bytes) are the same on every run; only segment ids and encryption keys are random.

=================  ===========================================================================
``orders``         plain JSON, 2 partitions: headers, null keys, tombstones, one LogAppendTime
                   batch; tiered as is (one chunk per segment)
``clicks.v2-raw``  3 partitions of producer-compressed batches cycling gzip, snappy, lz4 and
                   zstd; tiered with the compression heuristic, which leaves them uncompressed
``audit``          1 partition of uncompressed text lines, tiered zstd-compressed in 16 KiB
                   chunks (about ten chunks per segment)
``payments``       2 partitions, two transactional producers each: interleaved committed and
                   aborted transactions, some aborted across a segment roll; tiered compressed
                   and encrypted with the ``demo`` key pair
``inventory``      1 partition, leader epochs 0, 2, 5 and 8 (changing inside segments and at a
                   roll); its first segment is uploaded twice, the later upload (another
                   segment id, broker 1) displacing the first
=================  ===========================================================================
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gateway.demo.log import PartitionLog, Producer
from gateway.kafka.builder import RecordInput
from gateway.kafka.codecs import Codec
from gateway.kafka.control import ControlRecordType
from gateway.kafka.records import Header
from gateway.remote.tiering import TieringOptions

DEMO_KEY_ID: Final = "demo"
_ABORT, _COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# --- orders ----------------------------------------------------------------------------------


def _order(rng: random.Random, index: int) -> RecordInput:
    customer = f"customer-{rng.randrange(50):02d}".encode()
    if index % 31 == 30:
        return RecordInput(None, key=customer)  # a tombstone: the customer's orders compacted
    value = _json(
        {
            "order_id": 100_000 + index,
            "customer": customer.decode(),
            "items": [
                {"sku": f"SKU-{rng.randrange(10_000):04d}", "qty": rng.randint(1, 5)}
                for _ in range(rng.randint(1, 5))
            ],
            "total_cents": rng.randrange(199, 99_999),
            "status": rng.choice(("created", "paid", "shipped", "delivered", "cancelled")),
        }
    )
    headers: list[Header] = []
    if index % 4 == 0:
        headers += [("source", rng.choice((b"web", b"ios", b"android")))]
        headers += [("trace-id", rng.randbytes(8).hex().encode())]
    if index % 10 == 0:
        headers.append(("retry", None))  # a header with a null value
    return RecordInput(value, key=None if index % 13 == 12 else customer, headers=headers)


def _fill_orders(log: PartitionLog, rng: random.Random) -> None:
    index = 0
    for batch_no in range(72):
        count = rng.randint(1, 12)
        records = [_order(rng, index + i) for i in range(count)]
        log.append(records, log_append_time=batch_no == 40)
        index += count
        if batch_no in (23, 47):
            log.roll()


# --- clicks.v2-raw ---------------------------------------------------------------------------

_CODECS: Final = (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD)
_PAGES: Final = ("/", "/search", "/products/{}", "/cart", "/checkout", "/account/orders")


def _click(rng: random.Random) -> RecordInput:
    session = rng.randbytes(6).hex()
    page = rng.choice(_PAGES).format(rng.randrange(5000))
    value = _json(
        {
            "session": session,
            "user": None if rng.random() < 0.3 else f"user-{rng.randrange(2000)}",
            "page": page,
            "referrer": rng.choice((None, "https://www.example.com/", "https://ads.example.net/c")),
            "viewport": [rng.choice((390, 768, 1280, 1920)), rng.choice((844, 1024, 800, 1080))],
            "agent": rng.choice(("Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (iPhone)")),
        }
    )
    return RecordInput(value, key=session.encode())


def _fill_clicks(log: PartitionLog, rng: random.Random) -> None:
    for batch_no in range(24):
        records = [_click(rng) for _ in range(rng.randint(15, 40))]
        log.append(records, codec=_CODECS[batch_no % len(_CODECS)])
        if batch_no % 8 == 7:
            log.roll()


# --- audit -----------------------------------------------------------------------------------


def _audit(rng: random.Random, index: int) -> RecordInput:
    actor = f"user-{rng.randrange(300):03d}"
    line = (
        f"seq={index} actor={actor} action={rng.choice(('read', 'update', 'delete', 'grant'))} "
        f"resource=/accounts/{rng.randrange(10_000)}/settings "
        f"result={rng.choice(('ok', 'ok', 'ok', 'denied'))} "
        f"client=10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)} "
        f"request-id={rng.randbytes(12).hex()} note=" + "." * rng.randrange(20, 80)
    )
    return RecordInput(line.encode(), key=actor.encode(), headers=[("schema", b"audit-line/1")])


def _fill_audit(log: PartitionLog, rng: random.Random) -> None:
    for batch_no in range(240):
        log.append([_audit(rng, batch_no * 10 + i) for i in range(10)])
        if batch_no % 80 == 79:
            log.roll()


# --- payments --------------------------------------------------------------------------------


def _payments(rng: random.Random, producer: Producer) -> list[RecordInput]:
    out = []
    for _ in range(rng.randint(2, 8)):
        account = f"account-{rng.randrange(100):03d}"
        value = _json(
            {
                "payment_id": rng.randbytes(8).hex(),
                "account": account,
                "amount_cents": rng.randrange(100, 1_000_000),
                "currency": rng.choice(("EUR", "USD", "GBP")),
                "method": rng.choice(("card", "sepa", "wire")),
                "producer": producer.producer_id,
            }
        )
        out.append(RecordInput(value, key=account.encode()))
    return out


def _fill_payments(log: PartitionLog, rng: random.Random, partition: int) -> None:
    first = Producer(5000 + 2 * partition)
    second = Producer(5001 + 2 * partition)
    for cycle in range(18):
        log.append(_payments(rng, first), producer=first, transactional=True)
        log.append(_payments(rng, second), producer=second, transactional=True)
        if cycle % 6 == 2:
            log.roll()  # both transactions stay open across the roll
        log.append(_payments(rng, first), producer=first, transactional=True)
        log.end_transaction(first, _ABORT if cycle % 4 == 1 else _COMMIT)
        log.append(_payments(rng, second), producer=second, transactional=True)
        log.end_transaction(second, _ABORT if cycle % 3 == 2 else _COMMIT)


# --- inventory -------------------------------------------------------------------------------


def _stock(rng: random.Random) -> RecordInput:
    sku = f"SKU-{rng.randrange(10_000):04d}"
    value = _json(
        {
            "sku": sku,
            "warehouse": rng.choice(("AMS-1", "FRA-2", "DUB-1", "WAW-3")),
            "delta": rng.randint(-20, 50),
            "on_hand": rng.randrange(0, 5000),
            "reason": rng.choice(("receipt", "sale", "return", "recount", "damage")),
            "bin": f"aisle-{rng.randrange(40):02d}/shelf-{rng.randrange(8)}",
            "by": rng.choice(("scanner", "erp-sync", "manual")),
        }
    )
    return RecordInput(value, key=sku.encode())


def _fill_inventory(log: PartitionLog, rng: random.Random) -> None:
    for batch_no in range(48):
        if batch_no == 6:
            log.epoch = 2  # a leader change inside the first segment
        elif batch_no == 12:
            log.roll()  # the second segment is all epoch 2
        elif batch_no == 24:
            log.roll()
            log.epoch = 5  # a leader change at a roll
        elif batch_no == 30:
            log.epoch = 8
        elif batch_no == 36:
            log.roll()
        log.append([_stock(rng) for _ in range(rng.randint(5, 15))])


# --- the topics ------------------------------------------------------------------------------

Fill = Callable[[PartitionLog, random.Random, int], None]


@dataclass(frozen=True, slots=True)
class DemoTopic:
    name: str
    topic_id: uuid.UUID  # fixed, so keys and example requests are stable
    description: str
    partitions: int
    fill: Fill
    options: TieringOptions
    reupload: tuple[int, int] | None = None  # (partition, segment index) uploaded twice


TOPICS: Final = (
    DemoTopic(
        "orders",
        uuid.UUID("70e7cf90-0072-5932-ae8f-a41d65014cfa"),
        "plain JSON with headers, null keys, tombstones and a LogAppendTime batch",
        2,
        lambda log, rng, _: _fill_orders(log, rng),
        TieringOptions(),
    ),
    DemoTopic(
        "clicks.v2-raw",
        uuid.UUID("e96e4c24-92d4-5c3f-8952-98f7c3381674"),
        "producer-compressed batches cycling gzip, snappy, lz4 and zstd",
        3,
        lambda log, rng, _: _fill_clicks(log, rng),
        TieringOptions(compression=True, compression_heuristic=True),
    ),
    DemoTopic(
        "audit",
        uuid.UUID("00528825-5e47-56b7-b964-019841fa32a3"),
        "text lines tiered zstd-compressed in 16 KiB chunks",
        1,
        lambda log, rng, _: _fill_audit(log, rng),
        TieringOptions(chunk_size=16 * 1024, compression=True),
    ),
    DemoTopic(
        "payments",
        uuid.UUID("4f386f29-a9d1-575e-89b7-9ab522902afc"),
        "transactions, committed and aborted, tiered compressed and encrypted",
        2,
        _fill_payments,
        TieringOptions(chunk_size=8 * 1024, compression=True, encrypt_with=DEMO_KEY_ID),
    ),
    DemoTopic(
        "inventory",
        uuid.UUID("870d0d5d-a294-5d14-b198-cd6967225d07"),
        "leader epochs 0, 2, 5, 8; the first segment uploaded twice",
        1,
        lambda log, rng, _: _fill_inventory(log, rng),
        TieringOptions(),
        reupload=(0, 0),
    ),
)
