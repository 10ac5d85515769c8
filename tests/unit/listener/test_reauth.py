"""KIP-368 re-authentication on the Kafka listener (``kafka_reauth_ms``, Kafka's
``connections.max.reauth.ms``).

Most tests drive :func:`gateway.listener.dispatch.answer` on a :class:`Session` whose clocks are a
:class:`FakeClock`: when a session ends is decided by moving the clock, never by sleeping. The
lifetime answered is ``kafka_reauth_ms``, or what is left of the JWT when that is sooner; a
request past the end closes the connection unless the client re-authenticates on it (same
mechanism and principal), which renews the session; clients told no lifetime cannot. The last
tests run a real listener to count re-authentications and expiries, with a lifetime of a few
milliseconds and a wait well past it before the request that must find it expired.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from gateway.listener import codes
from gateway.listener.context import Context
from gateway.listener.dispatch import answer
from gateway.listener.framing import Reply
from gateway.listener.sasl import (
    OAUTHBEARER,
    PLAIN,
    Session,
    SessionExpiredError,
    UnauthenticatedRequestError,
)
from tests.unit.listener.secure import (
    Conn,
    Secured,
    call,
    closed,
    connect,
    secured,
    secured_listener,
    token,
)
from tests.unit.listener.support import TOPIC, context, fake_service, request, unframe

HOUR_MS = 3_600_000


@dataclass
class FakeClock:
    """Both clocks of a session: ``now`` (monotonic) and ``wall`` (epoch), moved together."""

    mono: float = 1000.0  # whole and binary fractions of seconds: sums stay exact
    epoch: float = field(default_factory=lambda: float(int(time.time())))

    def now(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.epoch

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.epoch += seconds


def _plain(password: str, user: str = "ci") -> bytes:
    return f"\0{user}\0{password}".encode()


def _bearer(jwt_token: str) -> bytes:
    return f"n,,\x01auth=Bearer {jwt_token}\x01\x01".encode()


class Client:
    """A connection's session and requests, answered by :func:`answer` in order."""

    def __init__(self, ctx: Context, clock: FakeClock) -> None:
        self.ctx = ctx
        self.session = Session("127.0.0.1", None, clock=clock.now, wall=clock.wall)
        self.correlation = 0

    async def ask(self, message: Any, response_class: Any, version: int) -> tuple[Any, Reply]:
        self.correlation += 1
        reply = await answer(self.ctx, request(message, self.correlation), self.session)
        assert reply is not None
        return response_class.decode(unframe(reply), version=version, header=True), reply

    async def handshake(self, mechanism: str, version: int = 1) -> tuple[Any, Reply]:
        message = SaslHandshakeRequest[version](mechanism=mechanism)
        return await self.ask(message, SaslHandshakeResponse[version], version)

    async def authenticate(self, auth_bytes: bytes, version: int = 2) -> tuple[Any, Reply]:
        message = SaslAuthenticateRequest[version](auth_bytes=auth_bytes)
        return await self.ask(message, SaslAuthenticateResponse[version], version)

    async def login(self, mechanism: str, auth_bytes: bytes, version: int = 2) -> Any:
        """Handshake and authenticate, both succeeding: the SaslAuthenticate answer."""
        shook, _ = await self.handshake(mechanism)
        assert shook.error_code == codes.NONE
        done, reply = await self.authenticate(auth_bytes, version)
        assert (done.error_code, reply.close) == (codes.NONE, False), done.error_message
        return done

    async def topics(self) -> list[tuple[str, int]]:
        response, _ = await self.ask(MetadataRequest[12](topics=None), MetadataResponse[12], 12)
        return [(t.name, t.error_code) for t in response.topics]


async def _client(folder: Path, clock: FakeClock, **settings: Any) -> tuple[Client, Secured]:
    sec = await secured(folder)
    ctx = replace(context(fake_service(), **sec.settings_args, **settings), access=sec.access)
    return Client(ctx, clock), sec


