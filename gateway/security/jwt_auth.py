"""OIDC/JWT bearer tokens: ``Authorization: Bearer <JWT>`` -> ``User:<sub>``.

Tokens are verified with the identity provider's public keys (a JWKS document from a URL or a
file) and only with asymmetric algorithms: ``none`` and every ``HS*`` are refused when the
settings are built, so a token "signed" with the RSA public key as an HMAC secret (the classic
algorithm confusion) never reaches a verifier. Each key verifies only with algorithms of its own
type (RSA: RS*/PS*, EC: the ES* of its curve, OKP: EdDSA), and if the JWK names an ``alg``,
only with that one; PyJWT checks the same again (a PyJWK is bound to one algorithm).

The key cache (:class:`JwksCache`) fails closed: when the JWKS cannot be fetched and no cached
keys are usable, requests get :class:`AuthUnavailableError` (503, retriable), never access.
Cached keys stay usable for ``2 * jwks_max_age_s`` after they were fetched when refreshes fail.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

from gateway.config import is_loopback
from gateway.errors import AuthenticationError, AuthUnavailableError, ConfigurationError

Fetcher = Callable[[str, float], Awaitable[bytes]]
"""Fetches a JWKS document: (url, timeout in seconds) -> body; raises on any failure."""
Clock = Callable[[], float]

# The key type (and EC curve) each allowed algorithm verifies with; nothing symmetric.
_KEY_TYPES: Mapping[str, tuple[str, frozenset[str] | None]] = {
    **dict.fromkeys(("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"), ("RSA", None)),
    "ES256": ("EC", frozenset({"P-256"})),
    "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})),
    "ES256K": ("EC", frozenset({"secp256k1"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}
GRACE_FACTOR = 2.0  # cached keys outlive failed refreshes until 2 * jwks_max_age_s
_MAX_JWKS_BYTES = 1 << 20
_MAX_AUTHORIZATION_CHARS = 16 * 1024
_MAX_PRINCIPAL_CHARS = 1024
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_PRINCIPAL_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True, slots=True)
class JwtSettings:
    """How bearer tokens are verified; checked when built (bad values -> ConfigurationError)."""

    issuer: str
    audience: str
    jwks_file: Path | None = None
    jwks_url: str | None = None
    algorithms: tuple[str, ...] = ("RS256", "ES256", "PS256", "EdDSA")
    leeway_s: float = 30
    principal_claim: str = "sub"
    principal_type: str = "User"
    jwks_refresh_min_s: float = 30
    jwks_max_age_s: float = 300
    fetch_timeout_s: float = 5

    def __post_init__(self) -> None:
        if not self.issuer or not self.audience:
            raise ConfigurationError("JWT issuer and audience must not be empty")
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ConfigurationError("set exactly one of the JWKS file and the JWKS URL")
        if self.jwks_url is not None:
            _check_jwks_url(self.jwks_url)
        if not self.algorithms:
            raise ConfigurationError("no JWT algorithms allowed")
        for alg in self.algorithms:
            if alg.lower() == "none" or alg.upper().startswith("HS"):
                raise ConfigurationError(
                    f"JWT algorithm {alg!r} refused: only asymmetric signatures are accepted"
                )
            if alg not in _KEY_TYPES:
                raise ConfigurationError(
                    f"unknown JWT algorithm {alg!r} (known: {', '.join(sorted(_KEY_TYPES))})"
                )
        if not self.principal_claim or not _PRINCIPAL_TYPE.fullmatch(self.principal_type):
            raise ConfigurationError("bad JWT principal claim or principal type")
        if self.leeway_s < 0 or self.fetch_timeout_s <= 0:
            raise ConfigurationError("JWT leeway must be >= 0 and the fetch timeout > 0")
        if self.jwks_refresh_min_s <= 0 or self.jwks_max_age_s <= 0:
            raise ConfigurationError("JWKS refresh period and maximum age must be > 0")


def _check_jwks_url(url: str) -> None:
    """https, or plain http to a loopback address only (keys fetched in clear can be swapped)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and is_loopback(host):
        return
    raise ConfigurationError(f"JWKS URL must be https (http only to loopback): {url!r}")


# --- the keys ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One usable JWK: a PyJWK bound to each allowed algorithm this key can verify."""

    kid: str
    verifiers: Mapping[str, jwt.PyJWK]


@dataclass(frozen=True, slots=True)
class _Keys:
    by_kid: Mapping[str, SigningKey]
    fetched_at: float


class _JwksError(Exception):
    """The JWKS document is unusable (internal; becomes AuthUnavailableError)."""


