"""Producer snapshot (spec §12.1): layout, CRC-32C, version and length checks."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CorruptCheckpointError
from gateway.kafka.producer_snapshot import (
    ENTRY_SIZE,
    HEADER_SIZE,
    ProducerSnapshotEntry,
    encode_producer_snapshot,
    open_transaction_first,
    parse_producer_snapshot,
)

SETTINGS = settings(max_examples=200, deadline=None)

ENTRY = ProducerSnapshotEntry(
    producer_id=1000,
    producer_epoch=2,
    last_sequence=41,
    last_offset=5000,
    offset_delta=9,
    timestamp=1_700_000_000_000,
    coordinator_epoch=3,
    current_txn_first_offset=-1,
)


def with_crc(tail: bytes, version: int = 1) -> bytes:
    """version + CRC-32C over ``tail`` + ``tail`` (tail = count and entries)."""
    return struct.pack(">hI", version, crc32c.crc32c(tail)) + tail


def test_crc32c_is_castagnoli() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c.crc32c(bytes(4)) == 0x48674BC7


def test_empty_snapshot_bytes() -> None:
    golden = bytes.fromhex("0001 48674BC7 00000000")
    assert encode_producer_snapshot([]) == golden
    assert parse_producer_snapshot(golden) == []


def test_entry_layout() -> None:
    assert (HEADER_SIZE, ENTRY_SIZE) == (10, 46)
    entry_bytes = bytes.fromhex(
        "00000000000003E8"  # producerId 1000
        "0002"  # epoch 2
        "00000029"  # lastSequence 41
        "0000000000001388"  # lastOffset 5000
        "00000009"  # offsetDelta 9
        "0000018BCFE56800"  # timestamp 1700000000000
        "00000003"  # coordinatorEpoch 3
        "FFFFFFFFFFFFFFFF"  # currentTxnFirstOffset -1
    )
    golden = with_crc(bytes.fromhex("00000001") + entry_bytes)
    assert encode_producer_snapshot([ENTRY]) == golden
    assert parse_producer_snapshot(golden) == [ENTRY]
    assert parse_producer_snapshot(memoryview(golden)) == [ENTRY]


@pytest.mark.parametrize("length", [0, 1, 9])
def test_shorter_than_header(length: int) -> None:
    with pytest.raises(CorruptCheckpointError, match="shorter than its 10-byte header"):
        parse_producer_snapshot(encode_producer_snapshot([ENTRY])[:length])


@pytest.mark.parametrize("version", [0, 2, -1])
def test_unknown_version(version: int) -> None:
    with pytest.raises(CorruptCheckpointError, match=f"version {version}"):
        parse_producer_snapshot(with_crc(bytes(4), version=version))


@pytest.mark.parametrize("flip_at", [2, 5, 6, 9, 10, 55])
def test_crc_mismatch(flip_at: int) -> None:
    data = bytearray(encode_producer_snapshot([ENTRY]))
    data[flip_at] ^= 0x01
    with pytest.raises(CorruptCheckpointError, match="CRC-32C mismatch"):
        parse_producer_snapshot(bytes(data))


@pytest.mark.parametrize(
    "tail",
    [
        struct.pack(">i", 2) + bytes(ENTRY_SIZE),  # too few bytes for the count
        struct.pack(">i", 0) + bytes(ENTRY_SIZE),  # too many
        struct.pack(">i", 1) + bytes(ENTRY_SIZE + 1),  # a trailing byte
        struct.pack(">i", -1),  # negative count
    ],
)
def test_count_must_match_length(tail: bytes) -> None:
    with pytest.raises(CorruptCheckpointError, match="announces"):
        parse_producer_snapshot(with_crc(tail))


def _int(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


snapshot_entries = st.builds(
    ProducerSnapshotEntry,
    _int(64),
    _int(16),
    _int(32),
    _int(64),
    _int(32),
    _int(64),
    _int(32),
    _int(64),
)


@SETTINGS
@given(st.lists(snapshot_entries, max_size=20))
def test_round_trip(entries: list[ProducerSnapshotEntry]) -> None:
    data = encode_producer_snapshot(entries)
    assert len(data) == HEADER_SIZE + ENTRY_SIZE * len(entries)
    assert parse_producer_snapshot(data) == entries


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_checkpoint(data: bytes) -> None:
    with contextlib.suppress(CorruptCheckpointError):
        parse_producer_snapshot(data)


@SETTINGS
@given(st.binary(max_size=200))
def test_random_body_with_valid_crc_raises_only_corrupt_checkpoint(body: bytes) -> None:
    try:
        entries = parse_producer_snapshot(with_crc(body))
    except CorruptCheckpointError:
        return
    assert encode_producer_snapshot(entries) == with_crc(body)


def test_encoder_rejects_out_of_range_fields() -> None:
    with pytest.raises(ValueError, match="producer_epoch"):
        encode_producer_snapshot([ENTRY._replace(producer_epoch=2**15)])


def test_open_transaction_first_is_the_oldest_open_one() -> None:
    def snap(*firsts: int) -> bytes:
        return encode_producer_snapshot(
            ENTRY._replace(producer_id=i, current_txn_first_offset=f) for i, f in enumerate(firsts)
        )

    assert open_transaction_first(b"", 100) is None  # no snapshot uploaded
    assert open_transaction_first(snap(), 100) is None
    assert open_transaction_first(snap(-1, -1), 100) is None  # no transaction open
    assert open_transaction_first(snap(-1, 90, 40, 100), 100) == 40
    with pytest.raises(CorruptCheckpointError, match="after the segment's end offset 100"):
        open_transaction_first(snap(40, 101), 100)  # not this segment's snapshot
    damaged = bytearray(snap(40))
    damaged[-1] ^= 1
    with pytest.raises(CorruptCheckpointError, match="CRC"):
        open_transaction_first(bytes(damaged), 100)


@SETTINGS
@given(st.lists(snapshot_entries, max_size=20), st.integers(-1, 2**40))
def test_open_transaction_first_against_a_direct_reading(
    entries: list[ProducerSnapshotEntry], end: int
) -> None:
    firsts = [e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0]
    data = encode_producer_snapshot(entries)
    if any(f > end for f in firsts):
        with pytest.raises(CorruptCheckpointError):
            open_transaction_first(data, end)
    else:
        assert open_transaction_first(data, end) == min(firsts, default=None)
