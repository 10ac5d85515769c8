"""Authentication and authorisation on the HTTP side, with the fake service: anonymous is
a 401 once authentication is on (unless an ACL grants it), a denied topic a 403, the rate a
429 with Retry-After, CORS only for the configured origins; open by default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.api import create_app
from gateway.config import Settings
from gateway.security.apikeys import new_key
from tests.fakes.orders import TOPIC
from tests.fakes.service import FakeService

RECORDS = f"/v1/topics/{TOPIC}/partitions/0/records?offset=0"
ACL_READ = """\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:
 \t(principal={principal}, host=*, operation=READ, permissionType=ALLOW)
"""


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    """API keys of User:reader and User:other, in tmp_path/keys."""
    made = {p: new_key() for p in ("User:reader", "User:other")}
    (tmp_path / "keys").write_text("".join(f"{p} {line}\n" for p, (_, line) in made.items()))
    return {p: key for p, (key, _) in made.items()}


def _client(settings: Settings, fake: FakeService) -> Iterator[TestClient]:
    with TestClient(create_app(settings, fake.factory()), base_url="http://localhost") as c:
        yield c


@pytest.fixture
def secured(tmp_path: Path, keys: dict[str, str], fake: FakeService) -> Iterator[TestClient]:
    (tmp_path / "acl").write_text(ACL_READ.format(topic=TOPIC, principal="User:reader"))
    settings = Settings(
        store="file:///x", api_keys_file=tmp_path / "keys", acl_file=tmp_path / "acl"
    )
    yield from _client(settings, fake)


def test_open_by_default(client: TestClient) -> None:
    assert client.get(RECORDS).status_code == 200
    assert client.get(RECORDS, headers={"X-API-Key": "anything"}).status_code == 200


def test_anonymous_is_asked_to_authenticate(secured: TestClient) -> None:
    r = secured.get(RECORDS)
    assert r.status_code == 401
    assert r.json()["error_code"] == "authentication_failed"
    assert "WWW-Authenticate" in r.headers
    assert secured.get("/v1/topics").status_code == 401


def test_a_principal_reads_what_its_acl_allows(secured: TestClient, keys: dict[str, str]) -> None:
    reader = {"X-API-Key": keys["User:reader"]}
    other = {"X-API-Key": keys["User:other"]}
    assert secured.get(RECORDS, headers=reader).status_code == 200
    assert [t["name"] for t in secured.get("/v1/topics", headers=reader).json()["topics"]] == [
        TOPIC
    ]
    denied = secured.get(RECORDS, headers=other)
    assert denied.status_code == 403
    assert denied.json()["error_code"] == "topic_authorization_failed"
    assert secured.get("/v1/topics", headers=other).json() == {"topics": []}
    bad = secured.get(RECORDS, headers={"X-API-Key": keys["User:reader"] + "x"})
    assert bad.status_code == 401
    token = secured.get(RECORDS, headers={"Authorization": "Bearer abc"})
    assert token.status_code == 401  # a token where none are configured: never anonymous
    assert "not configured" in token.json()["message"]


def test_an_acl_may_grant_anonymous(
    tmp_path: Path, keys: dict[str, str], fake: FakeService
) -> None:
    (tmp_path / "acl").write_text(ACL_READ.format(topic=TOPIC, principal="User:ANONYMOUS"))
    settings = Settings(
        store="file:///x", api_keys_file=tmp_path / "keys", acl_file=tmp_path / "acl"
    )
    for client in _client(settings, fake):
        assert client.get(RECORDS).status_code == 200


def test_the_rate_limit_answers_429(settings: Settings, fake: FakeService) -> None:
    limited = settings.model_copy(update={"rate_limit_per_s": 0.001, "rate_limit_burst": 2})
    for client in _client(limited, fake):
        assert [client.get(RECORDS).status_code for _ in range(2)] == [200, 200]
        r = client.get(RECORDS)
        assert r.status_code == 429
        assert r.json()["error_code"] == "rate_limited" and r.json()["retriable"] is True
        assert int(r.headers["Retry-After"]) >= 100
        assert client.get("/healthz").status_code == 200  # probes are not limited


def test_cors_only_for_configured_origins(settings: Settings, fake: FakeService) -> None:
    origin = {"Origin": "https://ui.example.com"}
    for client in _client(settings, fake):
        assert "access-control-allow-origin" not in client.get(RECORDS, headers=origin).headers
    allowed = settings.model_copy(update={"cors_origins": ["https://ui.example.com"]})
    for client in _client(allowed, fake):
        r = client.get(RECORDS, headers=origin)
        assert r.headers["access-control-allow-origin"] == "https://ui.example.com"
        other = client.get(RECORDS, headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_degraded_details_and_metrics_need_describe_on_the_cluster(
    tmp_path: Path, keys: dict[str, str], fake: FakeService
) -> None:
    from gateway.service.types import UnreadableManifest  # noqa: PLC0415
    from tests.fakes.orders import TOPIC_ID  # noqa: PLC0415

    acl = ACL_READ.format(topic=TOPIC, principal="User:ANONYMOUS") + (
        "Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, "
        "patternType=LITERAL)`:\n \t(principal=User:reader, host=*, operation=DESCRIBE, "
        "permissionType=ALLOW)\n"
    )
    (tmp_path / "acl").write_text(acl)
    fake.unreadable = (UnreadableManifest(TOPIC, TOPIC_ID, 0, 7, "t/x.rsm-manifest", "Bad"),)
    no_auth = Settings(store="file:///x", acl_file=tmp_path / "acl")  # ACLs, no authentication
    for client in _client(no_auth, fake):
        assert client.get("/readyz").json() == {"status": "degraded"}
        assert client.get("/metrics").status_code == 403  # its labels name topics
        assert client.get(RECORDS).status_code == 200  # the ACL grants anonymous this topic
    with_keys = Settings(
        store="file:///x", acl_file=tmp_path / "acl", api_keys_file=tmp_path / "keys"
    )
    for client in _client(with_keys, fake):
        assert client.get("/readyz").json() == {"status": "degraded"}
        operator = {"X-API-Key": keys["User:reader"]}
        detailed = client.get("/readyz", headers=operator).json()
        assert detailed["degraded"][0]["topic"] == TOPIC
        assert client.get("/metrics", headers=operator).status_code == 200
        assert client.get("/metrics").status_code == 401


def test_forwarded_headers_are_believed_only_from_named_proxies() -> None:
    from gateway.commands.server import uvicorn_config  # noqa: PLC0415

    plain = uvicorn_config(object(), Settings(store="file:///x"))
    assert plain.proxy_headers is False
    proxied = uvicorn_config(
        object(), Settings(store="file:///x", forwarded_allow_ips=["10.0.0.0/8"])
    )
    assert proxied.proxy_headers is True
    assert proxied.forwarded_allow_ips == ["10.0.0.0/8"]


class _Jwks:
    """A JWKS endpoint on 127.0.0.1 (a real HTTP server in a thread) and a key to sign with."""

    def __init__(self) -> None:
        import http.server  # noqa: PLC0415
        import json  # noqa: PLC0415
        import threading  # noqa: PLC0415

        import jwt  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**public, "kid": "k1", "use": "sig"}]}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, sub: str) -> str:
        import time  # noqa: PLC0415

        import jwt  # noqa: PLC0415

        now = int(time.time())
        claims = {"iss": "https://idp", "aud": "gw", "sub": sub, "iat": now, "exp": now + 300}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1"})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_jwt_from_a_jwks_url_and_fail_closed_when_it_is_down(
    tmp_path: Path, fake: FakeService
) -> None:
    (tmp_path / "acl").write_text(ACL_READ.format(topic=TOPIC, principal="User:alice"))
    jwks = _Jwks()
    try:
        settings = Settings(
            store="file:///x", jwt_issuer="https://idp", jwt_audience="gw",
            jwt_jwks_url=jwks.url, acl_file=tmp_path / "acl",
        )  # fmt: skip
        for client in _client(settings, fake):
            alice = {"Authorization": f"Bearer {jwks.token('alice')}"}
            assert client.get(RECORDS, headers=alice).status_code == 200
            bob = {"Authorization": f"Bearer {jwks.token('bob')}"}
            assert client.get(RECORDS, headers=bob).status_code == 403
        url = jwks.url
    finally:
        jwks.close()
    down = settings.model_copy(update={"jwt_jwks_url": url})  # nothing listens there now
    for client in _client(down, fake):  # the start logs the failure and serves
        r = client.get(RECORDS, headers={"Authorization": f"Bearer {jwks.token('alice')}"})
        assert r.status_code == 503
        assert (r.json()["error_code"], r.json()["retriable"]) == ("auth_unavailable", True)
        assert client.get(RECORDS).status_code == 401  # and anonymous is still refused
