"""Store error translation, once for every store: :func:`map_exceptions`.

Like httpx's ``map_exceptions``: the block runs, and whatever it raises that is not already a
:class:`~gateway.errors.GatewayError` leaves as the storage tree's error, chained to the
original. S3 (the aioboto3 control plane, the httpx data plane, the boto3 sync store) goes
through the one S3 error table (:func:`gateway.storage.s3_errors.translate`); a filesystem
store's ``OSError`` through :func:`translate_os_error` (its other exceptions, programming
errors, pass unchanged). Which errors are retriable is decided by those two tables alone.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Literal

from gateway.errors import (
    ConfigurationError,
    GatewayError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)

_TRANSIENT_ERRNOS: Final = frozenset({errno.EIO, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT})


def translate_os_error(key: str, exc: OSError, root: Path | None = None) -> GatewayError:
    """An ``OSError`` from reading or writing ``key`` as a storage-tree error. A missing file
    is a missing object only while the store's ``root`` is there: a root that is not (an
    unmounted volume, a moved folder) is the store away, retriable, never a deletion."""
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        if root is not None and not root.is_dir():
            return root_away(root)
        return ObjectNotFoundError(f"object {key!r} not found")
    if isinstance(exc, PermissionError):
        return ConfigurationError(f"access denied to object {key!r}: {exc.strerror}")
    if exc.errno in _TRANSIENT_ERRNOS:
        return StorageUnavailableError(f"reading {key!r}: {exc.strerror}")
    return StorageError(f"object {key!r}: {exc.strerror}")


def root_away(root: Path) -> StorageUnavailableError:
    return StorageUnavailableError(
        f"store root {str(root)!r} is not a directory (not mounted, moved?)"
    )


@contextlib.contextmanager
def map_exceptions(
    what: str,
    *,
    store: Literal["s3", "filesystem"],
    endpoint: str | None = None,
    root: Path | None = None,
) -> Iterator[None]:
    """Translate what the block raises. ``what`` names the operation and object for S3
    (``GET s3://bucket/key``) and is the key for a filesystem store; ``endpoint`` (S3) is
    named in the message of a fault that never reached S3 (connection refused, timeout);
    ``root``: a filesystem store's root, checked when a file is missing."""
    try:
        yield
    except GatewayError:
        raise
    except OSError as exc:
        if store == "filesystem":
            raise translate_os_error(what, exc, root) from exc
        raise _s3(exc, what, endpoint) from exc
    except Exception as exc:
        if store == "filesystem":
            raise
        raise _s3(exc, what, endpoint) from exc


def _s3(exc: Exception, what: str, endpoint: str | None) -> GatewayError:
    # imported here: the table pulls in botocore, aiohttp and httpx, which file stores never need
    from gateway.storage.s3_errors import translate  # noqa: PLC0415

    return translate(exc, what, endpoint=endpoint)
