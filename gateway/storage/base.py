"""The object-store seam: one async protocol every store implements.

Ranges are half-open ``[start, end)`` byte offsets (HTTP's inclusive ``Range`` header is the S3
store's business). A range reaching past the object's end returns the bytes that exist, as S3
does; callers check lengths against what the manifest promised. Errors are the
:mod:`gateway.errors` storage tree: :class:`~gateway.errors.ObjectNotFoundError`,
:class:`~gateway.errors.StorageUnavailableError` (retriable), :class:`~gateway.errors.StorageError`,
:class:`~gateway.errors.ConfigurationError` (access denied), and
:class:`~gateway.errors.InvalidKeyError` for a key the store refuses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: float  # seconds since the epoch


class ObjectStore(Protocol):
    """What the gateway needs of a bucket."""

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (fewer if it ends first)."""
        ...

    async def get(self, key: str) -> bytes: ...

    async def put(self, key: str, data: bytes) -> None:
        """Write the whole object; readers never see a partial one."""
        ...

    def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        """Objects whose key starts with ``prefix`` (a string prefix), in key order."""
        ...

    async def head(self, key: str) -> ObjectInfo: ...

    async def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error (as in S3)."""
        ...

    async def close(self) -> None: ...
