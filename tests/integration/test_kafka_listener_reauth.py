"""KIP-368 re-authentication against a real ``serve --kafka-listener`` with TLS and SASL, and a
session lifetime of 2 s (``--kafka-reauth-ms 2000``, ``--jwt-leeway-s 0``).

confluent-kafka (librdkafka 2.2+) and kafka-python (3.0+) re-authenticate on their connection
before the session ends; each reads a whole partition, slowly, over several lifetimes and gets
exactly the records written, and ``/metrics`` counts their re-authentications. A JWT that
expires ends its session: the connection's next request closes it, and the expired token no
longer authenticates a new one (raw frames over TLS, then confluent-kafka, which reads nothing
after). The servers, the bucket, the keys and the tokens are those of
:mod:`tests.integration.test_kafka_listener_auth`.
"""

from __future__ import annotations

import re
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from typing import Any, Final

import confluent_kafka  # a dev dependency: missing, these tests fail (never skip)
import httpx
import pytest
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.integration.independent_bucket import (
    TOPICS,
    WrittenPartition,
)
from tests.integration.kafka_clients import READ_LIMIT_S, client_record, guard, rd_record
from tests.integration.test_kafka_listener import _expected
from tests.integration.test_kafka_listener_auth import (
    ALICE_TOPIC,
    CI_TOPIC,
    Secure,
    _confluent,
    _kafka_python,
    _oauth,
    _partitions,
    _plain,
    secure_gateway,
)
from tests.unit.listener.support import request

REAUTH_MS: Final = 2000
LIFETIMES: Final = 4  # a slow read lasts at least this many session lifetimes
_SMALL: Final = 512  # fetch sizes that take many fetches to read a partition


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    work = tmp_path_factory.mktemp("kafka-listener-reauth")
    reauth = ("--kafka-reauth-ms", str(REAUTH_MS), "--jwt-leeway-s", "0")
    with secure_gateway(work, TOPICS[:2], *reauth) as sec:
        yield sec


def _counter(sec: Secure, name: str, mechanism: str | None) -> float:
    """``tiered_gateway_kafka_<name>_total{mechanism=...}`` (no label when ``mechanism`` is
    None) on ``/metrics``; 0 when absent."""
    headers = {"Authorization": f"Bearer {sec.token('alice')}"}
    context = ssl.create_default_context(cafile=str(sec.ca))
    text = httpx.get(f"{sec.url}/metrics", headers=headers, verify=context).text
    labels = "" if mechanism is None else rf'\{{mechanism="{mechanism}"\}}'
    pattern = rf"^tiered_gateway_kafka_{name}_total{labels} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _pace(start: float, done: int, total: int) -> None:
    """Sleep so that ``done`` of ``total`` records take their share of LIFETIMES lifetimes."""
    due = start + LIFETIMES * REAUTH_MS / 1000 * done / total
    time.sleep(max(0.0, due - time.monotonic()))


def _slow_confluent_read(consumer: Any, written: WrittenPartition) -> tuple[list[Any], float]:
    """The partition's records, read from its beginning at :func:`_pace`'s rate; the time it
    took."""
    tp = confluent_kafka.TopicPartition(written.topic, written.partition,
                                        confluent_kafka.OFFSET_BEGINNING)  # fmt: skip
    consumer.assign([tp])
    total = len(_expected(written, "read_committed"))
    got: list[Any] = []
    start = time.monotonic()
    while True:
        (position,) = consumer.position([tp])
        if position.offset >= written.next_offset:
            break
        guard(start, f"confluent-kafka {written.topic}-{written.partition}")
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"confluent-kafka: {error}")
        got.append(rd_record(message))
        _pace(start, len(got), total)
    return got, time.monotonic() - start


def test_confluent_kafka_re_authenticates_and_reads_exactly_the_partition(
    secure: Secure,
) -> None:
    """librdkafka re-authenticates at 90% of the 2 s session, on the same connection, while
    it reads one partition over at least four sessions; the records are exactly those
    written."""
    before = _counter(secure, "reauthentications", "PLAIN")
    expiries = _counter(secure, "session_expiries", "PLAIN")
    errors: list[Any] = []
    consumer = _confluent(secure, errors, **_plain(secure), **{
        "message.max.bytes": 1000, "fetch.max.bytes": 1000,  # their smallest
        "max.partition.fetch.bytes": _SMALL,
        "queued.max.messages.kbytes": 1, "queued.min.messages": 1,  # fetch as it is read
        "fetch.queue.backoff.ms": 50,
    })  # fmt: skip
    try:
        (written,) = _partitions(secure, CI_TOPIC)
        got, took = _slow_confluent_read(consumer, written)
    finally:
        consumer.close()
    assert got == _expected(written, "read_committed")
    assert took >= LIFETIMES * REAUTH_MS / 1000
    reauthentications = _counter(secure, "reauthentications", "PLAIN") - before
    assert reauthentications >= LIFETIMES - 1, (reauthentications, errors)
    assert _counter(secure, "session_expiries", "PLAIN") == expiries  # none was closed


