"""Java's integer bounds, the one range check, and buffer helpers shared by the Kafka formats.

``INT16/32/64_MIN/MAX`` are Java's ``Short``/``Integer``/``Long`` bounds; every module that
checks a Kafka integer imports them from here. :func:`check_int` is the one range check: each
caller passes its own typed error (``ValueError`` for encoder arguments, a corrupt-data error
for parsed input), so the bounds logic and message are shared while the error type is not.

Buffers handed to the readers may be ``bytes``, ``bytearray`` or any ``memoryview`` (for example
over an ``mmap``); :func:`as_byte_buffer` turns them into something ``struct.unpack_from`` and
``len`` both see as a flat run of bytes, without copying.
"""

from __future__ import annotations

from collections.abc import Callable

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


ErrorFactory = Callable[[str], Exception]
"""Builds the typed error a check raises from its message (an exception class will do)."""


def check_int(
    name: str, value: object, lo: int, hi: int, *, error: ErrorFactory = ValueError
) -> int:
    """Return ``value`` when it is an ``int`` (not a ``bool``) in ``[lo, hi]``.

    Otherwise raise ``error("<name> <value!r> is outside [<lo>, <hi>]")``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise error(f"{name} {value!r} is outside [{lo}, {hi}]")
    return value


def short_repr(value: object, limit: int = 60) -> str:
    """``repr`` clipped to ``limit`` characters, for error messages quoting corrupt input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
