"""``serve --kafka-listener`` with the HTTP API's security: a real ``serve`` with TLS, API keys,
a JWKS file and an ACL file, read by consumers nobody here wrote over SASL_SSL.

confluent-kafka (librdkafka) with SASL/PLAIN (an API key) and SASL/OAUTHBEARER (a JWT handed
over by ``oauth_cb``), and kafka-python with SASL/PLAIN, read exactly the records written to
the topics their principal may read (:mod:`tests.integration.independent_bucket`); a topic
they may not read gives ``TOPIC_AUTHORIZATION_FAILED``; a wrong key or token fails
authentication; a request before authentication closes the connection; the listener's
metrics are on ``/metrics`` and its requests in the audit log. The certificates, the JWKS and
the tokens are made by the helpers of :mod:`tests.integration.test_security`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import confluent_kafka  # a dev dependency: missing, these tests fail (never skip)
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import KafkaError as KafkaPythonError

from gateway.storage.filesystem import FilesystemStore
from tests.fixtures.ports import listening_ports
from tests.fixtures.secured import SecurityFiles, token, write_security_files
from tests.fixtures.tls import Pki
from tests.integration.independent_bucket import (
    TOPICS,
    IndependentBucket,
    WrittenPartition,
    upload_all,
    write_independent_bucket,
)
from tests.integration.kafka_clients import READ_LIMIT_S, client_record, rd_read
from tests.integration.serve import spawn_serve, stop, wait_for_log
from tests.integration.test_kafka_listener import _expected, _guard

ALICE_TOPIC: Final = "plain.v1-raw"  # User:alice (a JWT) may read it
CI_TOPIC: Final = "zstd-chunks.v2"  # User:ci (the API key) may read it
DENIED: Final = "sealed.eu-1"  # nobody may
ACL: Final = f"""\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={ALICE_TOPIC}, patternType=LITERAL)`:
 \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={CI_TOPIC}, patternType=LITERAL)`:
 \t(principal=User:ci, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)`:
 \t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)
"""  # noqa: E501 - kafka-acls --list lines
_LISTENING: Final = re.compile(rb"Kafka listener on ([0-9.]+):(\d+)")


@dataclass
class Secure:
    bucket: IndependentBucket
    port: int  # the Kafka listener's
    url: str  # the HTTPS API's
    ca: Path
    api_key: str
    signing_key: rsa.RSAPrivateKey
    audit: Path

    def token(self, who: str, **claims: object) -> str:
        return token(self.signing_key, who, **claims)


def _serve(
    files: SecurityFiles, bucket: IndependentBucket, listener: str
) -> tuple[list[str], Path]:
    """The ``serve`` arguments for TLS and ``files`` (API keys, a JWKS file, ACLs), and the CA
    of its certificate."""
    pki = Pki(files.folder / "pki")
    server = pki.server()
    args = bucket.serve_args((bucket.root / "bucket").as_uri())
    return [*args, "--workers", "1", "--port", "0", "--kafka-listener", listener,
            "--rescan-interval-s", "0", "--log-level", "info",
            "--tls-certfile", str(server.cert), "--tls-keyfile", str(server.key),
            *files.serve_args(),
            "--audit-log", str(files.folder / "audit.jsonl")], pki.ca  # fmt: skip


def _start(args: list[str], log_path: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """``serve`` with ``args``: the process, its Kafka listener's port and its HTTPS port (on
    127.0.0.1), once both listen."""
    proc = spawn_serve(args, log_path)

    def http_ports(kafka: re.Match[bytes]) -> list[int]:
        return [p for p in listening_ports(proc.pid) if p != int(kafka[2])]

    kafka = wait_for_log(proc, log_path, _LISTENING, until=lambda m: bool(http_ports(m)))
    return proc, int(kafka[2]), http_ports(kafka)[0]


@contextlib.contextmanager
def secure_gateway(work: Path, topics: Sequence[str], *extra: str) -> Iterator[Secure]:
    """The secured gateway of these tests: ``serve`` over TLS with API keys, JWTs and ACLs and
    the Kafka listener, on an independent bucket of ``topics``, once ready (``extra`` flags)."""
    bucket = write_independent_bucket(work / "root", topics=topics)
    (work / "root" / "bucket").mkdir()
    asyncio.run(upload_all(FilesystemStore(work / "root" / "bucket"), bucket))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    files = write_security_files(work, ACL, key)
    args, ca = _serve(files, bucket, "127.0.0.1:0")
    proc, port, http = _start([*args, *extra], work / "serve.log")
    try:
        sec = Secure(bucket, port, f"https://127.0.0.1:{http}", ca, files.api_keys["ci"], key,
                     work / "audit.jsonl")  # fmt: skip
        _wait_ready(sec, proc, work / "serve.log")
        yield sec
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    with secure_gateway(tmp_path_factory.mktemp("kafka-listener-auth"), TOPICS[:3]) as sec:
        yield sec


def _wait_ready(sec: Secure, proc: subprocess.Popen[bytes], log: Path) -> None:
    headers = {"Authorization": f"Bearer {sec.token('alice')}"}
    deadline = time.monotonic() + 60
    with httpx.Client(verify=ssl.create_default_context(cafile=str(sec.ca))) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}:\n{log.read_text()}")
            if client.get(f"{sec.url}/readyz", headers=headers).status_code == 200:
                return
            time.sleep(0.05)
    raise RuntimeError(f"serve did not become ready:\n{log.read_text()}")


def _partitions(sec: Secure, topic: str) -> list[WrittenPartition]:
    return [w for (t, _), w in sorted(sec.bucket.partitions.items()) if t == topic]


# --- confluent-kafka (librdkafka) -----------------------------------------------------------


def _confluent(sec: Secure, errors: list[Any] | None = None, **config: Any) -> Any:
    def on_error(error: Any) -> None:
        if errors is not None:
            errors.append(error)

    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{sec.port}",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(sec.ca),
            "group.id": "kafka-listener-auth",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",  # the client's default, said
            "error_cb": on_error,
            **config,
        }
    )


def _plain(sec: Secure, password: str | None = None) -> dict[str, Any]:
    return {"sasl.mechanism": "PLAIN", "sasl.username": "ci",
            "sasl.password": sec.api_key if password is None else password}  # fmt: skip


def _oauth(token: Callable[[], str]) -> dict[str, Any]:
    def oauth_cb(_config: str) -> tuple[str, float, str, dict[str, str]]:
        return token(), time.time() + 600, "alice", {}

    return {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}


def _confluent_read(consumer: Any, written: WrittenPartition) -> list[tuple[Any, ...]]:
    return rd_read(consumer, written.topic, written.partition, written.next_offset)


def test_confluent_kafka_plain_with_an_api_key_reads_its_topic(secure: Secure) -> None:
    consumer = _confluent(secure, **_plain(secure))
    try:
        for written in _partitions(secure, CI_TOPIC):
            got = _confluent_read(consumer, written)
            assert got == _expected(written, "read_committed")
    finally:
        consumer.close()


def test_confluent_kafka_oauthbearer_with_a_jwt_reads_its_topics(secure: Secure) -> None:
    consumer = _confluent(secure, **_oauth(lambda: secure.token("alice")))
    try:
        for written in _partitions(secure, ALICE_TOPIC):
            got = _confluent_read(consumer, written)
            assert got == _expected(written, "read_committed")
    finally:
        consumer.close()


def _first_error(consumer: Any, errors: list[Any], topic: str | None) -> Any:
    """The first error the consumer reports (by poll, or its error callback)."""
    if topic is not None:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    start = time.monotonic()
    while not errors:
        if time.monotonic() - start > READ_LIMIT_S:
            raise AssertionError("no error reported")
        message = consumer.poll(0.5)
        if message is not None and message.error() is not None:
            return message.error()
        if message is not None:
            raise AssertionError(f"a record was read: {message.topic()} {message.offset()}")
    return errors[0]


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
def test_confluent_kafka_a_denied_topic_answers_as_a_missing_one(
    secure: Secure, mechanism: str
) -> None:
    """Metadata: the topics a principal may not describe are TOPIC_AUTHORIZATION_FAILED,
    existing or not, and left out of the list of every topic."""
    config = _plain(secure) if mechanism == "PLAIN" else _oauth(lambda: secure.token("alice"))
    mine = CI_TOPIC if mechanism == "PLAIN" else ALICE_TOPIC
    consumer = _confluent(secure, **config)
    try:
        assert set(consumer.list_topics(timeout=30).topics) == {mine}
        for topic in (DENIED, "no.such-topic"):
            found = consumer.list_topics(topic=topic, timeout=30).topics[topic]
            assert found.error.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert consumer.list_topics(topic=mine, timeout=30).topics[mine].error is None
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
def test_confluent_kafka_a_wrong_credential_fails_authentication(
    secure: Secure, mechanism: str
) -> None:
    if mechanism == "PLAIN":
        config = _plain(secure, password="tgk_" + "x" * 43)
    else:  # signed by another key
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        config = _oauth(lambda: token(other, "alice"))
    errors: list[Any] = []
    consumer = _confluent(secure, errors, **config)
    try:
        error = _first_error(consumer, errors, CI_TOPIC)
        assert error.code() == confluent_kafka.KafkaError._AUTHENTICATION, error
        assert "Authentication failed" in error.str(), error.str()
    finally:
        consumer.close()


# --- kafka-python ---------------------------------------------------------------------------


def _kafka_python(sec: Secure, password: str | None = None) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{sec.port}",
        group_id=None,
        enable_auto_commit=False,
        security_protocol="SASL_SSL",
        ssl_cafile=str(sec.ca),
        sasl_mechanism="PLAIN",
        sasl_plain_username="ci",
        sasl_plain_password=sec.api_key if password is None else password,
        request_timeout_ms=30_000,
    )


def test_kafka_python_plain_reads_its_topic_and_not_another(secure: Secure) -> None:
    consumer = _kafka_python(secure)
    try:
        for written in _partitions(secure, CI_TOPIC):
            tp = KTopicPartition(written.topic, written.partition)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got: list[tuple[Any, ...]] = []
            start = time.monotonic()
            while consumer.position(tp) < written.next_offset:
                _guard(start, f"kafka-python {written.topic}-{written.partition}")
                for r in consumer.poll(timeout_ms=500).get(tp, []):
                    got.append(client_record(r))
            assert got == _expected(written, "read_uncommitted")
        assert consumer.topics() == {CI_TOPIC}  # the others: not authorized, not listed
    finally:
        consumer.close()


def test_kafka_python_a_wrong_password_fails_authentication(secure: Secure) -> None:
    with pytest.raises(KafkaPythonError):
        consumer = _kafka_python(secure, password="tgk_wrong")
        consumer.close()


# --- the wire, /metrics, the audit log, the start -------------------------------------------


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_request_before_authentication_closes_the_connection(secure: Secure) -> None:
    header = struct.pack(">hhih", 3, 1, 7, 4) + b"test"  # Metadata v1, all topics
    frame = struct.pack(">i", len(header) + 4) + header + struct.pack(">i", -1)
    context = ssl.create_default_context(cafile=str(secure.ca))
    with (
        socket.create_connection(("127.0.0.1", secure.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        sock.sendall(frame)
        assert _closed_by_server(sock)  # no answer
    with socket.create_connection(("127.0.0.1", secure.port), timeout=10) as raw:
        raw.sendall(frame)  # plaintext Kafka on the TLS listener: not a TLS handshake
        assert _closed_by_server(raw)


def test_the_listener_s_metrics_are_on_metrics(secure: Secure) -> None:
    consumer = _confluent(secure, **_plain(secure))  # at least one authenticated read
    try:
        _confluent_read(consumer, _partitions(secure, CI_TOPIC)[0])
    finally:
        consumer.close()
    headers = {"Authorization": f"Bearer {secure.token('alice')}"}
    context = ssl.create_default_context(cafile=str(secure.ca))
    text = httpx.get(f"{secure.url}/metrics", headers=headers, verify=context).text
    fetches = re.findall(
        r'tiered_gateway_kafka_requests_total\{api="Fetch",error="NONE",version="\d+"\} (\S+)',
        text,
    )
    assert sum(float(v) for v in fetches) >= 1
    assert 'tiered_gateway_kafka_authentications_total{mechanism="PLAIN"}' in text
    assert "tiered_gateway_kafka_connections " in text
    assert "tiered_gateway_remote_gets_total" in text  # the core's, still there


def test_the_audit_log_has_the_listener_s_requests(secure: Secure) -> None:
    consumer = _confluent(secure, **_plain(secure))
    try:
        _confluent_read(consumer, _partitions(secure, CI_TOPIC)[0])
    finally:
        consumer.close()
    lines = [json.loads(line) for line in secure.audit.read_text().splitlines()]
    fetches = [e for e in lines if e["method"] == "KAFKA" and e["path"].startswith("Fetch v")]
    assert any(e["principal"] == "User:ci" and e["topic"] == CI_TOPIC for e in fetches)
    assert all(e["source"] == "127.0.0.1" for e in fetches)


def test_serve_starts_a_listener_off_loopback_once_authentication_is_configured(
    secure: Secure, tmp_path: Path
) -> None:
    for name in ("jwks.json", "api-keys", "acl"):
        (tmp_path / name).write_bytes((secure.ca.parent.parent / name).read_bytes())
    args, _ = _serve(SecurityFiles(tmp_path, secure.signing_key), secure.bucket, "0.0.0.0:0")
    args += ["--kafka-advertised-listener", "127.0.0.1:0"]  # the port it takes
    proc, port, _ = _start(args, tmp_path / "serve.log")
    try:
        assert port > 0
        assert b"Kafka listener on 0.0.0.0:" in (tmp_path / "serve.log").read_bytes()
    finally:
        stop(proc)