def _signing_key(jwk: Any, algorithms: tuple[str, ...]) -> SigningKey | None:
    """The entry as a SigningKey, or None when it is not a usable public signing key: no kid,
    symmetric (``oct``) or unknown ``kty``, ``use`` other than ``sig``, ``key_ops`` without
    ``verify``, private key material, or no allowed algorithm fits it."""
    if not isinstance(jwk, dict):
        return None
    kid, kty, use, ops = jwk.get("kid"), jwk.get("kty"), jwk.get("use"), jwk.get("key_ops")
    if not isinstance(kid, str) or not kid or kty not in ("RSA", "EC", "OKP") or "d" in jwk:
        return None
    if use is not None and use != "sig":
        return None
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return None
    verifiers = {}
    for alg in algorithms:
        need_kty, curves = _KEY_TYPES[alg]
        if kty != need_kty or (curves is not None and jwk.get("crv") not in curves):
            continue
        if jwk.get("alg") not in (None, alg):
            continue
        try:
            verifiers[alg] = jwt.PyJWK(jwk, algorithm=alg)
        except jwt.PyJWTError:
            continue
    return SigningKey(kid, verifiers) if verifiers else None


def parse_jwks(body: bytes, algorithms: tuple[str, ...]) -> dict[str, SigningKey]:
    """The usable signing keys of a JWKS document by kid (the first of duplicate kids wins);
    not JSON, not a JWKS or no usable key -> _JwksError."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise _JwksError("the JWKS is not JSON") from exc
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise _JwksError("the JWKS has no 'keys' list")
    keys: dict[str, SigningKey] = {}
    for entry in entries:
        key = _signing_key(entry, algorithms)
        if key is not None and key.kid not in keys:
            keys[key.kid] = key
    if not keys:
        raise _JwksError("the JWKS has no usable signing key")
    return keys


async def fetch_jwks_url(url: str, timeout_s: float) -> bytes:
    """The default fetcher: one short-lived httpx client per fetch (fetches are rare)."""
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
        return await _get(client, url)


def httpx_fetcher(client: httpx.AsyncClient) -> Fetcher:
    """A fetcher on a shared client (opened and closed by the app's lifespan)."""

    async def fetch(url: str, timeout_s: float) -> bytes:
        return await _get(client, url, timeout_s)

    return fetch


async def _get(client: httpx.AsyncClient, url: str, timeout_s: float | None = None) -> bytes:
    headers = {"Accept": "application/json"}
    timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else httpx.Timeout(timeout_s)
    async with client.stream("GET", url, headers=headers, timeout=timeout) as response:
        if response.status_code != 200:
            raise _JwksError(f"the JWKS endpoint answered HTTP {response.status_code}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > _MAX_JWKS_BYTES:
                raise _JwksError("the JWKS is larger than 1 MiB")
        return bytes(body)


class JwksCache:
    """The identity provider's signing keys, fetched lazily and kept fresh.

    Refetched when older than ``jwks_max_age_s`` and once on an unknown ``kid`` (a key
    rotation), never more than once per ``jwks_refresh_min_s`` (failed attempts count: an
    outage or a stream of made-up kids cannot turn into a fetch per request). Concurrent
    callers share one fetch. ``clock`` is monotonic seconds, injected for tests.
    """

    def __init__(
        self,
        settings: JwtSettings,
        fetcher: Fetcher = fetch_jwks_url,
        clock: Clock = time.monotonic,
    ) -> None:
        self._settings = settings
        self._fetcher = fetcher
        self._clock = clock
        self._keys: _Keys | None = None
        self._last_attempt: float | None = None
        self._last_error = "the JWKS was not fetched yet"
        self._inflight: asyncio.Future[bool] | None = None
        self.fetches = 0  # attempts made, for metrics and tests

    async def get_key(self, kid: str) -> SigningKey | None:
        """The key with ``kid``, or None when the (possibly just refreshed) JWKS has none.
        No usable keys, or a refresh for an unknown kid that failed -> AuthUnavailableError."""
        now = self._clock()
        keys = self._keys
        if (keys is None or now - keys.fetched_at >= self._settings.jwks_max_age_s) and (
            self._may_fetch(now)
        ):
            await self._refresh_shared()
        keys = self._usable(self._clock())
        key = keys.by_kid.get(kid)
        if key is None and self._may_fetch(self._clock()):
            if not await self._refresh_shared():
                raise AuthUnavailableError(
                    f"cannot refresh the JWKS to look up a new key id: {self._last_error}"
                )
            key = self._usable(self._clock()).by_kid.get(kid)
        return key

    async def refresh(self) -> None:
        """Fetch now (e.g. at start, to fail early); failure -> AuthUnavailableError."""
        if not await self._refresh_shared():
            raise AuthUnavailableError(f"cannot fetch the JWKS: {self._last_error}")

    def _may_fetch(self, now: float) -> bool:
        if self._inflight is not None:  # join it
            return True
        last = self._last_attempt
        return last is None or now - last >= self._settings.jwks_refresh_min_s

    def _usable(self, now: float) -> _Keys:
        keys = self._keys
        if keys is None or now - keys.fetched_at >= GRACE_FACTOR * self._settings.jwks_max_age_s:
            raise AuthUnavailableError(f"no usable JWKS keys: {self._last_error}")
        return keys

    async def _refresh_shared(self) -> bool:
        inflight = self._inflight
        if inflight is None:
            self._last_attempt = self._clock()
            inflight = asyncio.ensure_future(self._refresh_once())
            self._inflight = inflight
            inflight.add_done_callback(self._done)
        # shield: a waiter that is cancelled (client gone) does not cancel the others' fetch
        return await asyncio.shield(inflight)

    def _done(self, _: asyncio.Future[bool]) -> None:
        self._inflight = None

    async def _refresh_once(self) -> bool:
        self.fetches += 1
        settings = self._settings
        try:
            async with asyncio.timeout(settings.fetch_timeout_s):
                if settings.jwks_file is not None:
                    body = await asyncio.to_thread(settings.jwks_file.read_bytes)
                else:
                    assert settings.jwks_url is not None  # JwtSettings checked it
                    body = await self._fetcher(settings.jwks_url, settings.fetch_timeout_s)
            keys = parse_jwks(body, settings.algorithms)
        except Exception as exc:  # any failure to get keys is "unavailable" (fail closed)
            self._last_error = str(exc) if isinstance(exc, _JwksError) else type(exc).__name__
            return False
        self._keys = _Keys(keys, self._clock())
        self._last_error = ""
        return True


# --- the tokens -------------------------------------------------------------------------------

# PyJWT's errors -> the check that failed; subclasses before their bases.
_PYJWT_ERRORS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.InvalidIssuedAtError, "bad 'iat' claim"),
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.InvalidAlgorithmError, "algorithm not allowed"),
    (jwt.InvalidKeyError, "signing key too weak"),
    (jwt.DecodeError, "malformed token"),
)


