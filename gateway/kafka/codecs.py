"""Compression codecs of Kafka record batches (v2: the blob at bytes [61, end) of a batch).

Mirrors ``org.apache.kafka.common.compress.*`` and ``CompressionType``:

====  ======  ==========================================================================
 id   codec   stream format
====  ======  ==========================================================================
  0   none    --
  1   gzip    RFC 1952 stream (``java.util.zip``); concatenated members are read, trailing
              bytes that are not a gzip member are ignored as ``GZIPInputStream`` does
  2   snappy  xerial framing: ``82 'SNAPPY' 00``, int32 BE version, int32 BE min-compatible
              version, then repeated ``int32 BE length`` + raw snappy block; a single raw
              block without the magic is accepted too
  3   lz4     LZ4 frame (magic ``04 22 4D 18``), independent 64 KiB blocks
  4   zstd    standard zstd frames, content size not necessarily declared
====  ======  ==========================================================================

Every decompressor takes ``max_size``: output past it raises
:class:`~gateway.errors.DecompressedSizeExceededError` before the memory is spent (a
decompression bomb in a bucket cannot take the process down). Any other failure is a
:class:`~gateway.errors.CodecError`; no third-party exception escapes.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from enum import IntEnum
from typing import Final

import cramjam
import lz4.frame
import zstandard

from gateway.errors import CodecError, CorruptRecordError, DecompressedSizeExceededError

#: Default cap on one batch's decompressed records (Kafka's own batch limit is ~1 MiB by default;
#: this leaves room for topics with ``max.message.bytes`` raised and highly compressible data).
DEFAULT_MAX_DECOMPRESSED: Final = 128 * 1024 * 1024


class Codec(IntEnum):
    """The compression codec in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        return self.name.lower()


def codec_from_id(codec_id: int) -> Codec:
    try:
        return Codec(codec_id)
    except ValueError as exc:
        raise CorruptRecordError(f"unknown compression codec id {codec_id}") from exc


XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = struct.Struct(">8sii")
_XERIAL_BLOCK_LEN: Final = struct.Struct(">i")
_XERIAL_BLOCK_SIZE: Final = 32 * 1024  # snappy-java SnappyOutputStream default
_GZIP_MAGIC: Final = b"\x1f\x8b"

_local = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dctx: zstandard.ZstdDecompressor | None = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = zstandard.ZstdDecompressor()
        _local.zstd = dctx
    return dctx


def _exceeded(codec: Codec, max_size: int) -> DecompressedSizeExceededError:
    return DecompressedSizeExceededError(
        f"{codec.label} payload decompresses to more than the cap of {max_size} bytes"
    )


# --- gzip ------------------------------------------------------------------------------------


