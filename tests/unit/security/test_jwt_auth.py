"""JWT bearer tokens: each attack its own test; an injected fetcher and clock, no network."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from gateway.api.statuses import http_status
from gateway.errors import AuthenticationError, AuthUnavailableError, ConfigurationError
from gateway.security.jwt_auth import (
    JwksCache,
    JwtAuthenticator,
    JwtSettings,
    httpx_fetcher,
    parse_jwks,
)

ISSUER = "https://idp.example.com/"
AUDIENCE = "tiered-gateway"
URL = "https://idp.example.com/jwks.json"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()


def rsa_jwk(kid: str = "rsa-1", key: rsa.RSAPrivateKey = RSA_KEY, **extra: Any) -> dict[str, Any]:
    jwk: dict[str, Any] = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig", **extra}


def ec_jwk(kid: str = "ec-1") -> dict[str, Any]:
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(EC_KEY.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig", "alg": "ES256"}


def ed_jwk(kid: str = "ed-1") -> dict[str, Any]:
    jwk: dict[str, Any] = OKPAlgorithm.to_jwk(ED_KEY.public_key(), as_dict=True)
    return {**jwk, "kid": kid}


def jwks(*keys: dict[str, Any]) -> bytes:
    return json.dumps({"keys": list(keys)}).encode()


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def token(
    payload: dict[str, Any] | None = None,
    *,
    key: Any = RSA_KEY,
    alg: str = "RS256",
    kid: str | None = "rsa-1",
) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(payload if payload is not None else claims(), key, alg, headers=headers)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_parts(header: dict[str, Any], payload: dict[str, Any]) -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeIdp:
    """The JWKS endpoint: answers ``body`` or raises ``error``; counts calls."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.error: Exception | None = None
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, url: str, timeout_s: float) -> bytes:
        assert url == URL
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.body


def make(
    idp: FakeIdp, clock: Clock | None = None, **settings: Any
) -> tuple[JwtAuthenticator, JwksCache, Clock]:
    clock = clock or Clock()
    config = JwtSettings(issuer=ISSUER, audience=AUDIENCE, jwks_url=URL, **settings)
    cache = JwksCache(config, fetcher=idp, clock=clock)
    return JwtAuthenticator(config, cache), cache, clock


async def rejected(auth: JwtAuthenticator, value: str, message: str) -> None:
    with pytest.raises(AuthenticationError, match=message) as raised:
        await auth.authenticate(value)
    token_part = value.rsplit(" ", 1)[-1]
    assert token_part not in str(raised.value)  # never the token


# --- valid tokens ------------------------------------------------------------------------------


async def test_valid_rsa_token_gives_the_principal() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk(), ec_jwk())))
    assert await auth.authenticate(f"Bearer {token()}") == "User:alice"


async def test_valid_ec_and_eddsa_and_ps256_tokens() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk(), ec_jwk(), ed_jwk())))
    assert await auth.authenticate(f"Bearer {token(key=EC_KEY, alg='ES256', kid='ec-1')}")
    assert await auth.authenticate(f"Bearer {token(key=ED_KEY, alg='EdDSA', kid='ed-1')}")
    # the RSA JWK names no alg: it verifies RS256 and PS256 alike
    assert await auth.authenticate(f"bearer {token(alg='PS256')}") == "User:alice"


async def test_principal_claim_and_type_are_settings() -> None:
    auth, _, _ = make(
        FakeIdp(jwks(rsa_jwk())), principal_claim="preferred_username", principal_type="Svc"
    )
    value = f"Bearer {token(claims(preferred_username='etl-job'))}"
    assert await auth.authenticate(value) == "Svc:etl-job"


async def test_leeway_accepts_a_just_expired_token() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    just_expired = token(claims(exp=int(time.time()) - 10))
    assert await auth.authenticate(f"Bearer {just_expired}") == "User:alice"


async def test_audience_list_containing_ours_is_accepted() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    value = f"Bearer {token(claims(aud=['other', AUDIENCE]))}"
    assert await auth.authenticate(value) == "User:alice"


# --- attacks, one each -------------------------------------------------------------------------


async def test_expired() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, f"Bearer {token(claims(exp=int(time.time()) - 60))}", "token expired")


