"""Helpers shared by the index and checkpoint modules (private).

Buffers handed to the readers may be ``bytes``, ``bytearray`` or any ``memoryview`` (for example
over an ``mmap``); :func:`as_byte_buffer` turns them into something ``struct.unpack_from`` and
``len`` both see as a flat run of bytes, without copying.
"""

from __future__ import annotations

INT16_MIN = -(1 << 15)
INT16_MAX = (1 << 15) - 1
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

BytesLike = bytes | bytearray | memoryview
"""What the readers accept."""


def as_byte_buffer(buf: BytesLike) -> bytes | memoryview:
    """Return ``buf`` as ``bytes`` or a one-dimensional unsigned-byte ``memoryview`` (no copy).

    A ``memoryview`` with another item format or shape is cast to bytes, which needs it to be
    C-contiguous (a ``TypeError`` otherwise: a caller error, not corrupt data).
    """
    if isinstance(buf, bytes):
        return buf
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def check_range(name: str, value: int, lo: int, hi: int) -> None:
    """Raise ``ValueError`` unless ``lo <= value <= hi`` (for encoders: caller errors)."""
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} is outside [{lo}, {hi}]")


def short_repr(value: object, limit: int = 60) -> str:
    """``repr`` clipped to ``limit`` characters, for error messages quoting corrupt input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
