"""The one S3 error table, for every S3 client: aioboto3 (control plane; data plane when
chosen) and the signed aiohttp or httpx data planes.

Everything is decided from structured data, never message text: the S3 error ``<Code>`` (from
botocore's parsed ``ClientError`` or from the XML error body aiohttp or httpx hands us), the HTTP
status when there is no code, and the exception *type* for transport faults (connection reset,
timeouts, a body shorter than its ``Content-Length``), which are all retriable.

No client library is imported here: an exception of botocore, aiohttp or httpx can only reach
:func:`translate` from a library that is loaded, so the types are looked up among the loaded
modules when an error is translated (a process that reads a file:// bucket, a Spark worker among
them, never pays for loading the three).
"""

from __future__ import annotations

import re
import sys
from typing import Final

from gateway.errors import (
    ConfigurationError,
    GatewayError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)

NOT_FOUND: Final = frozenset({"NoSuchKey", "NotFound", "404"})
CONFIGURATION: Final = frozenset(
    {
        "AccessDenied",
        "403",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AllAccessDisabled",
        "InvalidBucketName",
        "PermanentRedirect",
        "301",
    }
)
TRANSIENT: Final = frozenset(
    {
        "SlowDown",
        "503",
        "ServiceUnavailable",
        "InternalError",
        "500",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
    }
)
_TRANSIENT_BY_MODULE: Final = {
    "botocore.exceptions": (
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ResponseStreamingError",
        "IncompleteReadError",
    ),
    "aiohttp": ("ClientPayloadError", "ClientConnectionError"),
    # connect, read, write and pool timeouts; connect refused, reset while reading or writing;
    # the peer closed before the whole body (shorter than Content-Length)
    "httpx": ("TimeoutException", "NetworkError", "RemoteProtocolError"),
}
_CREDENTIAL_SETUP: Final = ("ProfileNotFound", "PartialCredentialsError")


def _loaded(module: str, names: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    """The exception types ``names`` of ``module`` if it is loaded, else none."""
    found = sys.modules.get(module)
    return tuple(getattr(found, name) for name in names) if found is not None else ()


def _transient() -> tuple[type[BaseException], ...]:
    kinds: tuple[type[BaseException], ...] = (ConnectionResetError,)
    for module, names in _TRANSIENT_BY_MODULE.items():
        kinds += _loaded(module, names)
    return kinds


# S3 error bodies are small ``<Error><Code>…</Code>…</Error>`` documents; only this much is read.
MAX_ERROR_BODY: Final = 64 * 1024
_CODE: Final = re.compile(rb"<Code>\s*([A-Za-z0-9_.\-]{1,128})\s*</Code>")


def translate_code(code: str, status: int | None, what: str) -> GatewayError:
    """An S3 error code (or, without one, the HTTP status) to a domain error."""
    code = code or (str(status) if status is not None else "")
    if code in NOT_FOUND:
        return ObjectNotFoundError(f"{what}: not found ({code})")
    if code == "NoSuchBucket":  # the bucket away: never a deletion of what it held
        return StorageUnavailableError(f"{what}: NoSuchBucket: the bucket is missing or renamed")
    if code in CONFIGURATION:
        return ConfigurationError(f"{what}: {code}: check the bucket and credentials")
    if code in TRANSIENT or (status is not None and status >= 500):
        return StorageUnavailableError(f"{what}: {code}")
    return StorageError(f"{what}: {code}")


def error_code(body: bytes) -> str:
    """The ``<Code>`` of an S3 XML error body; ``""`` when there is none (e.g. a HEAD)."""
    match = _CODE.search(body[:MAX_ERROR_BODY])
    return match.group(1).decode("ascii") if match else ""


def translate_response(status: int, body: bytes, what: str) -> GatewayError:
    """An HTTP error response from S3 (status and XML body) to a domain error."""
    return translate_code(error_code(body), status, what)


NO_CREDENTIALS: Final = (
    "no AWS credentials found (looked in: the environment, AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY; the shared files ~/.aws/credentials and ~/.aws/config, profile "
    "AWS_PROFILE; web identity; the container and the EC2 instance metadata service, which "
    "AWS_EC2_METADATA_DISABLED=true skips off EC2)"
)


def translate(exc: Exception, what: str, *, endpoint: str | None = None) -> GatewayError:
    """A botocore, aiohttp or httpx exception to a domain error. ``endpoint`` is named when
    the request did not reach S3 (connection refused, timeouts, resets)."""
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is not None and isinstance(exc, botocore.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return translate_code(code, status if isinstance(status, int) else None, what)
    if botocore is not None and isinstance(exc, botocore.NoCredentialsError):
        return ConfigurationError(f"{what}: {NO_CREDENTIALS}")
    # a named profile that is not there, half a key pair
    if isinstance(exc, _loaded("botocore.exceptions", _CREDENTIAL_SETUP)):
        return ConfigurationError(f"{what}: {exc}")
    at = f" at endpoint {endpoint}" if endpoint else ""
    if isinstance(exc, _transient()):
        return StorageUnavailableError(f"{what}: {type(exc).__name__}{at}")
    return StorageError(f"{what}: {type(exc).__name__}{at}")
