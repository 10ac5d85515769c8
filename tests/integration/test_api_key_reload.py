"""Revoking an API key without a restart: a real ``serve`` with TLS, API keys, an ACL file and
the Kafka listener (``--kafka-reauth-ms 2000``), whose key file is rewritten under it.

Each test adds a key of its own (the file written to a temporary name and renamed over the old
one, as the docs say), sees it work, removes it, and checks what the docs promise: the gateway
stats the file at most once a second, on the request that asks, so the first request one
second (:data:`CHECK_S`) after the rename is answered with the new keys. The test waits that
second after the rename returns (a lower bound: no sleep races a timeout) and then asks once,
with no polling: over HTTPS (``X-API-Key``: 401 ``authentication_failed``), on a new Kafka
connection (SASL/PLAIN from raw frames and from kafka-python: ``SASL_AUTHENTICATION_FAILED``),
and on a Kafka connection authenticated before the removal, which re-authenticates (as clients
do before their session ends; the session here, :data:`REAUTH_MS`, outlasts any test, so no
verdict depends on when it ends) and is refused and closed at its first re-authentication
after it. The
key the fixture starts with keeps working throughout, and a key file that does not parse keeps
the keys in force (the revoked key stays refused, the others admitted). The servers, the
bucket, the certificates and the raw frames are those of
:mod:`tests.integration.test_kafka_listener_auth` and
:mod:`tests.integration.test_kafka_listener_reauth`.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from kafka.errors import KafkaError as KafkaPythonError
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from gateway.security.apikeys import new_key
from tests.integration.independent_bucket import TOPICS
from tests.integration.test_kafka_listener_auth import (
    CI_TOPIC,
    Secure,
    _kafka_python,
    secure_gateway,
)
from tests.integration.test_kafka_listener_reauth import _Wire

REAUTH_MS: Final = 600_000  # longer than a test may run (pytest-timeout: 300 s)
CHECK_S: Final = 1.0  # the gateway stats its key file at most this often (WatchedFile)
SASL_AUTHENTICATION_FAILED: Final = 58
KEPT: Final = "User:ci"  # the fixture's key, never removed
REFUSED: Final = (401, "authentication_failed")  # HTTP's answer to an unknown key


@dataclass
class Gateway:
    """The running ``serve`` and its key file, which holds ``lines``: principal and hash field
    by key."""

    sec: Secure
    key_file: Path
    log: Path
    lines: dict[str, tuple[str, str]]

    def write_keys(self, extra: str = "") -> None:
        """Rewrite the key file with :attr:`lines` (and ``extra`` text): a new file renamed
        over the old one; return once the gateway's next request must see it (:data:`CHECK_S`
        after the rename)."""
        staged = self.key_file.with_name("api-keys.new")
        staged.write_text("".join(f"{p} {h}\n" for p, h in self.lines.values()) + extra)
        staged.replace(self.key_file)
        _a_check_later(time.monotonic())

    def add_key(self, principal: str) -> str:
        """A new key of ``principal``, written to the file and admitted over HTTP."""
        key, line = new_key()
        self.lines[key] = (principal, line)
        self.write_keys()
        assert self.http(key) == (200, None)
        return key

    def remove_key(self, key: str) -> None:
        del self.lines[key]
        self.write_keys()

    def http(self, key: str) -> tuple[int, str | None]:
        """The status and error code of a topic request with ``key`` as ``X-API-Key``."""
        context = ssl.create_default_context(cafile=str(self.sec.ca))
        r = httpx.get(f"{self.sec.url}/v1/topics/{CI_TOPIC}/partitions",
                      headers={"X-API-Key": key}, verify=context, timeout=30)  # fmt: skip
        return r.status_code, None if r.status_code == 200 else r.json().get("error_code")

    def refused_over_http(self, key: str) -> bool:
        status = self.http(key)
        assert status in ((200, None), REFUSED), status
        return status == REFUSED


def _a_check_later(written: float) -> None:
    """Sleep until :data:`CHECK_S` after ``written`` (a monotonic time taken once the rename
    returned, the clock the gateway's check uses): the gateway's last check before the rename
    was earlier still, so its next check is due by then and sees the new file."""
    while (left := written + CHECK_S - time.monotonic()) > 0:
        time.sleep(left)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    work = tmp_path_factory.mktemp("api-key-reload")
    with secure_gateway(work, TOPICS[:2], "--kafka-reauth-ms", str(REAUTH_MS)) as sec:
        principal, line = (work / "api-keys").read_text().strip().split(" ", 1)
        assert principal == KEPT
        yield Gateway(sec, work / "api-keys", work / "serve.log", {sec.api_key: (KEPT, line)})


# --- HTTP ---------------------------------------------------------------------------------


def test_a_removed_key_is_refused_over_http_and_the_others_kept(gateway: Gateway) -> None:
    key = gateway.add_key("User:ci")  # a second key of the same principal: a rotation
    assert gateway.http(key) == (200, None)
    gateway.remove_key(key)
    for _ in range(
        20
    ):  # the first request a second on, and for good  # for good: no request admits it again
        assert gateway.http(key) == REFUSED
    assert gateway.http(gateway.sec.api_key) == (200, None)  # the kept key


def test_a_key_file_that_does_not_parse_keeps_the_keys_in_force(gateway: Gateway) -> None:
    key = gateway.add_key("User:ci")
    revoked = gateway.add_key("User:ci")
    gateway.remove_key(revoked)
    assert gateway.http(revoked) == REFUSED
    errors_before = gateway.log.read_text().count("the previous API keys stay in force")
    del gateway.lines[key]  # would revoke it, if the file parsed
    gateway.write_keys(extra="tgk_a-key-pasted-by-mistake\n")
    assert gateway.http(gateway.sec.api_key) == (200, None)  # the request that checks
    log = gateway.log.read_text()  # logged before that answer was sent
    assert log.count("the previous API keys stay in force") == errors_before + 1
    assert "API key file" in log and "line 2: expected" in log and "pasted" not in log
    assert gateway.http(key) == (200, None)  # still in force
    assert gateway.http(gateway.sec.api_key) == (200, None)
    assert gateway.http(revoked) == REFUSED  # not fallen open either
    gateway.write_keys()  # fixed: it parses, and no longer has ``key``
    assert gateway.http(key) == REFUSED
    assert gateway.http(gateway.sec.api_key) == (200, None)


# --- the Kafka listener -------------------------------------------------------------------


class _PlainWire(_Wire):
    """:class:`_Wire` (Kafka frames over TLS) with SASL/PLAIN."""

    def login_plain(self, key: str) -> Any:
        handshake = SaslHandshakeRequest[1](mechanism="PLAIN")
        assert self.call(handshake, SaslHandshakeResponse[1], 1).error_code == 0
        auth_bytes = f"\0ci\0{key}".encode()
        return self.call(SaslAuthenticateRequest[2](auth_bytes=auth_bytes),
                         SaslAuthenticateResponse[2], 2)  # fmt: skip

    def topics(self) -> list[str]:
        metadata = self.call(MetadataRequest[12](topics=None), MetadataResponse[12], 12)
        return [t.name for t in metadata.topics]


def _refused_on_a_new_connection(gateway: Gateway, key: str) -> bool:
    """Whether a new Kafka connection fails SASL/PLAIN with ``key`` (it must then be closed)."""
    wire = _PlainWire(gateway.sec)
    try:
        done = wire.login_plain(key)
        if done.error_code == 0:
            return False
        assert done.error_code == SASL_AUTHENTICATION_FAILED, done
        assert "unknown API key" in done.error_message and key not in done.error_message
        assert wire.closed_by_server()
        return True
    finally:
        wire.close()


def test_a_removed_key_authenticates_no_new_kafka_connection(gateway: Gateway) -> None:
    key = gateway.add_key("User:ci")
    assert not _refused_on_a_new_connection(gateway, key)
    consumer = _kafka_python(gateway.sec, password=key)
    try:
        assert consumer.topics() == {CI_TOPIC}  # kafka-python authenticated with it
    finally:
        consumer.close()
    gateway.remove_key(key)
    assert _refused_on_a_new_connection(gateway, key)
    with pytest.raises(KafkaPythonError):  # kafka-python with it, now
        consumer = _kafka_python(gateway.sec, password=key)
        consumer.close()
    assert not _refused_on_a_new_connection(gateway, gateway.sec.api_key)  # the kept key


def test_a_connection_authenticated_with_a_removed_key_is_closed_at_re_authentication(
    gateway: Gateway,
) -> None:
    """Two connections re-authenticate before their session ends, as clients do, one with a
    key then removed, one with the kept key: each re-authentication succeeds while the key is in
    the file; the first after its removal is refused and that connection closed; the other goes
    on."""
    key = gateway.add_key("User:ci")
    wire, kept = _PlainWire(gateway.sec), _PlainWire(gateway.sec)
    try:
        for w, k in ((wire, key), (kept, gateway.sec.api_key)):
            done = w.login_plain(k)
            assert (done.error_code, done.session_lifetime_ms) == (0, REAUTH_MS)
            assert w.topics() == [CI_TOPIC]
        for _ in range(2):  # sessions renewed while the key is in the file
            for w, k in ((wire, key), (kept, gateway.sec.api_key)):
                assert w.login_plain(k).error_code == 0 and w.topics() == [CI_TOPIC]
        gateway.remove_key(key)
        assert kept.login_plain(gateway.sec.api_key).error_code == 0
        done = wire.login_plain(key)  # its first re-authentication after the removal
        assert done.error_code == SASL_AUTHENTICATION_FAILED
        assert "unknown API key" in done.error_message and key not in done.error_message
        assert wire.closed_by_server()
        assert kept.topics() == [CI_TOPIC]
    finally:
        wire.close()
        kept.close()
