"""SASL over real sockets: PLAIN with a gateway API key, OAUTHBEARER with a JWT (v1 handshake
and SaslAuthenticate, and the bare-token v0 exchange); wrong keys and tokens, an unknown
mechanism, requests before authentication and out of order each close the connection; the
principal is the HTTP API's (its ACLs apply after)."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from gateway.config import settings_for
from gateway.errors import AuthenticationError
from gateway.listener import codes
from gateway.listener.sasl import OAUTHBEARER, PLAIN, verify
from gateway.listener.server import KafkaListener
from gateway.listener.startup import server_tls
from gateway.security.access import access_for
from tests.fixtures.tls import Pki
from tests.unit.listener.secure import (
    OTHER_KEY,
    Conn,
    call,
    closed,
    connect,
    secured,
    secured_listener,
    send_frame,
    token,
)
from tests.unit.listener.support import TOPIC, context, fake_service, request
from tests.unit.listener.test_server import _listener


def _plain(password: str, user: str = "ci", authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


def _bearer(jwt_token: str, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {jwt_token}\x01\x01".encode()


async def _handshake(conn: Conn, mechanism: str, version: int = 1) -> Any:
    message = SaslHandshakeRequest[version](mechanism=mechanism)
    return await call(conn, message, SaslHandshakeResponse[version], version)


async def _authenticate(conn: Conn, auth_bytes: bytes, version: int = 2) -> Any:
    message = SaslAuthenticateRequest[version](auth_bytes=auth_bytes)
    return await call(conn, message, SaslAuthenticateResponse[version], version)


async def _topic_errors(conn: Conn) -> list[tuple[str, int]]:
    response = await call(conn, MetadataRequest[12](topics=None), MetadataResponse[12], 12)
    return [(t.name, t.error_code) for t in response.topics]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_with_an_api_key_authenticates_the_key_s_principal(
    tmp_path: Path, version: int
) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, sec):
            conn = await connect(listener)
            asked = ApiVersionsRequest[3](client_software_name="u", client_software_version="1")
            versions = await call(conn, asked, ApiVersionsResponse[3], 3)
            served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert served[17] == (0, 1)
            assert served[36] == (0, 2)
            handshake = await _handshake(conn, PLAIN)
            assert handshake.error_code == codes.NONE
            assert handshake.mechanisms == [PLAIN, OAUTHBEARER]
            done = await _authenticate(conn, _plain(sec.api_key, user="anything"), version)
            assert (done.error_code, done.error_message) == (codes.NONE, None)
            if version >= 1:  # an API key has no expiry: the session lasts kafka_reauth_ms
                assert done.session_lifetime_ms == listener.ctx.settings.kafka_reauth_ms > 0
            # User:ci may describe nothing: the topic is left out, the connection is served
            assert await _topic_errors(conn) == []
            conn[1].close()
            m = listener.metrics
            assert m.authentications.labels(PLAIN)._value.get() == 1

    asyncio.run(run())


@pytest.mark.parametrize(
    ("who", "seen"), [("alice", [(TOPIC, codes.NONE)]), ("bob", [(TOPIC, codes.NONE)])]
)
def test_oauthbearer_with_a_jwt_authenticates_its_subject(
    tmp_path: Path, who: str, seen: list[tuple[str, int]]
) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, _):
            conn = await connect(listener)
            assert (await _handshake(conn, OAUTHBEARER)).error_code == codes.NONE
            made = time.time()
            done = await _authenticate(conn, _bearer(token(who), authzid=who))
            assert done.error_code == codes.NONE
            # the token's 600 s left (exp is whole seconds), sooner than kafka_reauth_ms (1 h)
            left_ms = (int(made) + 600 - time.time()) * 1000
            assert left_ms - 1000 <= done.session_lifetime_ms <= left_ms + 1000
            assert done.session_lifetime_ms < listener.ctx.settings.kafka_reauth_ms
            assert await _topic_errors(conn) == seen
            conn[1].close()

    asyncio.run(run())


def _expired() -> str:
    past = int(datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC).timestamp())
    return token("alice", iat=past, exp=past + 60)


@pytest.mark.parametrize(
    ("mechanism", "make", "why"),
    [
        (PLAIN, lambda: _plain("tgk_not-a-key"), "unknown API key"),
        (PLAIN, lambda: _plain(""), "empty password"),
        (PLAIN, lambda: b"ci\0tgk_x", "malformed PLAIN"),
        (PLAIN, lambda: _plain("tgk_x", authzid="someone-else"), "authorization id"),
        (OAUTHBEARER, lambda: _bearer(token("alice", key=OTHER_KEY)), "signature"),
        (OAUTHBEARER, lambda: _bearer(_expired()), "expired"),
        (OAUTHBEARER, lambda: _bearer(token("alice"), authzid="bob"), "authorization id"),
        (OAUTHBEARER, lambda: b"n,,\x01auth=Bearer\x01\x01", "Authorization"),
        (OAUTHBEARER, lambda: b"n,,\x01host=x\x01\x01", "no auth=Bearer"),
        (OAUTHBEARER, lambda: b"garbage", "malformed OAUTHBEARER"),
    ],
)
def test_a_wrong_credential_fails_and_closes_the_connection(
    tmp_path: Path, mechanism: str, make: Callable[[], bytes], why: str
) -> None:
    auth_bytes = make()  # now, not at collection: a token made then may expire before the run

    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, _):
            conn = await connect(listener)
            assert (await _handshake(conn, mechanism)).error_code == codes.NONE
            done = await _authenticate(conn, auth_bytes)
            assert done.error_code == codes.SASL_AUTHENTICATION_FAILED
            assert why.lower() in done.error_message.lower(), done.error_message
            assert await closed(conn[0])
            conn[1].close()
            assert listener.metrics.auth_failures.labels(mechanism)._value.get() == 1

    asyncio.run(run())


def test_an_unknown_mechanism_gets_the_list_and_a_closed_connection(tmp_path: Path) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, _):
            conn = await connect(listener)
            answer = await _handshake(conn, "SCRAM-SHA-512")
            assert answer.error_code == codes.UNSUPPORTED_SASL_MECHANISM
            assert answer.mechanisms == [PLAIN, OAUTHBEARER]
            assert await closed(conn[0])
            conn[1].close()

    asyncio.run(run())


def test_a_request_before_authentication_closes_the_connection(tmp_path: Path) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, _):
            conn = await connect(listener)
            payload = request(MetadataRequest[12](topics=None))
            conn[1].write(len(payload).to_bytes(4, "big") + payload)
            assert await closed(conn[0])
            conn[1].close()
            assert listener.metrics.malformed._value.get() >= 1

    asyncio.run(run())


def test_out_of_order_sasl_is_illegal_state_and_closes(tmp_path: Path) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, sec):
            conn = await connect(listener)  # SaslAuthenticate with no handshake
            done = await _authenticate(conn, _plain(sec.api_key))
            assert done.error_code == codes.ILLEGAL_SASL_STATE
            assert await closed(conn[0])
            conn[1].close()
            conn = await connect(listener)  # a second handshake before the token
            await _handshake(conn, PLAIN)
            assert (await _handshake(conn, PLAIN)).error_code == codes.ILLEGAL_SASL_STATE
            assert await closed(conn[0])
            conn[1].close()
            # once authenticated with SaslAuthenticate v0 (told no session lifetime): no
            # re-authentication (KIP-368 needs v1), a second handshake is out of order
            conn = await connect(listener)
            await _handshake(conn, PLAIN)
            done = await _authenticate(conn, _plain(sec.api_key), version=0)
            assert done.error_code == codes.NONE
            assert (await _handshake(conn, PLAIN)).error_code == codes.ILLEGAL_SASL_STATE
            assert await closed(conn[0])
            conn[1].close()

    asyncio.run(run())


@pytest.mark.parametrize("mechanism", [PLAIN, OAUTHBEARER])
def test_the_v0_exchange_takes_a_bare_token(tmp_path: Path, mechanism: str) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, sec):
            good = _plain(sec.api_key) if mechanism == PLAIN else _bearer(token("alice"))
            conn = await connect(listener)
            assert (await _handshake(conn, mechanism, version=0)).error_code == codes.NONE
            assert await send_frame(conn, good) == b""  # Kafka's empty answer to a good token
            assert len(await _topic_errors(conn)) == (0 if mechanism == PLAIN else 1)
            conn[1].close()
            conn = await connect(listener)
            await _handshake(conn, mechanism, version=0)
            bad = _plain("tgk_wrong") if mechanism == PLAIN else _bearer(_expired())
            conn[1].write(len(bad).to_bytes(4, "big") + bad)
            assert await closed(conn[0])  # a bad bare token: no answer, closed
            conn[1].close()
            while listener.connections:
                await asyncio.sleep(0.01)
            assert listener.metrics.auth_failures.labels(mechanism)._value.get() == 1

    asyncio.run(run())


def test_a_gateway_without_authentication_offers_no_mechanism_and_needs_none() -> None:
    async def run() -> None:
        async with _listener(fake_service()) as listener:
            conn = await connect(listener)
            assert await _topic_errors(conn) == [(TOPIC, codes.NONE)]  # anonymous, open
            answer = await _handshake(conn, PLAIN)
            assert answer.error_code == codes.UNSUPPORTED_SASL_MECHANISM
            assert answer.mechanisms == []
            conn[1].close()

    asyncio.run(run())


def test_verify_checks_each_mechanism_without_a_socket(tmp_path: Path) -> None:
    async def run() -> None:
        sec = await secured(tmp_path)
        assert await verify(sec.access, "h", PLAIN, _plain(sec.api_key)) == "User:ci"
        assert await verify(sec.access, "h", OAUTHBEARER, _bearer(token("bob"))) == "User:bob"
        for bad in (b"", b"\xff\xfe", b"x" * 70_000):
            with pytest.raises(AuthenticationError):
                await verify(sec.access, "h", PLAIN, bad)

    asyncio.run(run())


def test_tls_with_a_client_certificate_is_the_mapped_principal(tmp_path: Path) -> None:
    """The listener's TLS from the HTTP settings: a verified client certificate is the
    principal the mapping rules give it (no SASL needed); without one, SASL is."""
    pki = Pki(tmp_path / "pki")
    server = pki.server()
    alice = pki.client("alice", CN="alice", OU="people", O="Acme", C="US")

    async def run() -> None:
        sec = await secured(tmp_path)
        rules = "RULE:^CN=(.*?),OU=people,.*$/$1/,DEFAULT"
        args = {**sec.settings_args, "tls_certfile": server.cert, "tls_keyfile": server.key,
                "tls_client_ca": pki.ca, "tls_client_cert_required": False,
                "tls_principal_mapping_rules": rules}  # fmt: skip
        settings = settings_for(store="file:///", workers=1, **args)
        access = access_for(settings)
        await access.start()
        ctx = replace(context(fake_service(), port=0, **args), access=access)
        listener = KafkaListener(ctx, "127.0.0.1", 10, tls=server_tls(settings))
        await listener.start()
        try:
            client = ssl.create_default_context(cafile=str(pki.ca))
            client.load_cert_chain(alice.cert, alice.key)
            conn = await asyncio.open_connection("127.0.0.1", listener.port, ssl=client)
            assert await _topic_errors(conn) == [(TOPIC, codes.NONE)]  # User:alice may
            conn[1].close()
            anonymous = ssl.create_default_context(cafile=str(pki.ca))
            conn = await asyncio.open_connection("127.0.0.1", listener.port, ssl=anonymous)
            payload = request(MetadataRequest[12](topics=None))
            conn[1].write(len(payload).to_bytes(4, "big") + payload)
            assert await closed(conn[0])  # no certificate, no SASL: closed
            conn[1].close()
            conn = await asyncio.open_connection("127.0.0.1", listener.port, ssl=anonymous)
            await _handshake(conn, PLAIN)
            assert (await _authenticate(conn, _plain(sec.api_key))).error_code == codes.NONE
            assert await _topic_errors(conn) == []  # User:ci over TLS
            conn[1].close()
        finally:
            await listener.close()

    asyncio.run(run())
