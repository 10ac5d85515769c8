"""Open a store from its URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from gateway.errors import ConfigurationError
from gateway.storage.base import ObjectStore
from gateway.storage.filesystem import FilesystemStore

SUPPORTED = ("file:///absolute/dir",)


def open_store(url: str) -> ObjectStore:
    """``file:///abs/dir`` gives a :class:`FilesystemStore`."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigurationError(f"store URL {url!r}: file URLs take no host")
        path = Path(unquote(parsed.path))
        if not path.is_absolute():
            raise ConfigurationError(f"store URL {url!r}: the path must be absolute")
        return FilesystemStore(path)
    raise ConfigurationError(
        f"store URL {url!r}: unsupported scheme {parsed.scheme!r} "
        f"(supported: {', '.join(SUPPORTED)})"
    )
