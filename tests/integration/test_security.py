"""Who may read what, end to end (issue 16): a real ``serve`` over HTTPS on the demo bucket with
JWT, mTLS and API-key authentication and an ACL file in ``kafka-acls --list`` form.

The ACL matrix: every principal (JWT, mTLS, API key, anonymous) against every demo topic and a
missing one, on every topic endpoint, compared with a brute-force evaluation of the rules
written here (not the gateway's): 0 leaks, 0 wrongly refused. Then token attacks over the wire,
``/metrics`` behind the Cluster ACL, and the audit log's line for each request.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.demo import DemoBucket
from tests.fixtures.secured import AUDIENCE, ISSUER, KID, token, write_security_files
from tests.fixtures.tls import Pair, Pki
from tests.integration.serve import start_serve, stop

MISSING = "nope.missing"
ACL = """\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
 \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=pay, patternType=PREFIXED)`:
 \t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)
 \t(principal=User:ci, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)`:
 \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=payments, patternType=LITERAL)`:
 \t(principal=User:carol, host=*, operation=READ, permissionType=DENY)

Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=audit, patternType=LITERAL)`:
 \t(principal=User:*, host=*, operation=READ, permissionType=ALLOW)
 \t(principal=User:ANONYMOUS, host=*, operation=DESCRIBE, permissionType=ALLOW)

"""
ACL += (  # the Cluster line, as kafka-acls prints it, in two pieces for the line length
    "Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, "
    "patternType=LITERAL)`:\n \t(principal=User:alice, host=*, operation=DESCRIBE, "
    "permissionType=ALLOW)\n"
)
# The same rules, as the brute force below reads them: (principal, operation, allow, pattern, name)
RULES = [
    ("User:alice", "Read", True, "literal", "orders"),
    ("User:bob", "Describe", True, "prefixed", "pay"),
    ("User:ci", "Read", True, "prefixed", "pay"),
    ("User:carol", "Read", True, "literal", "*"),
    ("User:carol", "Read", False, "literal", "payments"),
    ("User:*", "Read", True, "literal", "audit"),
    ("User:ANONYMOUS", "Describe", True, "literal", "audit"),
]


def brute_force(principal: str, operation: str, topic: str) -> bool:
    """Kafka's rules, plainly: a matching DENY wins; Read implies Describe; else no."""

    def matches(rule: tuple[str, str, bool, str, str]) -> bool:
        who, _, _, pattern, name = rule
        if who not in (principal, "User:*"):
            return False
        if pattern == "prefixed":
            return topic.startswith(name)
        return name in (topic, "*")

    rules = [r for r in RULES if matches(r)]
    if any(not allow and op == operation for _, op, allow, _, _ in rules):
        return False
    granted = {op for _, op, allow, _, _ in rules if allow}
    return operation in granted or (operation == "Describe" and "Read" in granted)


@dataclass
class Gateway:
    url: str
    ca: Path
    clients: dict[str, Pair]
    tokens: dict[str, str]
    api_key: str
    audit: Path
    signing_key: rsa.RSAPrivateKey

    def client(self, who: str) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.ca))
        headers: dict[str, str] = {}
        if who in self.clients:
            pair = self.clients[who]
            context.load_cert_chain(pair.cert, pair.key)
        elif who in self.tokens:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        elif who == "User:ci":
            headers["X-API-Key"] = self.api_key
        return httpx.Client(base_url=self.url, verify=context, headers=headers, timeout=30)


def _wait_ready(gw: Gateway, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    with gw.client("anonymous") as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"serve did not become ready:\n{log.read_text()}")