async def test_not_yet_valid() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    later = int(time.time()) + 120
    await rejected(auth, f"Bearer {token(claims(nbf=later))}", "token not yet valid")
    await rejected(auth, f"Bearer {token(claims(iat=later, nbf=None))}", "token not yet valid")


async def test_wrong_issuer() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, f"Bearer {token(claims(iss='https://evil.example/'))}", "wrong issuer")


async def test_wrong_audience() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, f"Bearer {token(claims(aud='another-service'))}", "wrong audience")


async def test_bad_signature() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    forged = token(key=OTHER_RSA_KEY)  # same kid, another private key
    await rejected(auth, f"Bearer {forged}", "bad signature")
    head, _, signature = token().split(".")
    tampered = f"{head}.{b64(json.dumps(claims(sub='admin')).encode())}.{signature}"
    await rejected(auth, f"Bearer {tampered}", "bad signature")


async def test_alg_none() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    unsigned = unsigned_parts({"alg": "none", "kid": "rsa-1", "typ": "JWT"}, claims()) + "."
    await rejected(auth, f"Bearer {unsigned}", "algorithm not allowed")


def hs256_with_the_rsa_public_key() -> tuple[str, bytes]:
    """The algorithm-confusion attack: HMAC-SHA256 keyed with the server's RSA public key PEM
    (which the attacker knows), hoping a verifier feeds the "key" to HMAC."""
    pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    signing_input = unsigned_parts({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}, claims())
    mac = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(mac)}", pem


async def test_hs256_signed_with_the_rsa_public_key_is_refused() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    attack, _ = hs256_with_the_rsa_public_key()
    await rejected(auth, f"Bearer {attack}", "algorithm not allowed")


async def test_hs256_confusion_is_also_stopped_by_pyjwt_key_types() -> None:
    """Below our allow-list, PyJWT refuses it too: a PyJWK is bound to its algorithm, and a PEM
    public key is never accepted as an HMAC secret."""
    attack, pem = hs256_with_the_rsa_public_key()
    (verifier,) = parse_jwks(jwks(rsa_jwk()), ("RS256",))["rsa-1"].verifiers.values()
    with pytest.raises(jwt.InvalidAlgorithmError):
        jwt.decode(attack, key=verifier, algorithms=["HS256"], audience=AUDIENCE)
    with pytest.raises(jwt.InvalidKeyError):
        jwt.decode(attack, key=pem, algorithms=["HS256"], audience=AUDIENCE)


async def test_symmetric_key_smuggled_into_the_jwks_is_ignored() -> None:
    """An ``oct`` JWK (or one for encryption) under a known kid never becomes a verifier."""
    _, pem = hs256_with_the_rsa_public_key()
    oct_key = {"kty": "oct", "kid": "rsa-1", "k": b64(pem), "alg": "HS256"}
    enc_key = rsa_jwk(kid="enc-1", use="enc")
    keys = parse_jwks(jwks(oct_key, enc_key, rsa_jwk()), ("RS256", "ES256"))
    assert set(keys) == {"rsa-1"}
    assert set(keys["rsa-1"].verifiers) == {"RS256"}
    with pytest.raises(Exception, match="no usable signing key"):
        parse_jwks(jwks(oct_key, enc_key), ("RS256",))


async def test_algorithm_must_match_the_key_type() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk(), ec_jwk())))
    # an ES256 token naming the RSA key's kid
    await rejected(
        auth,
        f"Bearer {token(key=EC_KEY, alg='ES256', kid='rsa-1')}",
        "algorithm does not match the key",
    )


async def test_jwk_alg_pins_the_algorithm() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk(alg="RS256"))))
    await rejected(auth, f"Bearer {token(alg='PS256')}", "algorithm does not match the key")


async def test_unknown_kid_refreshes_once_then_401() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    auth, _, clock = make(idp)
    assert await auth.authenticate(f"Bearer {token()}") == "User:alice"
    assert idp.calls == 1
    stranger = token(kid="nobody")
    await rejected(auth, f"Bearer {stranger}", "unknown key id")
    assert idp.calls == 1  # the keys were fetched less than jwks_refresh_min_s ago
    clock.now += 31
    await rejected(auth, f"Bearer {stranger}", "unknown key id")
    assert idp.calls == 2  # one refetch for the unknown kid...
    clock.now += 5
    await rejected(auth, f"Bearer {stranger}", "unknown key id")
    assert idp.calls == 2  # ...and no more within jwks_refresh_min_s
    clock.now += 30
    await rejected(auth, f"Bearer {stranger}", "unknown key id")
    assert idp.calls == 3


