"""One byte-level mutation for the corruption properties of the remote format tests."""

from __future__ import annotations


def mutate(data: bytes, kind: str, where: int, byte: int) -> bytes:
    """Flip, delete or insert one byte at ``where`` (mod length), or truncate there; empty
    input becomes the single byte ``byte``."""
    if not data:
        return bytes([byte])
    pos = where % len(data)
    if kind == "flip":
        return data[:pos] + bytes([data[pos] ^ (byte or 1)]) + data[pos + 1 :]
    if kind == "delete":
        return data[:pos] + data[pos + 1 :]
    if kind == "insert":
        return data[:pos] + bytes([byte]) + data[pos:]
    return data[:pos]