@pytest.fixture(scope="module")
def gateway(demo: DemoBucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    work = tmp_path_factory.mktemp("security")
    pki = Pki(work / "pki")
    server = pki.server()
    clients = {"User:carol": pki.client("carol", CN="carol", OU="people", O="Acme", C="US")}
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    files = write_security_files(work, ACL, key, preamble="# scripts\n")
    api_key = files.api_keys["ci"]
    audit = work / "audit.jsonl"
    args = [
        *demo.serve_args, "--rescan-interval-s", "0",
        "--tls-certfile", str(server.cert), "--tls-keyfile", str(server.key),
        "--tls-client-ca", str(pki.ca), "--no-tls-client-cert-required",
        "--tls-principal-mapping-rules", "RULE:^CN=(.*?),OU=people,.*$/$1/,DEFAULT",
        *files.serve_args(), "--audit-log", str(audit),
    ]  # fmt: skip
    log = work / "serve.log"
    proc, url = start_serve(args, log)
    tokens = {p: token(key, p.removeprefix("User:")) for p in ("User:alice", "User:bob")}
    gw = Gateway(url.replace("http://", "https://"), pki.ca, clients, tokens, api_key, audit, key)
    try:
        _wait_ready(gw, proc, log)
        yield gw
    finally:
        stop(proc)


PRINCIPALS = ["User:alice", "User:bob", "User:carol", "User:ci", "anonymous"]
TOPICS = ["orders", "clicks.v2-raw", "audit", "payments", "inventory", MISSING]
ENDPOINTS = [  # (path under the topic, operation)
    ("/partitions", "Describe"),
    ("/partitions/0", "Describe"),
    ("/partitions/0/segments", "Describe"),
    ("/partitions/0/offsets?timestamp=earliest", "Describe"),
    ("/partitions/0/records?offset=0&max_bytes=2048", "Read"),
]


def _principal(who: str) -> str:
    return "User:ANONYMOUS" if who == "anonymous" else who


@pytest.mark.parametrize("who", PRINCIPALS)
def test_the_acl_matrix(gateway: Gateway, demo: DemoBucket, who: str) -> None:
    principal = _principal(who)
    leaks: list[tuple[object, ...]] = []
    wrongly_refused: list[tuple[object, ...]] = []
    with gateway.client(who) as client:
        listed = {t["name"] for t in client.get("/v1/topics").json()["topics"]}
        expected = {t for t in TOPICS if t != MISSING and brute_force(principal, "Describe", t)}
        assert listed == expected
        for topic in TOPICS:
            for path, operation in ENDPOINTS:
                r = client.get(f"/v1/topics/{topic}{path}")
                allowed = brute_force(principal, operation, topic)
                if allowed and r.status_code in (401, 403):
                    wrongly_refused.append((topic, path, r.status_code))
                elif not allowed:
                    want = 401 if who == "anonymous" else 403
                    code = "authentication_failed" if want == 401 else "topic_authorization_failed"
                    body = r.json()
                    if r.status_code != want or body.get("error_code") != code:
                        leaks.append((topic, path, r.status_code, r.text[:200]))
                    elif set(body) != {"error_code", "message", "retriable"}:
                        leaks.append((topic, path, "body", sorted(body)))
                elif topic != MISSING:
                    assert r.status_code == 200, (topic, path, r.text[:300])
                else:
                    assert r.status_code == 404, (topic, path, r.text[:300])
    assert leaks == []
    assert wrongly_refused == []


def test_a_denied_topic_and_a_missing_one_answer_alike(gateway: Gateway) -> None:
    with gateway.client("User:bob") as client:
        denied = client.get("/v1/topics/orders/partitions")
        missing = client.get(f"/v1/topics/{MISSING}/partitions")
    assert denied.status_code == missing.status_code == 403
    assert denied.json()["error_code"] == missing.json()["error_code"]
    assert "exist" in denied.json()["message"]


def test_token_attacks_over_the_wire(gateway: Gateway) -> None:
    key, now = gateway.signing_key, int(time.time())
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    forged_hs256 = _hs256(public_pem, {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice",
                                       "exp": now + 600})  # fmt: skip
    attacks = {
        "expired": token(key, "alice", exp=now - 3600, iat=now - 7200),
        "not yet valid": token(key, "alice", nbf=now + 3600),
        "wrong issuer": token(key, "alice", iss="https://evil.test"),
        "wrong audience": token(key, "alice", aud="another"),
        "other key": token(other, "alice"),
        "hs256 with the public key": forged_hs256,
        "garbage": "not.a.jwt",
    }
    context = ssl.create_default_context(cafile=str(gateway.ca))
    with httpx.Client(base_url=gateway.url, verify=context) as client:
        for what, presented in attacks.items():
            r = client.get("/v1/topics/orders/partitions/0/records?offset=0",
                           headers={"Authorization": f"Bearer {presented}"})  # fmt: skip
            assert r.status_code == 401, (what, r.text)
            assert r.json()["error_code"] == "authentication_failed"
            assert presented not in r.text
            assert r.headers["www-authenticate"].startswith("Bearer")
        bad_key = client.get("/v1/topics", headers={"X-API-Key": "tgk_" + "A" * 43})
        assert bad_key.status_code == 401


def _hs256(secret: bytes, claims: dict[str, object]) -> str:
    """An HS256 token keyed with ``secret`` (built by hand: PyJWT refuses a PEM as a secret)."""
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415
    import hmac  # noqa: PLC0415

    def part(value: dict[str, object]) -> bytes:
        raw = json.dumps(value, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=")

    signing = part({"alg": "HS256", "typ": "JWT", "kid": KID}) + b"." + part(claims)
    mac = hmac.new(secret, signing, hashlib.sha256).digest()
    return (signing + b"." + base64.urlsafe_b64encode(mac).rstrip(b"=")).decode()


def test_metrics_need_describe_on_the_cluster(gateway: Gateway) -> None:
    with gateway.client("User:alice") as client:
        assert client.get("/metrics").status_code == 200
    with gateway.client("User:bob") as client:
        assert client.get("/metrics").status_code == 403
    with gateway.client("anonymous") as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/healthz").status_code == 200  # probes stay open


def _audit_lines(path: Path, wanted: set[str]) -> dict[str, dict[str, object]]:
    """The audit lines by request id once those ``wanted`` are there: a line is written when
    the response has been sent, so the client may see its answer first (waits at most 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        by_id = {line["request_id"]: line for line in lines}
        if wanted <= by_id.keys() or time.monotonic() > deadline:
            return by_id
        time.sleep(0.02)


def test_the_audit_log_has_a_line_per_data_request(gateway: Gateway) -> None:
    with gateway.client("User:alice") as client:
        ok = client.get("/v1/topics/orders/partitions/0/records?offset=0&max_bytes=2048",
                        headers={"X-Request-ID": "audit-ok"})  # fmt: skip
        denied = client.get("/v1/topics/payments/partitions/0/records?offset=0",
                            headers={"X-Request-ID": "audit-denied"})  # fmt: skip
    assert ok.status_code == 200 and denied.status_code == 403
    by_id = _audit_lines(gateway.audit, {"audit-ok", "audit-denied"})
    first = by_id["audit-ok"]
    assert first["principal"] == "User:alice"
    assert (first["topic"], first["partition"], first["offset"]) == ("orders", 0, 0)
    assert first["status"] == 200 and first["next_offset"] == ok.json()["next_offset"]
    assert first["bytes"] == len(ok.content) and first["source"] == "127.0.0.1"
    second = by_id["audit-denied"]
    assert (second["status"], second["error_code"]) == (403, "topic_authorization_failed")
    assert second["principal"] == "User:alice"
    text = gateway.audit.read_text()
    assert gateway.tokens["User:alice"] not in text and gateway.api_key not in text
    assert '"value"' not in text  # never a record


def test_an_audited_walk(gateway: Gateway) -> None:
    """Every page of a walk through a partition has its audit line, with the offsets served."""
    pages: list[tuple[str, int, int, int]] = []  # request id, offset, next offset, bytes
    with gateway.client("User:alice") as client:
        info = client.get("/v1/topics/orders/partitions/0").json()
        offset, end = info["remote_log_start_offset"], info["remote_log_end_offset"]
        while offset < end:
            rid = f"walk-{len(pages)}"
            r = client.get(
                "/v1/topics/orders/partitions/0/records",
                params={"offset": offset, "max_bytes": 4096},
                headers={"X-Request-ID": rid},
            )
            assert r.status_code == 200, r.text
            body = r.json()
            pages.append((rid, offset, body["next_offset"], len(r.content)))
            offset = body["next_offset"]
    assert len(pages) > 3
    lines = _audit_lines(gateway.audit, {rid for rid, *_ in pages})
    for rid, first, following, size in pages:
        line = lines[rid]
        assert (line["principal"], line["topic"], line["partition"]) == ("User:alice", "orders", 0)
        assert (line["offset"], line["next_offset"], line["bytes"]) == (first, following, size)
        assert (line["status"], line["error_code"]) == (200, None)


def test_the_acl_file_reloads_without_a_restart(gateway: Gateway) -> None:
    acl = gateway.audit.parent / "acl"
    url = "/v1/topics/inventory/partitions"
    with gateway.client("User:bob") as client:
        assert client.get(url).status_code == 403
        grant = (
            "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=inventory, "
            "patternType=LITERAL)`:\n \t(principal=User:bob, host=*, operation=DESCRIBE, "
            "permissionType=ALLOW)\n"
        )
        staged = acl.with_suffix(".new")
        staged.write_text(ACL + "\n" + grant)
        staged.replace(acl)  # as docs/security.md says: write a new file, rename it over
        try:
            assert _eventually(lambda: client.get(url).status_code == 200)
        finally:
            staged.write_text(ACL)
            staged.replace(acl)
        assert _eventually(lambda: client.get(url).status_code == 403)


def _eventually(condition: Callable[[], bool], wait_s: float = 30.0) -> bool:
    """Whether ``condition`` holds within ``wait_s`` (the file is checked once a second)."""
    deadline = time.monotonic() + wait_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