async def test_unknown_kid_found_after_rotation() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    auth, _, clock = make(idp)
    await auth.authenticate(f"Bearer {token()}")
    idp.body = jwks(rsa_jwk(), rsa_jwk(kid="rsa-2", key=OTHER_RSA_KEY))
    clock.now += 31
    rotated = token(key=OTHER_RSA_KEY, kid="rsa-2")
    assert await auth.authenticate(f"Bearer {rotated}") == "User:alice"


async def test_jwks_endpoint_down_fails_closed() -> None:
    idp = FakeIdp(b"")
    idp.error = httpx.ConnectError("connection refused")
    auth, _, clock = make(idp)
    with pytest.raises(AuthUnavailableError, match="ConnectError") as raised:
        await auth.authenticate(f"Bearer {token()}")
    assert http_status(raised.value) == 503 and raised.value.retriable
    clock.now += 1
    with pytest.raises(AuthUnavailableError):  # still refused, without hammering the endpoint
        await auth.authenticate(f"Bearer {token()}")
    assert idp.calls == 1


async def test_jwks_down_but_cached_keys_still_valid() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    auth, _, clock = make(idp)
    assert await auth.authenticate(f"Bearer {token()}") == "User:alice"
    idp.error = httpx.ConnectError("down")
    clock.now += 301  # stale: a refresh is tried, fails, the cached keys serve
    assert await auth.authenticate(f"Bearer {token()}") == "User:alice"
    assert idp.calls == 2
    clock.now += 298  # 599 s old: still inside the grace of 2 x max age
    assert await auth.authenticate(f"Bearer {token()}") == "User:alice"
    clock.now += 2  # 601 s old: past the grace, refuse
    with pytest.raises(AuthUnavailableError):
        await auth.authenticate(f"Bearer {token()}")


async def test_unknown_kid_while_jwks_down_is_503() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    auth, _, clock = make(idp)
    await auth.authenticate(f"Bearer {token()}")
    idp.error = httpx.ReadTimeout("slow")
    clock.now += 31
    with pytest.raises(AuthUnavailableError, match="new key id"):
        await auth.authenticate(f"Bearer {token(kid='rsa-2')}")


async def test_stale_keys_are_replaced() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    auth, _, clock = make(idp)
    await auth.authenticate(f"Bearer {token()}")
    idp.body = jwks(rsa_jwk(kid="rsa-1", key=OTHER_RSA_KEY))  # same kid, new key
    clock.now += 300
    await rejected(auth, f"Bearer {token()}", "bad signature")
    assert await auth.authenticate(f"Bearer {token(key=OTHER_RSA_KEY)}") == "User:alice"


async def test_concurrent_misses_share_one_fetch() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    idp.gate = asyncio.Event()
    auth, _, _ = make(idp)
    waiting = [asyncio.ensure_future(auth.authenticate(f"Bearer {token()}")) for _ in range(5)]
    await asyncio.sleep(0)  # let them all reach the fetch (no timing: one loop turn)
    idp.gate.set()
    assert await asyncio.gather(*waiting) == ["User:alice"] * 5
    assert idp.calls == 1


async def test_a_cancelled_waiter_does_not_cancel_the_shared_fetch() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    idp.gate = asyncio.Event()
    auth, _, _ = make(idp)
    first = asyncio.ensure_future(auth.authenticate(f"Bearer {token()}"))
    second = asyncio.ensure_future(auth.authenticate(f"Bearer {token()}"))
    await asyncio.sleep(0)
    first.cancel()
    idp.gate.set()
    assert await second == "User:alice"
    assert idp.calls == 1


async def test_missing_exp() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, f"Bearer {token(claims(exp=None))}", "token has no 'exp' claim")


async def test_missing_sub() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, f"Bearer {token(claims(sub=None))}", "token has no 'sub' claim")


@pytest.mark.parametrize("sub", ["", "ali\nce", "bob\x00", "x\u2028y", "a" * 1025])
async def test_bad_principal_claim(sub: str) -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, f"Bearer {token(claims(sub=sub))}", "'sub' claim")


