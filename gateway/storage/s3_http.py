"""The S3 data plane: ranged GETs signed with SigV4 on one pooled HTTP client, aiohttp's
(:class:`S3AiohttpReader`, the default) or httpx's (:class:`S3HttpReader`).

Measured against aioboto3's ``get_object`` (``tests/bench/bench_s3.py``, docs/benchmarks.md):
httpx lost, 1.1-1.35x slower on 64 KiB ranges and 2-3.7x on 1-8 MiB ones (h11 parses bodies in
Python, aiohttp in C); aiohttp with the same signing won, 0.27-0.47 ms of CPU per 64 KiB GET
against 1.45-1.75 ms and 0.9-1.25 ms per 1 MiB GET against 2.0-2.7 ms (issue 30: botocore's
request and response machinery is most of a GET's CPU). :class:`~gateway.storage.s3.S3Store`
reads with aiohttp unless built with ``data_plane="aioboto3"`` or ``"httpx"``, kept so the
choice can be re-measured. Presigned URLs (SigV4 in the query) measured the same as signed
headers: botocore signs either in ~50-80 us; headers are kept, which also sign the ``Range``.

Each request is signed in its headers by botocore's own signer (``S3SigV4Auth``) with frozen
credentials taken, per request, from a :class:`CredentialSource`: for the store, the
aioboto3/aiobotocore session's usual AWS chain (environment, profile, instance role), whose
refreshable credentials renew themselves before they expire. Keys are percent-encoded as
botocore encodes them (everything but unreserved characters and ``/``), and both clients send
that path unchanged (aiohttp given an already encoded URL), so the canonical request the
signature covers is the one S3 sees.

One attempt, no retries here: :class:`~gateway.storage.retry.Retrier` retries the retriable
errors (``StorageUnavailableError``) inside the caller's deadline. Failures go through the one
S3 error table in :mod:`gateway.storage.s3_errors` (through
:func:`gateway.storage.translate.map_exceptions`): the XML body's ``<Code>`` (or the status),
and for transport faults the client's exception type. A body shorter than its
``Content-Length`` is a retriable ``StorageUnavailableError``. No CPU work beyond moving bytes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import quote, urlsplit

import aiohttp
import httpx
import yarl
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest

from gateway.errors import (
    ConfigurationError,
    InvalidKeyError,
    StorageError,
    StorageUnavailableError,
)
from gateway.storage.s3_errors import MAX_ERROR_BODY, NO_CREDENTIALS, translate_response
from gateway.storage.translate import map_exceptions

_DNS_BUCKET: Final = re.compile(r"^[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]$")
_CONTENT_RANGE: Final = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class Credentials(Protocol):
    """Frozen credentials, as botocore's ``ReadOnlyCredentials``."""

    @property
    def access_key(self) -> str: ...
    @property
    def secret_key(self) -> str: ...
    @property
    def token(self) -> str | None: ...


class CredentialSource(Protocol):
    async def get_frozen_credentials(self) -> Credentials: ...


@dataclass(frozen=True, slots=True)
class StaticCredentials:
    """Fixed credentials (tests, benchmarks)."""

    access_key: str
    secret_key: str
    token: str | None = None

    async def get_frozen_credentials(self) -> StaticCredentials:
        return self


class SessionCredentials:
    """The AWS credential chain of an aioboto3 (or aiobotocore) session, resolved on first use.

    aiobotocore's refreshable credentials (instance role, SSO, assume-role) refresh themselves
    in ``get_frozen_credentials`` before they expire, so every request signs with valid ones.
    """

    def __init__(self, session: Any) -> None:
        self._session = session
        self._credentials: Any = None

    async def get_frozen_credentials(self) -> Credentials:
        if self._credentials is None:
            self._credentials = await self._session.get_credentials()
            if self._credentials is None:
                raise ConfigurationError(f"S3: {NO_CREDENTIALS}")
        frozen: Credentials = await self._credentials.get_frozen_credentials()
        return frozen


@dataclass(frozen=True, slots=True)
class HttpOptions:
    bucket: str
    region: str
    endpoint_url: str | None = None  # None: https://s3.<region>.amazonaws.com
    path_style: bool = False  # forced; otherwise chosen as botocore's "auto" does
    max_connections: int = 64
    timeout: float = 10.0  # seconds, per attempt: connect, each read, waiting for the pool


def bucket_url(options: HttpOptions) -> str:
    """The URL objects hang under, ending in ``/``: virtual-host style when the bucket name is
    a DNS label and the endpoint a host name, path style otherwise (IPs, localhost, dotted
    names on https) or when forced."""
    endpoint = options.endpoint_url or f"https://s3.{options.region}.amazonaws.com"
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"S3 endpoint {endpoint!r}: expected http(s)://host[:port]")
    path = parts.path.rstrip("/")
    if options.path_style or not _virtual_host_ok(options.bucket, parts.hostname):
        return f"{parts.scheme}://{parts.netloc}{path}/{quote(options.bucket, safe='')}/"
    return f"{parts.scheme}://{options.bucket}.{parts.netloc}{path}/"


def _virtual_host_ok(bucket: str, host: str) -> bool:
    if host == "localhost" or not _DNS_BUCKET.match(bucket):
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return True
    return False


def quote_key(key: str) -> str:
    """The key as a URL path, encoded as botocore encodes S3 keys (``/`` and ``~`` kept)."""
    if not key or any(part in (".", "..") for part in key.split("/")):
        # URL libraries remove dot segments, which would change the object and the signature.
        raise InvalidKeyError(f"S3 key {key!r}: empty or with '.'/'..' segments")
    return quote(key, safe="/~")


