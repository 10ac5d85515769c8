"""Codecs: framing bytes from the spec, third-party encoders, caps, corruption."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import CodecError, DecompressedSizeExceededError
from gateway.kafka.codecs import XERIAL_MAGIC, Codec, compress, decompress, xerial_snappy_compress

DATA = b"".join(b"record %d " % i + os.urandom(8) + b"z" * 50 for i in range(3000))
CAP = 64 * 1024 * 1024


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip(codec: Codec) -> None:
    assert decompress(codec, compress(codec, DATA), CAP) == DATA
    assert decompress(codec, memoryview(compress(codec, DATA)), CAP) == DATA


def test_lz4_frame_header_matches_the_spec() -> None:
    # kafka-formats.md §5: magic, FLG 0x60, BD 0x40, header checksum 0x82.
    assert compress(Codec.LZ4, b"hello")[:7] == bytes.fromhex("04224D18604082")
    stored = bytes.fromhex("04224D18604082 05000080 68656C6C6F 00000000")
    assert decompress(Codec.LZ4, stored, CAP) == b"hello"


def test_xerial_snappy_framing() -> None:
    framed = compress(Codec.SNAPPY, DATA)
    assert framed[:8] == XERIAL_MAGIC == bytes.fromhex("82534E4150505900")
    assert struct.unpack(">ii", framed[8:16]) == (1, 1)
    assert len(DATA) > 32 * 1024  # several 32 KiB blocks
    raw_block = bytes(cramjam.snappy.compress_raw(DATA))
    assert decompress(Codec.SNAPPY, raw_block, CAP) == DATA  # un-framed form accepted


def test_xerial_framing_written_by_kafka_python() -> None:
    from kafka.codec import snappy_encode  # noqa: PLC0415

    assert decompress(Codec.SNAPPY, snappy_encode(DATA, xerial_compatible=True), CAP) == DATA


def test_gzip_concatenated_members_and_trailing_garbage() -> None:
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(Codec.GZIP, two, CAP) == b"abcdef"
    assert decompress(Codec.GZIP, gzip.compress(b"abc") + b"junk", CAP) == b"abc"


def test_zstd_stream_without_content_size_and_several_frames() -> None:
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        w.write(DATA)
    streamed = buf.getvalue()
    assert zstandard.frame_content_size(streamed) == -1
    assert decompress(Codec.ZSTD, streamed, CAP) == DATA
    frames = zstandard.ZstdCompressor().compress(b"a" * 10) + streamed
    assert decompress(Codec.ZSTD, frames, CAP) == b"a" * 10 + DATA


@pytest.mark.parametrize("codec", [c for c in Codec if c is not Codec.NONE])
def test_truncated_payload_is_a_codec_error(codec: Codec) -> None:
    payload = compress(codec, DATA)
    with pytest.raises(CodecError):
        decompress(codec, payload[: len(payload) // 2], CAP)


def test_truncated_multi_frame_zstd_is_detected() -> None:
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        w.write(DATA)
    frames = zstandard.ZstdCompressor().compress(b"a" * 10) + buf.getvalue()
    with pytest.raises(CodecError, match=r"truncated|corrupt"):
        decompress(Codec.ZSTD, frames[:-7], CAP)


@pytest.mark.parametrize("codec", list(Codec))
def test_cap_is_enforced_before_the_memory_is_spent(codec: Codec) -> None:
    bomb = compress(codec, b"\x00" * (4 * 1024 * 1024))
    with pytest.raises(DecompressedSizeExceededError, match=f"{codec.label} .* cap of 65536"):
        decompress(codec, bomb, 65536)
    assert len(decompress(codec, bomb, 4 * 1024 * 1024)) == 4 * 1024 * 1024


def test_zstd_cap_without_declared_size() -> None:
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        w.write(b"\x00" * (4 * 1024 * 1024))
    with pytest.raises(DecompressedSizeExceededError):
        decompress(Codec.ZSTD, buf.getvalue(), 65536)


def test_lz4_from_the_reference_binding_with_checksums() -> None:
    framed = lz4.frame.compress(DATA, content_checksum=True, block_checksum=True)
    assert decompress(Codec.LZ4, framed, CAP) == DATA


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from([c for c in Codec if c is not Codec.NONE]),
    data=st.binary(max_size=3000),
    flip=st.integers(min_value=0),
    bit=st.integers(0, 7),
)
def test_any_corruption_gives_a_codec_error_or_some_bytes(
    codec: Codec, data: bytes, flip: int, bit: int
) -> None:
    payload = bytearray(compress(codec, data))
    payload[flip % len(payload)] ^= 1 << bit
    try:
        out = decompress(codec, bytes(payload), 1 << 20)
    except CodecError:
        return
    assert isinstance(out, bytes)  # codecs without checksums may decode garbage: the CRC guards


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(list(Codec)), blob=st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_foreign_exceptions(codec: Codec, blob: bytes) -> None:
    with contextlib.suppress(CodecError):
        decompress(codec, blob, 1 << 20)


def test_xerial_block_overrun_is_corrupt() -> None:
    framed = bytearray(xerial_snappy_compress(b"abc" * 100))
    struct.pack_into(">i", framed, 16, 10_000)
    with pytest.raises(CodecError, match="overruns"):
        decompress(Codec.SNAPPY, bytes(framed), CAP)


def _streamed(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        w.write(data)
    return buf.getvalue()


def test_zstd_frames_after_an_undeclared_first_frame_are_read() -> None:
    """What Java's ZstdInputStream reads: every frame, declared size or not."""
    assert decompress(Codec.ZSTD, _streamed(b"first ") + _streamed(b"second"), CAP) == (
        b"first second"
    )


def test_zstd_junk_after_a_frame_is_corrupt() -> None:
    with pytest.raises(CodecError):
        decompress(Codec.ZSTD, _streamed(b"payload") + b"junk after the frame", CAP)
    with pytest.raises(CodecError):
        decompress(Codec.ZSTD, zstandard.ZstdCompressor().compress(b"x" * 100) + b"junk", CAP)