async def test_principal_claim_must_be_a_string() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())), principal_claim="uid")
    await rejected(auth, f"Bearer {token(claims(uid=42))}", "'uid' claim is not a non-empty")


async def test_missing_kid() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, f"Bearer {token(kid=None)}", "no key id")


@pytest.mark.parametrize(
    "value",
    ["", "Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer a.b", "Bearer a.b.c d", "Token a.b.c"],
)
async def test_malformed_authorization_header(value: str) -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    with pytest.raises(AuthenticationError, match="malformed Authorization header"):
        await auth.authenticate(value)


async def test_malformed_token() -> None:
    auth, _, _ = make(FakeIdp(jwks(rsa_jwk())))
    await rejected(auth, "Bearer bm90LWpzb24.bm90LWpzb24.c2ln", "malformed token header")


# --- settings and sources ----------------------------------------------------------------------


@pytest.mark.parametrize("algorithms", [("none",), ("RS256", "HS256"), ("HS512",), ("XS1",), ()])
def test_settings_refuse_symmetric_none_and_unknown_algorithms(algorithms: tuple[str, ...]) -> None:
    with pytest.raises(ConfigurationError):
        JwtSettings(ISSUER, AUDIENCE, jwks_url=URL, algorithms=algorithms)


@pytest.mark.parametrize(
    ("jwks_file", "jwks_url"),
    [
        (None, None),
        (Path("/x.json"), URL),
        (None, "http://idp.example.com/jwks"),  # keys in clear over the network
        (None, "ftp://idp.example.com/jwks"),
    ],
)
def test_settings_need_one_safe_jwks_source(jwks_file: Path | None, jwks_url: str | None) -> None:
    with pytest.raises(ConfigurationError):
        JwtSettings(ISSUER, AUDIENCE, jwks_file=jwks_file, jwks_url=jwks_url)


def test_settings_allow_plain_http_to_loopback() -> None:
    JwtSettings(ISSUER, AUDIENCE, jwks_url="http://127.0.0.1:8080/jwks")
    JwtSettings(ISSUER, AUDIENCE, jwks_url="http://localhost/jwks")


async def test_jwks_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_bytes(jwks(rsa_jwk()))
    settings = JwtSettings(ISSUER, AUDIENCE, jwks_file=path)
    cache = JwksCache(settings, clock=Clock())
    auth = JwtAuthenticator(settings, cache)
    assert await auth.authenticate(f"Bearer {token()}") == "User:alice"


async def test_missing_jwks_file_fails_closed(tmp_path: Path) -> None:
    settings = JwtSettings(ISSUER, AUDIENCE, jwks_file=tmp_path / "absent.json")
    cache = JwksCache(settings, clock=Clock())
    with pytest.raises(AuthUnavailableError, match="FileNotFoundError"):
        await cache.refresh()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>", "not JSON"),
        (b'{"kids": []}', "no 'keys' list"),
        (jwks({"kty": "RSA", "kid": "broken", "n": "AQAB", "e": "AQAB", "d": "AQAB"}), "usable"),
    ],
)
async def test_unusable_jwks_fails_closed(body: bytes, message: str) -> None:
    auth, _, _ = make(FakeIdp(body))
    with pytest.raises(AuthUnavailableError, match=message):
        await auth.authenticate(f"Bearer {token()}")


async def test_httpx_fetcher() -> None:
    answers = {"/ok": httpx.Response(200, content=jwks(rsa_jwk()))}

    def handler(request: httpx.Request) -> httpx.Response:
        return answers.get(request.url.path, httpx.Response(500))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        fetch = httpx_fetcher(client)
        assert json.loads(await fetch("https://idp/ok", 1.0))["keys"][0]["kid"] == "rsa-1"
        with pytest.raises(Exception, match="HTTP 500"):
            await fetch("https://idp/broken", 1.0)


async def test_a_hanging_jwks_endpoint_times_out_closed() -> None:
    idp = FakeIdp(jwks(rsa_jwk()))
    idp.gate = asyncio.Event()  # never set: the endpoint never answers
    auth, _, _ = make(idp, fetch_timeout_s=0.001)
    with pytest.raises(AuthUnavailableError, match="TimeoutError"):
        await auth.authenticate(f"Bearer {token()}")
