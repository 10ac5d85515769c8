"""The httpx S3 data plane under injected faults (respx): what is retried, within the deadline,
how many attempts it takes, and which typed error surfaces; plus signing and addressing."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import respx
from aiobotocore.credentials import AioRefreshableCredentials

from gateway.deadline import Deadline
from gateway.errors import (
    ConfigurationError,
    DeadlineExceededError,
    GatewayError,
    InvalidKeyError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from gateway.storage.retry import Retrier, RetryPolicy
from gateway.storage.s3_errors import error_code, translate
from gateway.storage.s3_http import (
    HttpOptions,
    S3HttpReader,
    SessionCredentials,
    StaticCredentials,
    bucket_url,
    quote_key,
)

OPTIONS = HttpOptions("segments", "eu-west-1")
KEY = "prefix/topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-B.log"
URL = f"https://segments.s3.eu-west-1.amazonaws.com/{KEY}"
DATA = bytes(range(256)) * 4
CREDS = StaticCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
FAST = RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.004, attempt_timeout=1.0)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def retrier(policy: RetryPolicy = FAST) -> Retrier:
    return Retrier(policy, rng=random.Random(7))


def s3_error(
    status: int, code: str, message: str = "Please reduce your request rate."
) -> httpx.Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>4442587FB7D0A2F9</RequestId></Error>"
    )
    return httpx.Response(
        status, content=body.encode(), headers={"Content-Type": "application/xml"}
    )


def partial(start: int, end: int) -> httpx.Response:
    """What S3 answers to ``Range: bytes=start-(end-1)`` on DATA."""
    last = min(end, len(DATA)) - 1
    return httpx.Response(
        206,
        content=DATA[start : last + 1],
        headers={"Content-Range": f"bytes {start}-{last}/{len(DATA)}"},
    )


@pytest.fixture
async def reader() -> AsyncIterator[S3HttpReader]:
    r = S3HttpReader(OPTIONS, CREDS)
    try:
        yield r
    finally:
        await r.aclose()


@pytest.fixture
def s3() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=True) as router:
        yield router


async def fetch(reader: S3HttpReader, r: Retrier, deadline: float = 5.0) -> bytes:
    return await r.run("get", lambda: reader.get_range(KEY, 10, 20), Deadline.after(deadline))


async def test_requests_are_sigv4_signed_and_ranged(
    reader: S3HttpReader, s3: respx.MockRouter
) -> None:
    route = s3.get(URL).mock(return_value=partial(10, 20))
    assert await fetch(reader, retrier()) == DATA[10:20]
    request = route.calls.last.request
    assert request.headers["Range"] == "bytes=10-19"
    auth = request.headers["Authorization"]
    today = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    assert auth.startswith(
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{today}/eu-west-1/s3/aws4_request, "
    )
    assert "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date," in auth
    assert len(auth.rsplit("Signature=", 1)[1]) == 64
    assert request.headers["X-Amz-Content-SHA256"] == EMPTY_SHA256
    assert request.headers["X-Amz-Date"].startswith(today)
    assert request.headers["Accept-Encoding"] == "identity"
    assert "X-Amz-Security-Token" not in request.headers


async def test_whole_object_get_sends_no_range(reader: S3HttpReader, s3: respx.MockRouter) -> None:
    route = s3.get(URL).mock(return_value=httpx.Response(200, content=DATA))
    assert await reader.get(KEY) == DATA
    assert "Range" not in route.calls.last.request.headers


async def test_session_tokens_are_sent_and_signed(s3: respx.MockRouter) -> None:
    route = s3.get(URL).mock(return_value=partial(10, 20))
    r = S3HttpReader(OPTIONS, StaticCredentials("ASIATEMP", "secret", token="the-token"))
    try:
        assert await r.get_range(KEY, 10, 20) == DATA[10:20]
    finally:
        await r.aclose()
    headers = route.calls.last.request.headers
    assert headers["X-Amz-Security-Token"] == "the-token"
    assert ";x-amz-security-token," in headers["Authorization"]


class Session:
    def __init__(self, credentials: Any) -> None:
        self.credentials, self.calls = credentials, 0

    async def get_credentials(self) -> Any:
        self.calls += 1
        return self.credentials


async def test_expired_session_credentials_are_refreshed_before_signing(
    s3: respx.MockRouter,
) -> None:
    def metadata(key: str, expires_in: datetime.timedelta) -> dict[str, str]:
        expiry = datetime.datetime.now(datetime.UTC) + expires_in
        return {
            "access_key": key,
            "secret_key": "s",
            "token": "t",
            "expiry_time": expiry.isoformat(),
        }

    fresh = iter(["AKIDSECOND", "AKIDTHIRD"])

    async def refresh() -> dict[str, str]:
        return metadata(next(fresh), datetime.timedelta(hours=1))

    creds = AioRefreshableCredentials.create_from_metadata(
        metadata("AKIDEXPIRED", datetime.timedelta(seconds=-1)), refresh, "test"
    )
    session = Session(creds)
    route = s3.get(URL).mock(side_effect=lambda _: partial(10, 20))
    r = S3HttpReader(OPTIONS, SessionCredentials(session))
    try:
        await r.get_range(KEY, 10, 20)
        await r.get_range(KEY, 10, 20)
    finally:
        await r.aclose()
    auths = [call.request.headers["Authorization"] for call in route.calls]
    assert all("Credential=AKIDSECOND/" in a for a in auths)  # refreshed once, then reused
    assert session.calls == 1


async def test_no_credentials_is_a_configuration_error() -> None:
    r = S3HttpReader(OPTIONS, SessionCredentials(Session(None)))
    retry = retrier()
    try:
        with respx.mock(assert_all_called=False) as router:
            route = router.get(URL).mock(return_value=partial(10, 20))
            with pytest.raises(ConfigurationError, match="no AWS credentials"):
                await retry.run("get", lambda: r.get_range(KEY, 10, 20), Deadline.after(5))
    finally:
        await r.aclose()
    assert route.call_count == 0 and retry.counters.attempts == 1


TRANSIENT_FAULTS = {
    "503 SlowDown": s3_error(503, "SlowDown"),
    "500 InternalError": s3_error(500, "InternalError", "We encountered an internal error."),
    "400 RequestTimeout": s3_error(400, "RequestTimeout", "Your socket connection timed out."),
    "503 without a body": httpx.Response(503),
    "connection reset": httpx.ReadError("[Errno 104] Connection reset by peer"),
    "peer closed mid-body": httpx.RemoteProtocolError("peer closed connection without sending"),
    "connect refused": httpx.ConnectError("[Errno 111] Connection refused"),
    "read timeout": httpx.ReadTimeout("timed out"),
    "truncated body": httpx.Response(
        206,
        content=DATA[10:15],
        headers={"Content-Range": "bytes 10-19/1024", "Content-Length": "10"},
    ),
}


@pytest.mark.parametrize("fault", TRANSIENT_FAULTS.values(), ids=TRANSIENT_FAULTS.keys())
async def test_transient_faults_are_retried(
    reader: S3HttpReader, s3: respx.MockRouter, fault: Any
) -> None:
    route = s3.get(URL).mock(side_effect=[fault, partial(10, 20)])
    r = retrier()
    assert await fetch(reader, r) == DATA[10:20]
    assert route.call_count == 2
    assert (r.counters.attempts, r.counters.retries, r.counters.failures) == (2, 1, 0)


@pytest.mark.parametrize("fault", TRANSIENT_FAULTS.values(), ids=TRANSIENT_FAULTS.keys())
async def test_one_transient_fault_is_a_retriable_storage_unavailable(
    reader: S3HttpReader, s3: respx.MockRouter, fault: Any
) -> None:
    s3.get(URL).mock(side_effect=[fault])
    with pytest.raises(StorageUnavailableError) as info:
        await reader.get_range(KEY, 10, 20)
    assert info.value.retriable and f"s3://segments/{KEY} bytes=10-19" in str(info.value)


async def test_stalled_attempts_time_out_and_are_retried(
    reader: S3HttpReader, s3: respx.MockRouter
) -> None:
    started = 0

    async def stall_twice(_: httpx.Request) -> httpx.Response:
        nonlocal started
        started += 1
        if started <= 2:
            await asyncio.sleep(30)  # respx records only calls that complete
        return partial(10, 20)

    route = s3.get(URL).mock(side_effect=stall_twice)
    r = retrier(
        RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.004, attempt_timeout=0.05)
    )
    assert await fetch(reader, r) == DATA[10:20]
    assert started == 3 and route.call_count == 1
    assert (r.counters.attempts, r.counters.timeouts, r.counters.retries) == (3, 2, 2)


async def test_persistent_slow_down_until_the_deadline(
    reader: S3HttpReader, s3: respx.MockRouter
) -> None:
    started = 0

    async def slow_503(_: httpx.Request) -> httpx.Response:
        nonlocal started
        started += 1
        await asyncio.sleep(0.1)
        return s3_error(503, "SlowDown")

    # Attempts of ~0.1 s each (backoffs <= 4 ms) until the 0.35 s deadline cuts one short: how
    # many fit depends on the machine's load, what they add up to does not.
    route = s3.get(URL).mock(side_effect=slow_503)
    r = retrier(RetryPolicy(max_attempts=100, base_delay=0.001, max_delay=0.004))
    with pytest.raises(DeadlineExceededError) as raised:
        await fetch(reader, r, deadline=0.35)
    c, n, message = r.counters, started, str(raised.value)
    outcomes = {  # where the deadline fell: (calls recorded, retries counted)
        f"during attempt {n}": (n - 1, n - 1),  # an attempt cut short
        f"before retry {n} could start": (n, n - 1),  # a backoff longer than what is left
        f"before attempt {n + 1}": (n, n),  # it passed during the backoff
    }
    (recorded, retries), *_ = [v for k, v in outcomes.items() if k in message]
    assert (route.call_count, c.attempts, c.retries, c.deadline_exceeded) == (
        recorded, n, retries, 1,
    )  # fmt: skip


async def test_persistent_slow_down_exhausts_the_attempts(
    reader: S3HttpReader, s3: respx.MockRouter
) -> None:
    route = s3.get(URL).mock(return_value=s3_error(503, "SlowDown"))
    r = retrier()
    with pytest.raises(StorageUnavailableError, match="SlowDown"):
        await fetch(reader, r)
    assert route.call_count == 5
    assert (r.counters.attempts, r.counters.retries, r.counters.failures) == (5, 4, 1)


PERMANENT = [
    (s3_error(404, "NoSuchKey", "The specified key does not exist."), ObjectNotFoundError),
    (httpx.Response(404), ObjectNotFoundError),
    (s3_error(403, "AccessDenied", "Access Denied"), ConfigurationError),
    (httpx.Response(403), ConfigurationError),
    (s3_error(403, "SignatureDoesNotMatch"), ConfigurationError),
    (s3_error(301, "PermanentRedirect"), ConfigurationError),
    (s3_error(400, "InvalidArgument", "SlowDown"), StorageError),  # message text is not read
]


@pytest.mark.parametrize(("response", "kind"), PERMANENT)
async def test_permanent_errors_are_not_retried(
    reader: S3HttpReader, s3: respx.MockRouter, response: httpx.Response, kind: type[GatewayError]
) -> None:
    route = s3.get(URL).mock(return_value=response)
    r = retrier()
    with pytest.raises(kind) as info:
        await fetch(reader, r)
    assert type(info.value) is kind and not info.value.retriable
    assert route.call_count == 1
    assert (r.counters.attempts, r.counters.retries, r.counters.failures) == (1, 0, 1)


async def test_invalid_range_past_the_end_reads_nothing(
    reader: S3HttpReader, s3: respx.MockRouter
) -> None:
    route = s3.get(URL).mock(return_value=s3_error(416, "InvalidRange", "bytes=5000-5009"))
    r = retrier()
    assert await r.run("get", lambda: reader.get_range(KEY, 5000, 5010), Deadline.after(5)) == b""
    assert route.call_count == 1 and r.counters.attempts == 1


async def test_ranges_past_the_end_and_empty_ranges(
    reader: S3HttpReader, s3: respx.MockRouter
) -> None:
    route = s3.get(URL).mock(return_value=partial(1000, 2000))
    assert await reader.get_range(KEY, 1000, 2000) == DATA[1000:]
    assert route.calls.last.request.headers["Range"] == "bytes=1000-1999"
    assert await reader.get_range(KEY, 7, 7) == b""  # no request
    with pytest.raises(ValueError, match="invalid range"):
        await reader.get_range(KEY, 9, 8)
    assert route.call_count == 1


async def test_a_server_ignoring_range_is_sliced(
    reader: S3HttpReader, s3: respx.MockRouter
) -> None:
    s3.get(URL).mock(return_value=httpx.Response(200, content=DATA))
    assert await reader.get_range(KEY, 100, 200) == DATA[100:200]


@pytest.mark.parametrize("content_range", [None, "bytes 11-20/1024", "bytes 10-14/1024", "junk"])
async def test_a_206_for_other_bytes_is_an_error(
    reader: S3HttpReader, s3: respx.MockRouter, content_range: str | None
) -> None:
    headers = {"Content-Range": content_range} if content_range else {}
    s3.get(URL).mock(return_value=httpx.Response(206, content=DATA[10:20], headers=headers))
    with pytest.raises(StorageError) as info:
        await reader.get_range(KEY, 10, 20)
    assert not info.value.retriable


def test_error_codes_come_from_the_xml_code_element() -> None:
    assert error_code(s3_error(503, "SlowDown").content) == "SlowDown"
    assert error_code(b"<Error><Message>NoSuchKey</Message></Error>") == ""
    assert error_code(b"") == ""
    for exc in [httpx.ReadError("x"), httpx.PoolTimeout("x"), httpx.RemoteProtocolError("x")]:
        assert isinstance(translate(exc, "op"), StorageUnavailableError)
    assert not translate(httpx.UnsupportedProtocol("x"), "op").retriable


@pytest.mark.parametrize(
    ("options", "url"),
    [
        (HttpOptions("segments", "eu-west-1"), "https://segments.s3.eu-west-1.amazonaws.com/"),
        (
            HttpOptions("segments", "eu-west-1", path_style=True),
            "https://s3.eu-west-1.amazonaws.com/segments/",
        ),
        (HttpOptions("b.dotted", "us-east-1"), "https://s3.us-east-1.amazonaws.com/b.dotted/"),
        (HttpOptions("bkt", "us-east-1", "http://127.0.0.1:9000"), "http://127.0.0.1:9000/bkt/"),
        (HttpOptions("bkt", "us-east-1", "http://[::1]:9000/"), "http://[::1]:9000/bkt/"),
        (HttpOptions("bkt", "us-east-1", "http://localhost:9000"), "http://localhost:9000/bkt/"),
        (
            HttpOptions("bkt", "x", "https://minio.example:9000/s3"),
            "https://bkt.minio.example:9000/s3/",
        ),
    ],
)
def test_addressing(options: HttpOptions, url: str) -> None:
    assert bucket_url(options) == url


def test_bad_endpoints_and_keys() -> None:
    with pytest.raises(ConfigurationError):
        bucket_url(HttpOptions("bkt", "r", "ftp://host"))
    assert quote_key("a b/c=d+e/€ü~") == "a%20b/c%3Dd%2Be/%E2%82%AC%C3%BC~"
    for bad in ["", "a/../b", "./a", "a/."]:
        with pytest.raises(InvalidKeyError):
            quote_key(bad)