def test_an_api_key_session_lasts_kafka_reauth_ms_then_a_request_closes_it(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, sec = await _client(tmp_path, clock, kafka_reauth_ms=60_000)
        done = await client.login(PLAIN, _plain(sec.api_key))
        assert done.session_lifetime_ms == 60_000
        clock.advance(59.5)
        assert await client.topics() == []  # User:ci may describe nothing; still served
        clock.advance(0.5)
        with pytest.raises(SessionExpiredError, match="PLAIN session of User:ci"):
            await client.topics()

    asyncio.run(run())


def test_re_authentication_renews_the_session_before_or_after_its_end(tmp_path: Path) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, sec = await _client(tmp_path, clock, kafka_reauth_ms=60_000)
        await client.login(PLAIN, _plain(sec.api_key))
        clock.advance(54)  # 90%: where clients re-authenticate
        done = await client.login(PLAIN, _plain(sec.api_key, user="other-name"))
        assert done.session_lifetime_ms == 60_000
        assert client.session.principal == "User:ci"
        clock.advance(59)  # past the first session's end, inside the renewed one
        assert await client.topics() == []
        clock.advance(61)  # past the renewed end: a client may still re-authenticate
        await client.login(PLAIN, _plain(sec.api_key))
        assert await client.topics() == []
        clock.advance(60)
        with pytest.raises(SessionExpiredError):
            await client.topics()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("reauth_ms", "left_s", "lifetime_ms"),
    [(HOUR_MS, 100, 100_000), (30_000, 100, 30_000), (0, 100, 100_000)],
)
def test_a_jwt_session_ends_at_the_token_s_exp_when_that_is_sooner(
    tmp_path: Path, reauth_ms: int, left_s: int, lifetime_ms: int
) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, _ = await _client(tmp_path, clock, kafka_reauth_ms=reauth_ms)
        exp = int(clock.epoch) + left_s
        done = await client.login(OAUTHBEARER, _bearer(token("alice", exp=exp)))
        assert done.session_lifetime_ms == lifetime_ms
        assert client.session.expires_at == clock.mono + lifetime_ms / 1000
        clock.advance(lifetime_ms / 1000 - 0.5)
        assert await client.topics() == [(TOPIC, codes.NONE)]
        clock.advance(0.5)
        with pytest.raises(SessionExpiredError, match="OAUTHBEARER session of User:alice"):
            await client.topics()

    asyncio.run(run())


def test_a_jwt_already_past_exp_inside_the_leeway_ends_the_session_at_once(
    tmp_path: Path,
) -> None:
    """The verifier takes a token up to ``jwt_leeway_s`` past its ``exp``; the session then
    gets 0 ms (Kafka's broker: zero, not negative) and the next request closes it."""

    async def run() -> None:
        clock = FakeClock()
        client, _ = await _client(tmp_path, clock)
        expired_now = token("alice", exp=int(time.time()) + 100)
        clock.advance(101)  # the session's wall clock is past exp; the verifier's is not
        done = await client.login(OAUTHBEARER, _bearer(expired_now))
        assert done.session_lifetime_ms == 0
        with pytest.raises(SessionExpiredError):
            await client.topics()

    asyncio.run(run())


