"""The aiohttp S3 data plane (the default) against a scripted HTTP server on loopback, a real
socket per test: what is signed and sent, what is retried, within which attempts, and which
typed error surfaces for each fault (S3 error codes, resets before and during the body, a body
shorter than its length, a server that never answers, ranges the server ignores or gets wrong).
The faults the httpx plane meets through respx (``test_s3_http_faults.py``), here on the wire."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from gateway.deadline import Deadline
from gateway.errors import (
    ConfigurationError,
    GatewayError,
    ObjectNotFoundError,
    StorageError,
    StorageUnavailableError,
)
from gateway.storage.retry import Retrier, RetryPolicy
from gateway.storage.s3_http import HttpOptions, S3AiohttpReader, StaticCredentials, quote_key

KEY = "prefix/topic €/0/with space+plus=eq~!*'()/00000000000000000000-B.log"
DATA = bytes(range(256)) * 4
CREDS = StaticCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
FAST = RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.004, attempt_timeout=5.0)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

Action = Callable[[asyncio.StreamWriter], Awaitable[None]]


def _raw(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X"]
    fields = {"Content-Length": str(len(body))} | (headers or {})
    lines += [f"{k}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def reply(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Action:
    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(_raw(status, body, headers))
        await writer.drain()

    return act


def s3_error(status: int, code: str, message: str = "Please reduce your request rate.") -> Action:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()
    return reply(status, body, {"Content-Type": "application/xml"})


def partial(start: int, end: int) -> Action:
    last = min(end, len(DATA)) - 1
    content_range = f"bytes {start}-{last}/{len(DATA)}"
    return reply(206, DATA[start : last + 1], {"Content-Range": content_range})


def reset_before_answer() -> Action:
    async def act(writer: asyncio.StreamWriter) -> None:
        writer.transport.abort()

    return act


def reset_mid_body() -> Action:
    async def act(writer: asyncio.StreamWriter) -> None:
        head = _raw(206, DATA[10:20], {"Content-Range": f"bytes 10-19/{len(DATA)}"})
        writer.write(head[:-5])
        await writer.drain()
        writer.transport.abort()

    return act


def truncated_body() -> Action:
    """Promises 10 bytes, sends 5, hangs up."""

    async def act(writer: asyncio.StreamWriter) -> None:
        writer.write(_raw(206, DATA[10:15], {"Content-Range": "bytes 10-19/1024"}).replace(
            b"Content-Length: 5", b"Content-Length: 10"
        ))  # fmt: skip
        await writer.drain()
        writer.close()

    return act


def never_answers() -> Action:
    async def act(writer: asyncio.StreamWriter) -> None:
        await asyncio.Event().wait()  # until the test's server closes

    return act


@dataclass
class Request:
    target: str  # the request line's path, as sent
    headers: dict[str, str]


@dataclass
class ScriptedS3:
    """Answers each request with the next action (the last one repeats)."""

    actions: list[Action]
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    open: dict[asyncio.Task[None], asyncio.StreamWriter] = field(default_factory=dict)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.open[task] = writer
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *fields = head.decode("latin-1").split("\r\n")[:-2]
                headers = dict(f.split(": ", 1) for f in fields)
                self.requests.append(Request(line.split(" ")[1], headers))
                action = self.actions.pop(0) if len(self.actions) > 1 else self.actions[0]
                await action(writer)
                if writer.is_closing():
                    return


@contextlib.asynccontextmanager
async def scripted(*actions: Action) -> AsyncIterator[ScriptedS3]:
    s3 = ScriptedS3(list(actions))
    server = await asyncio.start_server(s3.handle, "127.0.0.1", 0)
    s3.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield s3
    finally:
        server.close()
        for task, writer in s3.open.items():  # the connections too (3.11 has no close_clients)
            writer.transport.abort()
            task.cancel()
        await asyncio.gather(*s3.open, return_exceptions=True)
        await server.wait_closed()


@contextlib.asynccontextmanager
async def reader_for(
    s3: ScriptedS3, creds: StaticCredentials = CREDS, timeout: float = 10.0
) -> AsyncIterator[S3AiohttpReader]:
    options = HttpOptions("segments", "eu-west-1", s3.url, path_style=True, timeout=timeout)
    r = S3AiohttpReader(options, creds)
    try:
        yield r
    finally:
        await r.aclose()


def retrier(policy: RetryPolicy = FAST) -> Retrier:
    return Retrier(policy, rng=random.Random(7))


async def fetch(reader: S3AiohttpReader, r: Retrier) -> bytes:
    return await r.run("get", lambda: reader.get_range(KEY, 10, 20), Deadline.after(30))


async def test_requests_are_sigv4_signed_ranged_and_sent_as_signed() -> None:
    async with scripted(partial(10, 20), reply(200, DATA)) as s3, reader_for(s3) as reader:
        assert await fetch(reader, retrier()) == DATA[10:20]
        assert await reader.get(KEY) == DATA
    ranged, whole = s3.requests
    assert ranged.target == "/segments/" + quote_key(KEY)  # not re-quoted by the client
    assert ranged.headers["Range"] == "bytes=10-19" and "Range" not in whole.headers
    auth = ranged.headers["Authorization"]
    today = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    assert auth.startswith(
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{today}/eu-west-1/s3/aws4_request, "
    )
    assert "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date," in auth
    assert ranged.headers["Host"] == s3.url.removeprefix("http://")
    assert ranged.headers["X-Amz-Content-SHA256"] == EMPTY_SHA256
    assert ranged.headers["Accept-Encoding"] == "identity"
    assert "X-Amz-Security-Token" not in ranged.headers


async def test_session_tokens_are_sent_and_signed() -> None:
    creds = StaticCredentials("ASIATEMP", "secret", token="the-token")
    async with scripted(partial(10, 20)) as s3, reader_for(s3, creds) as reader:
        assert await reader.get_range(KEY, 10, 20) == DATA[10:20]
    headers = s3.requests[0].headers
    assert headers["X-Amz-Security-Token"] == "the-token"
    assert ";x-amz-security-token," in headers["Authorization"]


TRANSIENT = {
    "503 SlowDown": lambda: s3_error(503, "SlowDown"),
    "500 InternalError": lambda: s3_error(500, "InternalError", "internal error"),
    "400 RequestTimeout": lambda: s3_error(400, "RequestTimeout", "socket timed out"),
    "503 without a body": lambda: reply(503),
    "reset before the answer": reset_before_answer,
    "reset mid-body": reset_mid_body,
    "truncated body": truncated_body,
}


RETRIED_BY_US = {k: v for k, v in TRANSIENT.items() if v is not reset_before_answer}


@pytest.mark.parametrize("fault", RETRIED_BY_US.values(), ids=RETRIED_BY_US.keys())
async def test_transient_faults_are_retried(fault: Callable[[], Action]) -> None:
    async with scripted(fault(), partial(10, 20)) as s3, reader_for(s3) as reader:
        r = retrier()
        assert await fetch(reader, r) == DATA[10:20]
    assert len(s3.requests) == 2
    assert (r.counters.attempts, r.counters.retries, r.counters.failures) == (2, 1, 0)


@pytest.mark.parametrize("fault", TRANSIENT.values(), ids=TRANSIENT.keys())
async def test_one_transient_fault_is_a_retriable_storage_unavailable(
    fault: Callable[[], Action],
) -> None:
    async with scripted(fault()) as s3, reader_for(s3) as reader:
        with pytest.raises(StorageUnavailableError) as info:
            await reader.get_range(KEY, 10, 20)
    assert info.value.retriable and f"s3://segments/{KEY} bytes=10-19" in str(info.value)


async def test_a_connection_dropped_before_its_answer_is_tried_again_inside_the_attempt() -> None:
    """aiohttp sends an idempotent request once more, at once, on a new connection when the
    one it used closed before answering (what a pooled connection the store closed while idle
    does): one attempt of ours, two requests. Every other fault is one request per attempt."""
    async with (
        scripted(reset_before_answer(), partial(10, 20)) as s3,
        reader_for(s3) as reader,
    ):
        r = retrier()
        assert await fetch(reader, r) == DATA[10:20]
    assert len(s3.requests) == 2 and (r.counters.attempts, r.counters.retries) == (1, 0)


async def test_a_server_that_never_answers_is_a_retriable_read_timeout() -> None:
    async with scripted(never_answers()) as s3, reader_for(s3, timeout=0.05) as reader:
        with pytest.raises(StorageUnavailableError, match="Timeout") as info:
            await reader.get_range(KEY, 10, 20)
    assert info.value.retriable


async def test_stalled_attempts_time_out_and_are_retried() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=0.001, max_delay=0.004, attempt_timeout=0.05)
    async with (
        scripted(never_answers(), never_answers(), partial(10, 20)) as s3,
        reader_for(s3) as reader,
    ):
        r = retrier(policy)
        assert await fetch(reader, r) == DATA[10:20]
    assert len(s3.requests) == 3
    assert (r.counters.attempts, r.counters.timeouts, r.counters.retries) == (3, 2, 2)


async def test_a_refused_connection_is_retriable() -> None:
    async with scripted(reply(200)) as s3:
        pass  # closed: its port now refuses
    async with reader_for(s3) as reader:
        with pytest.raises(StorageUnavailableError) as info:
            await reader.get_range(KEY, 10, 20)
    assert info.value.retriable and s3.url in str(info.value)


PERMANENT: list[tuple[Callable[[], Action], type[GatewayError]]] = [
    (lambda: s3_error(404, "NoSuchKey", "The specified key does not exist."), ObjectNotFoundError),
    (lambda: reply(404), ObjectNotFoundError),
    (lambda: s3_error(403, "AccessDenied", "Access Denied"), ConfigurationError),
    (lambda: reply(403), ConfigurationError),
    (lambda: s3_error(403, "SignatureDoesNotMatch"), ConfigurationError),
    (lambda: s3_error(301, "PermanentRedirect"), ConfigurationError),
    (lambda: reply(307, b"", {"Location": "http://elsewhere/"}), StorageError),  # not followed
    (lambda: s3_error(400, "InvalidArgument", "SlowDown"), StorageError),  # message not read
]


@pytest.mark.parametrize(("fault", "kind"), PERMANENT)
async def test_permanent_errors_are_not_retried(
    fault: Callable[[], Action], kind: type[GatewayError]
) -> None:
    async with scripted(fault()) as s3, reader_for(s3) as reader:
        r = retrier()
        with pytest.raises(kind) as info:
            await fetch(reader, r)
    assert type(info.value) is kind and not info.value.retriable
    assert len(s3.requests) == 1
    assert (r.counters.attempts, r.counters.retries, r.counters.failures) == (1, 0, 1)


async def test_ranges_past_the_end_ignored_and_wrong() -> None:
    async with (
        scripted(
            s3_error(416, "InvalidRange", "bytes=5000-5009"),  # starts past the end: nothing
            partial(1000, 2000),  # ends past the end: what there is
            reply(200, DATA),  # the Range ignored: sliced
            reply(206, DATA[10:20], {"Content-Range": "bytes 11-20/1024"}),  # other bytes
            reply(206, DATA[10:20]),  # no Content-Range
        ) as s3,
        reader_for(s3) as reader,
    ):
        assert await reader.get_range(KEY, 5000, 5010) == b""
        assert await reader.get_range(KEY, 1000, 2000) == DATA[1000:]
        assert await reader.get_range(KEY, 100, 200) == DATA[100:200]
        for _ in range(2):
            with pytest.raises(StorageError) as info:
                await reader.get_range(KEY, 10, 20)
            assert not info.value.retriable
        assert await reader.get_range(KEY, 7, 7) == b""  # no request
    assert len(s3.requests) == 5