def test_kafka_python_re_authenticates_and_reads_exactly_the_partition(secure: Secure) -> None:
    """kafka-python 3 (its ``SaslReauthenticator``) re-authenticates at 85-95% of the
    session likewise."""
    before = _counter(secure, "reauthentications", "PLAIN")
    expiries = _counter(secure, "session_expiries", "PLAIN")
    consumer = _kafka_python(secure)
    consumer.config["max_partition_fetch_bytes"] = _SMALL
    consumer.config["fetch_max_bytes"] = _SMALL
    try:
        (written,) = _partitions(secure, CI_TOPIC)
        tp = KTopicPartition(written.topic, written.partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        want = _expected(written, "read_uncommitted")
        got: list[Any] = []
        start = time.monotonic()
        while consumer.position(tp) < written.next_offset:
            guard(start, f"kafka-python {written.topic}-{written.partition}")
            for r in consumer.poll(timeout_ms=500, max_records=1).get(tp, []):
                got.append(client_record(r))
                _pace(start, len(got), len(want))
        took = time.monotonic() - start
    finally:
        consumer.close()
    assert got == want
    assert took >= LIFETIMES * REAUTH_MS / 1000
    reauthentications = _counter(secure, "reauthentications", "PLAIN") - before
    assert reauthentications >= LIFETIMES - 1, reauthentications
    assert _counter(secure, "session_expiries", "PLAIN") == expiries  # none was closed


# --- an expiring JWT ------------------------------------------------------------------------


class _Wire:
    """Kafka frames over TLS to the listener (kafka-python's message classes)."""

    def __init__(self, sec: Secure) -> None:
        context = ssl.create_default_context(cafile=str(sec.ca))
        raw = socket.create_connection(("127.0.0.1", sec.port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        self.correlation = 0

    def call(self, message: Any, response_class: Any, version: int) -> Any:
        self.correlation += 1
        payload = request(message, self.correlation)
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._read(4))[0]
        return response_class.decode(self._read(size), version=version, header=True)

    def login(self, jwt_token: str) -> Any:
        handshake = SaslHandshakeRequest[1](mechanism="OAUTHBEARER")
        assert self.call(handshake, SaslHandshakeResponse[1], 1).error_code == 0
        auth_bytes = f"n,,\x01auth=Bearer {jwt_token}\x01\x01".encode()
        return self.call(SaslAuthenticateRequest[2](auth_bytes=auth_bytes),
                         SaslAuthenticateResponse[2], 2)  # fmt: skip

    def closed_by_server(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def _until(when: float) -> None:
    """Sleep until the wall clock is past ``when`` (seconds since the epoch)."""
    time.sleep(max(0.0, when - time.time()))


def test_an_expired_jwt_ends_the_session_and_authenticates_no_more(secure: Secure) -> None:
    """Raw frames: the session lasts 2 s while the token has more left, then what is left of
    the token on re-authentication; past the token's ``exp`` the next request closes the
    connection unanswered, and the token authenticates no new one."""
    exp = int(time.time()) + 8
    jwt_token = secure.token("alice", exp=exp)
    expiries = _counter(secure, "session_expiries", "OAUTHBEARER")
    wire = _Wire(secure)
    try:
        done = wire.login(jwt_token)
        assert (done.error_code, done.session_lifetime_ms) == (0, REAUTH_MS)  # the shorter
        metadata = wire.call(MetadataRequest[12](topics=None), MetadataResponse[12], 12)
        assert [t.name for t in metadata.topics] == [ALICE_TOPIC]
        _until(exp - 1.5)  # re-authenticate with the token's last 1.5 s or less
        sent = time.time()
        done = wire.login(jwt_token)
        assert done.error_code == 0
        assert 0 < done.session_lifetime_ms <= (exp - sent) * 1000 < REAUTH_MS  # exp's bound
        _until(exp + 1)  # well past the token's (and so the session's) end
        payload = request(MetadataRequest[12](topics=None), 99)
        wire.sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert wire.closed_by_server()  # unanswered
    finally:
        wire.close()
    assert _counter(secure, "session_expiries", "OAUTHBEARER") == expiries + 1
    wire = _Wire(secure)
    try:
        done = wire.login(jwt_token)  # the same token on a new connection
        assert done.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "token expired" in done.error_message
        assert wire.closed_by_server()
    finally:
        wire.close()


def test_confluent_kafka_reads_nothing_once_its_jwt_expired(secure: Secure) -> None:
    """librdkafka's token source keeps handing over a token that expires (an identity provider
    that no longer issues one): the consumer is served before the token's ``exp``; after it,
    re-authentication and new connections fail, and no record is delivered."""
    exp = int(time.time()) + 10
    jwt_token = secure.token("alice", exp=exp)
    errors: list[Any] = []
    consumer = _confluent(secure, errors, **_oauth(lambda: jwt_token))
    try:
        assert ALICE_TOPIC in consumer.list_topics(timeout=30).topics  # authenticated
        assert time.time() < exp  # (else the token expired before: nothing shown)
        _until(exp + 1)
        written = _partitions(secure, ALICE_TOPIC)[0]
        tp = confluent_kafka.TopicPartition(written.topic, written.partition, 0)
        consumer.assign([tp])  # every record of the partition would be fetched
        start = time.monotonic()
        while not any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors):
            if time.monotonic() - start > READ_LIMIT_S:
                raise AssertionError(f"no authentication error: {errors}")
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                raise AssertionError(f"a record was read after the JWT expired: {message}")
    finally:
        consumer.close()
    assert any("token expired" in e.str() for e in errors), errors