def test_with_kafka_reauth_ms_0_an_api_key_session_never_ends_and_cannot_re_authenticate(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, sec = await _client(tmp_path, clock, kafka_reauth_ms=0)
        done = await client.login(PLAIN, _plain(sec.api_key))
        assert done.session_lifetime_ms == 0  # Kafka's "no re-authentication"
        clock.advance(10 * 365 * 86400)
        assert await client.topics() == []
        shook, reply = await client.handshake(PLAIN)
        assert (shook.error_code, reply.close) == (codes.ILLEGAL_SASL_STATE, True)

    asyncio.run(run())


def test_re_authentication_as_another_principal_fails_and_closes(tmp_path: Path) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, _ = await _client(tmp_path, clock)
        await client.login(OAUTHBEARER, _bearer(token("alice")))
        shook, _ = await client.handshake(OAUTHBEARER)
        assert shook.error_code == codes.NONE
        done, reply = await client.authenticate(_bearer(token("bob")))
        assert (done.error_code, reply.close) == (codes.SASL_AUTHENTICATION_FAILED, True)
        assert "may not change the principal" in done.error_message
        assert client.session.principal == "User:alice"  # never bob, even for a moment

    asyncio.run(run())


def test_re_authentication_with_another_mechanism_or_handshake_v0_is_illegal(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        for mechanism, version in ((OAUTHBEARER, 1), (PLAIN, 0)):
            clock = FakeClock()
            client, sec = await _client(tmp_path / mechanism, clock)
            await client.login(PLAIN, _plain(sec.api_key))
            shook, reply = await client.handshake(mechanism, version)
            assert (shook.error_code, reply.close) == (codes.ILLEGAL_SASL_STATE, True)

    for name in (OAUTHBEARER, PLAIN):
        (tmp_path / name).mkdir()
    asyncio.run(run())


def test_re_authentication_with_an_expired_jwt_fails_and_closes(tmp_path: Path) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, _ = await _client(tmp_path, clock)
        await client.login(OAUTHBEARER, _bearer(token("alice")))
        shook, _ = await client.handshake(OAUTHBEARER)
        assert shook.error_code == codes.NONE
        past = int(time.time()) - 3600  # beyond any leeway
        done, reply = await client.authenticate(_bearer(token("alice", iat=past, exp=past + 60)))
        assert (done.error_code, reply.close) == (codes.SASL_AUTHENTICATION_FAILED, True)
        assert "expired" in done.error_message

    asyncio.run(run())


def test_only_sasl_is_taken_during_a_re_authentication(tmp_path: Path) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, sec = await _client(tmp_path, clock)
        await client.login(PLAIN, _plain(sec.api_key))
        await client.handshake(PLAIN)
        with pytest.raises(UnauthenticatedRequestError, match="re-authentication"):
            await client.topics()

    asyncio.run(run())


@pytest.mark.parametrize("how", ["SaslAuthenticate v0", "bare v0 token"])
def test_a_client_told_no_lifetime_is_closed_at_expiry_and_cannot_re_authenticate(
    tmp_path: Path, how: str
) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, sec = await _client(tmp_path, clock, kafka_reauth_ms=60_000)
        if how == "SaslAuthenticate v0":
            await client.login(PLAIN, _plain(sec.api_key), version=0)
        else:
            await client.handshake(PLAIN, version=0)
            reply = await answer(client.ctx, _plain(sec.api_key), client.session)
            assert reply is not None
            assert unframe(reply) == b""
        assert client.session.expires_at == clock.mono + 60
        clock.advance(30)
        shook, reply = await client.handshake(PLAIN)  # before its end: out of order
        assert (shook.error_code, reply.close) == (codes.ILLEGAL_SASL_STATE, True)
        clock.advance(30)
        with pytest.raises(SessionExpiredError):  # past it: even SASL closes the connection
            await client.handshake(PLAIN)

    asyncio.run(run())


def test_certificate_and_anonymous_sessions_never_end(tmp_path: Path) -> None:
    async def run() -> None:
        clock = FakeClock()
        client, _ = await _client(tmp_path, clock, kafka_reauth_ms=1)
        client.session = Session("127.0.0.1", "User:alice", clock=clock.now, wall=clock.wall)
        clock.advance(10 * 365 * 86400)
        assert await client.topics() == [(TOPIC, codes.NONE)]  # the certificate's principal
        anonymous = Client(context(fake_service(), kafka_reauth_ms=1), clock)
        anonymous.session = Session("127.0.0.1", "User:ANONYMOUS", clock=clock.now)
        clock.advance(10 * 365 * 86400)
        assert await anonymous.topics() == [(TOPIC, codes.NONE)]

    asyncio.run(run())


def test_a_certificate_session_that_also_authenticates_with_sasl_gets_its_lifetime(
    tmp_path: Path,
) -> None:
    """Kafka's SASL_SSL: SASL replaces the certificate's principal, and its session ends."""

    async def run() -> None:
        clock = FakeClock()
        client, sec = await _client(tmp_path, clock, kafka_reauth_ms=60_000)
        client.session = Session("127.0.0.1", "User:alice", clock=clock.now, wall=clock.wall)
        await client.login(PLAIN, _plain(sec.api_key))
        assert client.session.principal == "User:ci"
        clock.advance(60)
        with pytest.raises(SessionExpiredError):
            await client.topics()

    asyncio.run(run())


# --- a real listener: the metrics ---------------------------------------------------------


def _set_reauth_ms(listener: Any, reauth_ms: int) -> None:
    settings = listener.ctx.settings.model_copy(update={"kafka_reauth_ms": reauth_ms})
    listener.ctx = replace(listener.ctx, settings=settings)


def test_the_listener_counts_re_authentications_and_expiries(tmp_path: Path) -> None:
    async def login(conn: Conn, api_key: str) -> Any:
        shook = await call(conn, SaslHandshakeRequest[1](mechanism=PLAIN),
                           SaslHandshakeResponse[1], 1)  # fmt: skip
        assert shook.error_code == codes.NONE
        return await call(conn, SaslAuthenticateRequest[2](auth_bytes=_plain(api_key)),
                          SaslAuthenticateResponse[2], 2)  # fmt: skip

    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, sec):
            metrics = listener.metrics
            conn = await connect(listener)
            try:
                for _ in range(3):  # the first authentication, then two re-authentications
                    done = await login(conn, sec.api_key)
                    assert (done.error_code, done.session_lifetime_ms) == (codes.NONE, HOUR_MS)
                metadata = MetadataRequest[12](topics=None)
                await call(conn, metadata, MetadataResponse[12], 12)  # the SASL ones observed
                assert metrics.authentications.labels(PLAIN)._value.get() == 1
                assert metrics.reauthentications.labels(PLAIN)._value.get() == 2
            finally:
                conn[1].close()

            _set_reauth_ms(listener, 20)  # a session of 20 ms; the request comes 0.5 s later
            conn = await connect(listener)
            try:
                done = await login(conn, sec.api_key)
                assert (done.error_code, done.session_lifetime_ms) == (codes.NONE, 20)
                await asyncio.sleep(0.5)
                payload = request(MetadataRequest[12](topics=None))
                conn[1].write(len(payload).to_bytes(4, "big") + payload)
                assert await closed(conn[0])  # unanswered, closed
            finally:
                conn[1].close()
            while listener.connections:
                await asyncio.sleep(0.01)
            assert metrics.session_expiries.labels(PLAIN)._value.get() == 1
            assert metrics.malformed._value.get() == 0

    asyncio.run(run())
