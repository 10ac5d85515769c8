"""Store URLs: ``s3://bucket`` or ``file:///absolute/dir``, checked once for every store kind."""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlparse

from gateway.errors import ConfigurationError

SUPPORTED: Final = ("file:///absolute/dir", "s3://bucket")


def parse_store_url(url: str) -> str | Path:
    """The bucket name of ``s3://bucket``, or the absolute path of ``file:///dir``; a bad URL
    raises a :class:`~gateway.errors.ConfigurationError` that names it and the problem."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc or parsed.path not in ("", "/"):
            raise ConfigurationError(f"store URL {url!r}: expected s3://bucket")
        return parsed.netloc
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            guess = f"file:///{parsed.netloc}{parsed.path}"
            raise ConfigurationError(
                f"store URL {url!r}: file URLs take no host ({parsed.netloc!r} is read as one); "
                f"a directory is file:///abs/path, three slashes: did you mean {guess!r}?"
            )
        path = Path(unquote(parsed.path))
        if not path.is_absolute():
            raise ConfigurationError(f"store URL {url!r}: the path must be absolute")
        return path
    raise ConfigurationError(
        f"store URL {url!r}: unsupported scheme {parsed.scheme!r} "
        f"(supported: {', '.join(SUPPORTED)})"
    )