class JwtAuthenticator:
    """Verifies ``Authorization: Bearer <JWT>`` values against the settings and the keys."""

    def __init__(self, settings: JwtSettings, cache: JwksCache) -> None:
        self._settings = settings
        self._cache = cache
        self._options: jwt.types.Options = {
            "require": ["exp", "iss", "aud"],
            "verify_signature": True,
            "verify_exp": True,
            "verify_nbf": True,
            "verify_iat": True,
            "verify_iss": True,
            "verify_aud": True,
            "enforce_minimum_key_length": True,
        }

    async def authenticate(self, authorization: str) -> str:
        """The principal (``User:<claim>``) of a valid token; any failed check ->
        AuthenticationError naming the check (never the token); keys unavailable ->
        AuthUnavailableError."""
        token = _bearer_token(authorization)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthenticationError("malformed token header") from exc
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._settings.algorithms:
            raise AuthenticationError("algorithm not allowed")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise AuthenticationError("token has no key id (kid)")
        key = await self._cache.get_key(kid)
        if key is None:
            raise AuthenticationError("unknown key id (kid)")
        verifier = key.verifiers.get(alg)
        if verifier is None:
            raise AuthenticationError("algorithm does not match the key")
        claims = self._decode(token, verifier, alg)
        return f"{self._settings.principal_type}:{self._principal_name(claims)}"

    def _decode(self, token: str, verifier: jwt.PyJWK, alg: str) -> dict[str, Any]:
        settings = self._settings
        try:
            return jwt.decode(
                token,
                key=verifier,
                algorithms=[alg],
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway_s,
                options=self._options,
            )
        except jwt.MissingRequiredClaimError as exc:
            raise AuthenticationError(f"token has no {exc.claim!r} claim") from exc
        except jwt.PyJWTError as exc:
            for error, message in _PYJWT_ERRORS:
                if isinstance(exc, error):
                    raise AuthenticationError(message) from exc
            raise AuthenticationError("invalid token") from exc

    def _principal_name(self, claims: Mapping[str, Any]) -> str:
        claim = self._settings.principal_claim
        value = claims.get(claim)
        if value is None:
            raise AuthenticationError(f"token has no {claim!r} claim")
        if not isinstance(value, str) or not value:
            raise AuthenticationError(f"{claim!r} claim is not a non-empty string")
        if len(value) > _MAX_PRINCIPAL_CHARS or _CONTROL.search(value):
            raise AuthenticationError(f"{claim!r} claim is too long or has control characters")
        return value


def _bearer_token(authorization: str) -> str:
    if len(authorization) > _MAX_AUTHORIZATION_CHARS:
        raise AuthenticationError("malformed Authorization header: too long")
    match = _BEARER.fullmatch(authorization.strip(" \t"))
    if match is None:
        raise AuthenticationError("malformed Authorization header: expected 'Bearer <JWT>'")
    return match.group(1)