class _SignedReader:
    """GET and ranged GET of one bucket's objects, signed, over one pooled client (the
    transport: :meth:`_send`), closed by :meth:`aclose`."""

    def __init__(self, options: HttpOptions, credentials: CredentialSource) -> None:
        self._options = options
        self._credentials = credentials
        self._base = bucket_url(options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._base!r})"

    async def aclose(self) -> None:
        raise NotImplementedError

    def url(self, key: str) -> str:
        return self._base + quote_key(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (fewer if the object ends first; none if it ends before)."""
        if start < 0 or end < start:
            raise ValueError(f"invalid range [{start}, {end})")
        if end == start:
            return b""
        what = f"GET s3://{self._options.bucket}/{key} bytes={start}-{end - 1}"
        status, headers, body = await self._get(what, key, f"bytes={start}-{end - 1}")
        if status == 206:
            _check_content_range(headers.get("content-range"), start, len(body), what)
            return body
        if status == 416:
            return b""  # InvalidRange: the range starts past the end, as reading past EOF
        return body[start:end]  # 200: the server sent the whole object

    async def get(self, key: str) -> bytes:
        what = f"GET s3://{self._options.bucket}/{key}"
        _, _, body = await self._get(what, key, None)
        return body

    async def _get(
        self, what: str, key: str, byte_range: str | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One signed GET: the status (200, 206 or 416) with headers and the checked body;
        any other status raises its domain error."""
        url = self.url(key)
        with map_exceptions(what, store="s3", endpoint=self._options.endpoint_url or self._base):
            return await self._send(what, url, await self._sign(url, byte_range), byte_range)

    async def _send(
        self, what: str, url: str, headers: dict[str, str], byte_range: str | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        raise NotImplementedError

    async def _sign(self, url: str, byte_range: str | None) -> dict[str, str]:
        credentials = await self._credentials.get_frozen_credentials()
        request = AWSRequest(
            method="GET", url=url, headers={"Range": byte_range} if byte_range else {}
        )
        S3SigV4Auth(credentials, "s3", self._options.region).add_auth(request)
        return dict(request.headers.items())


class S3HttpReader(_SignedReader):
    """The signed GETs on one pooled ``httpx.AsyncClient``."""

    def __init__(
        self,
        options: HttpOptions,
        credentials: CredentialSource,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(options, credentials)
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=options.max_connections,
                max_keepalive_connections=options.max_connections,
            ),
            timeout=httpx.Timeout(options.timeout),
            headers={"Accept-Encoding": "identity"},  # the stored bytes, never re-encoded
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _send(
        self, what: str, url: str, headers: dict[str, str], byte_range: str | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        request = self._client.build_request("GET", url, headers=headers)
        response = await self._client.send(request, stream=True)
        try:
            return await _answer(
                what,
                (response.status_code, response.headers, byte_range),
                response.aread,
                lambda: _read_capped(response),
            )
        finally:
            await response.aclose()


class S3AiohttpReader(_SignedReader):
    """The signed GETs on one pooled ``aiohttp.ClientSession`` (made on first use, inside the
    event loop that uses it)."""

    def __init__(self, options: HttpOptions, credentials: CredentialSource) -> None:
        super().__init__(options, credentials)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = self._options.timeout  # connecting (and waiting for the pool), each read
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._options.max_connections),
                timeout=aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout),
                auto_decompress=False,  # the stored bytes, never re-encoded
                headers={"Accept-Encoding": "identity"},
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _send(
        self, what: str, url: str, headers: dict[str, str], byte_range: str | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        target = yarl.URL(url, encoded=True)  # sent as signed: no re-quoting
        async with self._client().get(target, headers=headers, allow_redirects=False) as response:
            return await _answer(
                what,
                (response.status, response.headers, byte_range),
                response.read,
                lambda: _read_capped_aiohttp(response),
            )


async def _answer(
    what: str,
    response: tuple[int, Mapping[str, str], str | None],
    body: Callable[[], Awaitable[bytes]],
    error_body: Callable[[], Awaitable[bytes]],
) -> tuple[int, Mapping[str, str], bytes]:
    """A response (status, headers, the range asked) as the status (200, 206 or 416), headers
    and checked body; any other status raises its domain error (from at most
    :data:`MAX_ERROR_BODY` bytes of its body)."""
    status, headers, byte_range = response
    if status in (200, 206):
        data = await body()
        _check_length(headers.get("content-length"), len(data), what)
        return status, headers, data
    if status == 416 and byte_range is not None:
        return status, headers, b""
    raise translate_response(status, await error_body(), what)


async def _read_capped(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) >= MAX_ERROR_BODY:
            break
    return bytes(body)


async def _read_capped_aiohttp(response: aiohttp.ClientResponse) -> bytes:
    body = bytearray()
    while len(body) < MAX_ERROR_BODY:
        chunk = await response.content.read(MAX_ERROR_BODY - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


def _check_length(content_length: str | None, got: int, what: str) -> None:
    if content_length is None:
        return
    try:
        expected = int(content_length)
    except ValueError:
        raise StorageError(f"{what}: bad Content-Length {content_length!r}") from None
    if got != expected:
        raise StorageUnavailableError(f"{what}: body of {got} bytes, expected {expected}")


def _check_content_range(content_range: str | None, start: int, got: int, what: str) -> None:
    """A 206 must carry the bytes asked for: from ``start``, as many as it says."""
    match = _CONTENT_RANGE.match(content_range or "")
    if match is None:
        raise StorageError(f"{what}: 206 without a valid Content-Range ({content_range!r})")
    first, last = int(match.group(1)), int(match.group(2))
    if first != start or last - first + 1 != got:
        raise StorageError(f"{what}: got Content-Range {content_range!r} for {got} bytes")
