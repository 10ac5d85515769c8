"""Per-chunk transforms of the Aiven ``.log`` object, and the encryption of ``.indexes`` pieces.

Mirrors the plugin's ``transform/CompressionChunkEnumeration``, ``EncryptionChunkEnumeration``,
``DecryptionChunkEnumeration``, ``DecompressionChunkEnumeration`` and
``security/AesEncryptionProvider`` (format spec ``aiven-remote-format.md`` §4, §5.1, §6, §7).

One segment file is cut into chunks of ``originalChunkSize`` bytes (the last one shorter; an
empty segment is one empty chunk). Each chunk is stored as::

    chunk      = original bytes                      (no transform)
               | zstd_frame(original)                (compression)
               | IV[12] ‖ AES-256-GCM(pt) ‖ tag[16]  (encryption; pt = original or the zstd frame)

* Order: compress, then encrypt; reading is decrypt, then decompress.
* zstd: exactly one frame per chunk, level 3, **content size in the frame header** (the Java
  reader sizes its buffer from it), no checksum, no dictionary.
* AES-256-GCM: one data key (DEK, 32 bytes) and one AAD (32 random bytes, stored in the clear
  in the manifest) per segment, shared by all chunks and index pieces of the segment; a fresh
  random 96-bit IV per chunk; 128-bit tag appended after the ciphertext. Stored size =
  plaintext size + 28.
* ``.indexes`` pieces are never compressed: each non-empty piece is one GCM unit as above;
  empty pieces stay empty (0 bytes, no IV, no tag).

Reading checks what the plugin itself does not: a chunk must detransform to exactly the size
the chunk index gives for it. Errors: a failed GCM tag (or a unit too short to hold IV and tag)
is :class:`~gateway.errors.IntegrityError`; a frame that declares more than the chunk's
original size is :class:`~gateway.errors.DecompressedSizeExceededError` (checked before any
memory is spent); any other zstd problem is :class:`~gateway.errors.CodecError`: not one frame
starting with the zstd magic, no content size declared (the plugin's reader cannot read such a
frame either), a declared or actual size other than the chunk index's, truncation, trailing
bytes. An untransformed chunk of the wrong length is :class:`~gateway.errors.CorruptDataError`.
No third-party exception escapes.

Integrity: only encryption detects every change (the GCM tag). A compressed-only chunk carries
no checksum (the plugin writes none), so a changed byte inside a block's literals decompresses,
silently, to different bytes of the right length; changes to the magic or the content-size
field, truncation and trailing bytes are always detected.

Everything here is pure (no I/O) and thread-safe: zstd contexts are thread-local and the
AES-GCM key object is immutable. ``zstandard`` releases the GIL while it works;
``cryptography`` 50 still holds it during AES-GCM (about 9 GB/s, so a few hundred
microseconds per 4 MiB chunk).
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Final

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway.errors import (
    CodecError,
    CorruptDataError,
    CorruptManifestError,
    DecompressedSizeExceededError,
    IntegrityError,
)

IV_SIZE: Final = 12
TAG_SIZE: Final = 16
#: Bytes that encryption adds to every chunk and every non-empty index piece.
ENCRYPTION_OVERHEAD: Final = IV_SIZE + TAG_SIZE
DATA_KEY_SIZE: Final = 32
AAD_SIZE: Final = 32
#: zstd-jni's default level, which ``ZstdCompressCtx`` uses when none is set.
ZSTD_LEVEL: Final = 3
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"

Bytes = bytes | bytearray | memoryview

_local = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    cctx: zstandard.ZstdCompressor | None = getattr(_local, "cctx", None)
    if cctx is None:
        cctx = zstandard.ZstdCompressor(
            level=ZSTD_LEVEL, write_content_size=True, write_checksum=False, write_dict_id=False
        )
        _local.cctx = cctx
    return cctx


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dctx: zstandard.ZstdDecompressor | None = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = zstandard.ZstdDecompressor()
        _local.dctx = dctx
    return dctx


# --- keys ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataKeyAndAad:
    """A segment's AES-256 data key and its AAD (``security/DataKeyAndAAD.java``).

    The AAD's length is not checked (the plugin writes 32 bytes; any length authenticates).
    ``repr`` never shows either value.
    """

    data_key: bytes = field(repr=False)
    aad: bytes = field(repr=False)
    _aead: AESGCM = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.data_key) != DATA_KEY_SIZE:
            raise CorruptManifestError(
                f"AES data key must be {DATA_KEY_SIZE} bytes, got {len(self.data_key)}"
            )
        object.__setattr__(self, "_aead", AESGCM(self.data_key))

    def __repr__(self) -> str:
        return f"DataKeyAndAad(<{len(self.data_key)}-byte key hidden>, aad_len={len(self.aad)})"


def generate_data_key_and_aad() -> DataKeyAndAad:
    """A fresh DEK and an independent fresh AAD for one segment (``createDataKeyAndAAD``)."""
    # Two separate draws, as the plugin insists: the AAD is public, so it must not be the key.
    return DataKeyAndAad(secrets.token_bytes(DATA_KEY_SIZE), secrets.token_bytes(AAD_SIZE))


def encrypt_unit(keys: DataKeyAndAad, plaintext: Bytes) -> bytes:
    """``IV ‖ ciphertext ‖ tag`` of ``plaintext`` under a fresh random IV."""
    iv = secrets.token_bytes(IV_SIZE)
    return iv + keys._aead.encrypt(iv, plaintext, keys.aad)


def decrypt_unit(keys: DataKeyAndAad, stored: Bytes) -> bytes:
    """Verify and decrypt one ``IV ‖ ciphertext ‖ tag`` unit; IntegrityError if altered."""
    view = memoryview(stored)
    if len(view) < ENCRYPTION_OVERHEAD:
        raise IntegrityError(
            f"encrypted unit of {len(view)} bytes is shorter than IV + tag "
            f"({ENCRYPTION_OVERHEAD} bytes)"
        )
    try:
        return keys._aead.decrypt(view[:IV_SIZE], view[IV_SIZE:], keys.aad)
    except InvalidTag as exc:
        raise IntegrityError(
            f"AES-GCM tag mismatch on an encrypted unit of {len(view)} bytes "
            "(altered bytes, or the wrong data key or AAD)"
        ) from exc


# --- chunk transform config ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChunkTransform:
    """How a segment's chunks are stored: the manifest's ``compression`` and ``encryption``."""

    compression: bool = False
    encryption: DataKeyAndAad | None = None

    @property
    def is_identity(self) -> bool:
        """Neither transform: the ``.log`` object is byte-identical to the segment file."""
        return not self.compression and self.encryption is None


# --- zstd ------------------------------------------------------------------------------------


def _compress(original: Bytes) -> bytes:
    return _zstd_compressor().compress(original)


def _decompress(frame: Bytes, original_size: int) -> bytes:
    if bytes(frame[:4]) != ZSTD_MAGIC:
        # Also refuses skippable frames, which zstandard reports as declaring 0 bytes.
        raise CodecError("chunk does not start with the zstd frame magic")
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise CodecError(f"chunk is not a zstd frame: {exc}") from exc
    if declared < 0:
        # The plugin always writes the size and its reader cannot size a buffer without it.
        raise CodecError("zstd frame does not declare its content size")
    if declared > original_size:
        raise DecompressedSizeExceededError(
            f"zstd frame declares {declared} bytes, the chunk index says {original_size}"
        )
    if declared < original_size:
        raise CodecError(
            f"zstd frame declares {declared} bytes, the chunk index says {original_size}"
        )
    if declared == 0:
        return _decompress_empty(frame)
    try:
        # declared == original_size: zstandard allocates exactly that much.
        out: bytes = _zstd_decompressor().decompress(frame, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise CodecError(f"zstd chunk is corrupt: {exc}") from exc
    if len(out) != original_size:
        raise CodecError(
            f"zstd chunk decompresses to {len(out)} bytes, the chunk index says {original_size}"
        )
    return out


def _decompress_empty(frame: Bytes) -> bytes:
    # zstandard's one-shot decompress() returns b"" for a declared size of 0 without reading
    # the blocks or looking for trailing bytes; the streaming object checks the whole frame.
    dobj = _zstd_decompressor().decompressobj()
    try:
        out = dobj.decompress(frame)
    except zstandard.ZstdError as exc:
        raise CodecError(f"zstd chunk is corrupt: {exc}") from exc
    if not dobj.eof:
        raise CodecError("zstd chunk is truncated")
    if dobj.unused_data or out:
        raise CodecError("zstd chunk has bytes after its frame")
    return b""


# --- chunks ----------------------------------------------------------------------------------


def transform_chunk(original: Bytes, transform: ChunkTransform) -> bytes:
    """Store form of one original chunk: optional zstd frame, then optional GCM unit."""
    data: Bytes = original
    if transform.compression:
        data = _compress(data)
    if transform.encryption is not None:
        data = encrypt_unit(transform.encryption, data)
    return bytes(data)


def detransform_chunk(stored: Bytes, original_size: int, transform: ChunkTransform) -> bytes:
    """Original bytes of one stored chunk; ``original_size`` is its size in the chunk index.

    Decrypts (verifying the tag) if encrypted, then decompresses if compressed; the result
    must be exactly ``original_size`` bytes. An untransformed ``bytes`` input is returned
    as is (no copy).
    """
    if original_size < 0:
        raise CorruptManifestError(f"chunk original size {original_size} is negative")
    data: Bytes = stored
    if transform.encryption is not None:
        data = decrypt_unit(transform.encryption, data)
    if transform.compression:
        return _decompress(data, original_size)
    if len(data) != original_size:
        what = "decrypted chunk" if transform.encryption is not None else "stored chunk"
        raise CorruptDataError(
            f"{what} has {len(data)} bytes, the chunk index says {original_size}"
        )
    return data if isinstance(data, bytes) else bytes(data)


# --- .indexes pieces -------------------------------------------------------------------------


def transform_index_piece(data: Bytes, transform: ChunkTransform) -> bytes:
    """Store form of one index piece: a GCM unit if encrypted and non-empty, else raw."""
    if transform.encryption is None or len(data) == 0:
        return bytes(data)
    return encrypt_unit(transform.encryption, data)


def detransform_index_piece(stored: Bytes, transform: ChunkTransform) -> bytes:
    """Original bytes of one stored index piece (never compressed; empty stays empty)."""
    if transform.encryption is None or len(stored) == 0:
        return stored if isinstance(stored, bytes) else bytes(stored)
    return decrypt_unit(transform.encryption, stored)