def _gunzip(data: bytes | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    produced = 0
    rest: bytes | memoryview = data
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(rest, max_size + 1 - produced)
        except zlib.error as exc:
            raise CodecError(f"gzip payload is corrupt: {exc}") from exc
        produced += len(chunk)
        out.append(chunk)
        if produced > max_size or d.unconsumed_tail:
            raise _exceeded(Codec.GZIP, max_size)
        if not d.eof:
            raise CodecError("gzip payload is truncated")
        rest = d.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            # GZIPInputStream stops at anything after a member that is not another member.
            return b"".join(out)


# --- snappy ----------------------------------------------------------------------------------


def _snappy_block(block: bytes | memoryview, budget: int, max_size: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except Exception as exc:  # cramjam raises its own DecompressionError / ValueError
        raise CodecError(f"snappy block header is corrupt: {exc}") from exc
    if size > budget:
        raise _exceeded(Codec.SNAPPY, max_size)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as exc:
        raise CodecError(f"snappy block is corrupt: {exc}") from exc


def _unsnappy(data: bytes | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_block(view, max_size, max_size)
    if len(view) < _XERIAL_HEADER.size:
        raise CodecError("xerial snappy header is truncated")
    out: list[bytes] = []
    produced = 0
    pos = _XERIAL_HEADER.size
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CodecError("xerial snappy block length is truncated")
        (length,) = _XERIAL_BLOCK_LEN.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CodecError(f"xerial snappy block of {length} bytes overruns the payload")
        block = _snappy_block(view[pos : pos + length], max_size - produced, max_size)
        produced += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


def xerial_snappy_compress(data: bytes, block_size: int = _XERIAL_BLOCK_SIZE) -> bytes:
    """Snappy in the xerial framing, as snappy-java's ``SnappyOutputStream`` writes it."""
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(data), block_size):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + block_size]))
        parts.append(_XERIAL_BLOCK_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# --- lz4 -------------------------------------------------------------------------------------


def _unlz4(data: bytes | memoryview, max_size: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    try:
        out: bytes = d.decompress(data, max_length=max_size + 1)
    except RuntimeError as exc:  # the lz4 binding reports every frame error as RuntimeError
        raise CodecError(f"lz4 frame is corrupt: {exc}") from exc
    if len(out) > max_size or (not d.eof and d.needs_input is False):
        raise _exceeded(Codec.LZ4, max_size)
    if not d.eof:
        raise CodecError("lz4 frame is truncated")
    return out


# --- zstd ------------------------------------------------------------------------------------


def _unzstd(data: bytes | memoryview, max_size: int) -> bytes:
    dctx = _zstd_decompressor()
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise CodecError(f"zstd frame header is corrupt: {exc}") from exc
    if declared > max_size:
        raise _exceeded(Codec.ZSTD, max_size)
    if declared >= 0:
        try:
            # One frame with its size declared: the fast path. (A declared size wins over
            # max_output_size inside zstandard, which is why it was checked above.) Without a
            # declared size zstandard stops after the first frame, so that case and several
            # frames take the exact path below.
            out: bytes = dctx.decompress(data, allow_extra_data=False)
            return out
        except zstandard.ZstdError:
            pass
    return _unzstd_slow(dctx, data, max_size)


def _unzstd_slow(
    dctx: zstandard.ZstdDecompressor, data: bytes | memoryview, max_size: int
) -> bytes:
    """Several frames, an undeclared size past the cap, or corruption: tell them apart."""
    try:
        bounded = dctx.stream_reader(data, read_across_frames=True).read(max_size + 1)
    except zstandard.ZstdError as exc:
        raise CodecError(f"zstd payload is corrupt: {exc}") from exc
    if len(bounded) > max_size:
        raise _exceeded(Codec.ZSTD, max_size)
    # The output is now known to be bounded; the frame-by-frame pass detects truncation, which
    # stream_reader reports as a silent short read.
    out: list[bytes] = []
    rest: bytes | memoryview = data
    try:
        while rest:
            dobj = dctx.decompressobj()
            out.append(dobj.decompress(rest))
            if not dobj.eof:
                raise CodecError("zstd payload is truncated")
            rest = dobj.unused_data
    except zstandard.ZstdError as exc:
        raise CodecError(f"zstd payload is corrupt: {exc}") from exc
    return b"".join(out)


# --- dispatch --------------------------------------------------------------------------------


def decompress(codec: Codec, data: bytes | memoryview, max_size: int) -> bytes:
    """Decompress one batch payload; raises CodecError or DecompressedSizeExceededError."""
    if codec is Codec.ZSTD:
        return _unzstd(data, max_size)
    if codec is Codec.LZ4:
        return _unlz4(data, max_size)
    if codec is Codec.SNAPPY:
        return _unsnappy(data, max_size)
    if codec is Codec.GZIP:
        return _gunzip(data, max_size)
    if len(data) > max_size:
        raise _exceeded(codec, max_size)
    return bytes(data)


def compress(codec: Codec, data: bytes) -> bytes:
    """Compress a records blob the way the Java client's codec streams frame it."""
    if codec is Codec.ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    if codec is Codec.LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    if codec is Codec.SNAPPY:
        return xerial_snappy_compress(data)
    if codec is Codec.GZIP:
        return gzip.compress(data, mtime=0)
    return data
