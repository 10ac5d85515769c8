"""Who a connection is: SASL/PLAIN and SASL/OAUTHBEARER, and the TLS client certificate, mapped
to the HTTP API's principals by the same :class:`~gateway.security.access.Access`.

A connection's :class:`Session` starts authenticated only when the gateway needs no
authentication (``User:ANONYMOUS``, the loopback default, ACLs applying when there is a file)
or when its TLS client certificate verified and maps to a principal (Kafka's SSL listener: the
``tls_principal_mapping_rules`` principal, as HTTP maps it). Otherwise only ApiVersions,
SaslHandshake and SaslAuthenticate are taken; any other request closes the connection, as a
Kafka SASL listener does.

* **SaslHandshake** (v0-v1): the mechanism the client wants, among those configured: ``PLAIN``
  when ``api_keys_file`` is set, ``OAUTHBEARER`` when JWT is (none on a gateway without
  authentication). An unknown one gets ``UNSUPPORTED_SASL_MECHANISM`` and the list, then the
  connection closes. On a connection whose client certificate named a principal, SASL may
  still follow and its principal replaces the certificate's (Kafka's SASL_SSL). After v0 the next
  frame is the bare SASL token (no request header), answered by a bare frame (Kafka's v0
  exchange); after v1 the token comes in SaslAuthenticate.
* **SaslAuthenticate** (v0-v2): success answers no error, empty ``auth_bytes`` and (v1+)
  ``session_lifetime_ms``, see below; failure answers ``SASL_AUTHENTICATION_FAILED`` with the
  check that failed (never the credential) and closes the connection. Out of order (no
  handshake first, a second handshake before the token): ``ILLEGAL_SASL_STATE``, then closed.
* **Re-authentication** (KIP-368, Kafka's ``connections.max.reauth.ms``): a SASL session lasts
  ``kafka_reauth_ms``, or until the JWT's ``exp`` for OAUTHBEARER when that comes first
  (0: only the JWT bounds it, as Kafka bounds an OAUTHBEARER session by its token even then);
  SaslAuthenticate v1+ tells the client that lifetime. Before it ends the client sends
  SaslHandshake v1 and SaslAuthenticate again on the same connection: accepted with the same
  mechanism and the same principal (the credential checked again, as for a new connection), it
  renews the lifetime; another mechanism or version 0 is ``ILLEGAL_SASL_STATE``, another
  principal ``SASL_AUTHENTICATION_FAILED``, both closing the connection (Kafka's broker);
  so does any other request between that handshake and its SaslAuthenticate. A request other
  than SaslHandshake and SaslAuthenticate
  past the session's end closes the connection (:class:`SessionExpiredError`), and so does any
  request on a session whose client was told no lifetime (SaslAuthenticate v0, the bare v0
  token): it cannot re-authenticate, so it reconnects. Sessions named by the TLS certificate
  alone, and anonymous ones, do not expire.
* **PLAIN** (RFC 4616, ``[authzid] NUL username NUL password``): the password is a gateway API
  key (``tgk_...``), checked as HTTP checks ``X-API-Key``; the key alone names the principal
  (the key file's), so the username is not checked against anything (Confluent Cloud's
  username is the key's id; a gateway key has no separate id). Give the principal's name for
  readable client logs. An authorization id different from the username is refused, as
  Kafka's ``PlainSaslServer`` refuses it.
* **OAUTHBEARER** (RFC 7628, ``n,[a=authzid],^Aauth=Bearer <JWT>^A...^A^A``): the JWT is
  verified by the HTTP API's bearer-token code (issuer, audience, JWKS, algorithms, leeway,
  the principal claim); the principal is the same as HTTP's. An authorization id must be the
  principal's name (Kafka's ``OAuthBearerSaslServer``). A failure answers the error at once
  (Kafka first sends an RFC 7628 error challenge; clients handle both).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from jwt.utils import base64url_decode

from gateway.config import Settings
from gateway.errors import AuthenticationError, AuthUnavailableError
from gateway.listener import codes
from gateway.listener.framing import (
    API_VERSIONS,
    MESSAGES,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    MalformedRequestError,
    Reply,
    Request,
    frame,
    size_prefix,
)
from gateway.security.access import Access, Credentials
from gateway.security.acl import ANONYMOUS

log = logging.getLogger(__name__)

PLAIN: Final = "PLAIN"
OAUTHBEARER: Final = "OAUTHBEARER"
_MAX_TOKEN_BYTES: Final = 64 * 1024


def mechanisms(settings: Settings) -> tuple[str, ...]:
    """The SASL mechanisms ``settings`` configure, in the order offered."""
    methods = settings.authentication
    found = ((PLAIN, "api_key" in methods), (OAUTHBEARER, "jwt" in methods))
    return tuple(name for name, on in found if on)


class SaslFailedError(AuthenticationError):
    """A bare (v0) SASL token that failed: the connection is closed."""

    def __init__(self, message: str, mechanism: str) -> None:
        super().__init__(message)
        self.mechanism = mechanism


class SessionExpiredError(AuthenticationError):
    """A request past the end of the connection's SASL session, with no re-authentication
    begun (or none possible): the connection is closed, unanswered, as Kafka's broker does."""

    def __init__(self, message: str, mechanism: str) -> None:
        super().__init__(message)
        self.mechanism = mechanism


@dataclass(frozen=True, slots=True)
class Proof:
    """What a SASL token proved: the principal, and when the credential expires (a JWT's
    ``exp``, seconds since the epoch; None for an API key)."""

    principal: str
    expires: float | None = None


@dataclass(slots=True)
class Session:
    """One connection's authentication state. ``clock`` (monotonic seconds) dates the session's
    end and ``wall`` (seconds since the epoch) measures a JWT's ``exp``: tests inject them."""

    host: str  # the client's address
    principal: str | None  # None: not authenticated yet
    mechanism: str | None = None  # chosen by a SaslHandshake, until its token came
    raw_token_next: bool = False  # after a v0 handshake: the next frame is a bare token
    sasl_mechanism: str | None = None  # the mechanism that proved the principal (None: no SASL)
    expires_at: float | None = None  # the clock() time the SASL session ends; None: never
    reauthenticable: bool = False  # told its lifetime (SaslAuthenticate v1+): may re-authenticate
    reauthenticating: bool = False  # a re-authentication's handshake came, its token not yet
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def expired(self) -> bool:
        """The SASL session has ended (a connection with no SASL session never does)."""
        return self.expires_at is not None and self.clock() >= self.expires_at

    def start(self, mechanism: str, proof: Proof, reauth_ms: int, *, told: bool) -> int:
        """Begin (or renew) the SASL session ``proof`` proved with ``mechanism``: it lasts
        ``reauth_ms`` (0: no bound), or until the credential expires when that is sooner (0 ms
        left for a JWT inside the verifier's leeway: it ends now, as Kafka's). ``told``: the
        client gets the lifetime (SaslAuthenticate v1+) and so may re-authenticate. Returns the
        ``session_lifetime_ms`` to answer (0: no bound)."""
        lifetime_ms: int | None = reauth_ms if reauth_ms > 0 else None
        if proof.expires is not None:
            left_ms = max(0, int((proof.expires - self.wall()) * 1000))
            lifetime_ms = left_ms if lifetime_ms is None else min(lifetime_ms, left_ms)
        self.principal, self.sasl_mechanism = proof.principal, mechanism
        self.mechanism, self.reauthenticating = None, False
        self.expires_at = None if lifetime_ms is None else self.clock() + lifetime_ms / 1000
        self.reauthenticable = told and lifetime_ms is not None
        return lifetime_ms or 0


async def open_session(access: Access, host: str, peer_cert: Mapping[str, Any] | None) -> Session:
    """The session of a new connection (see the module docstring): anonymous on a gateway
    with no authentication; the certificate's principal when one verified and maps; else not
    authenticated yet."""
    if not access.authenticating:
        return Session(host, ANONYMOUS)
    if peer_cert:
        try:
            principal = await access.authenticate(Credentials(host=host, peer_cert=peer_cert))
        except AuthenticationError as exc:
            log.info("Kafka listener: the client certificate of %s maps to no principal: %s",
                     host, exc)  # fmt: skip
        else:
            if principal != ANONYMOUS:
                return Session(host, principal)
    return Session(host, None)


def _response(request: Request) -> Any:
    return MESSAGES[request.api_key][1][request.api_version]


def handshake(settings: Settings, session: Session, request: Request) -> Reply:
    """The SaslHandshake answer; the session then waits for the chosen mechanism's token. On a
    session a SASL exchange authenticated, this begins a re-authentication (see the module
    docstring)."""
    offered = list(mechanisms(settings))
    response_class = _response(request)
    asked = request.body.mechanism
    why = None
    if asked not in offered:
        code = codes.UNSUPPORTED_SASL_MECHANISM
    elif session.mechanism is not None:
        code, why = codes.ILLEGAL_SASL_STATE, "a second SaslHandshake before the token"
    elif session.sasl_mechanism is not None and (why := _no_reauth(session, request)):
        code = codes.ILLEGAL_SASL_STATE
    else:
        session.reauthenticating = session.sasl_mechanism is not None
        session.mechanism = asked
        session.raw_token_next = request.api_version == 0
        body = response_class(error_code=codes.NONE, mechanisms=offered)
        return Reply([frame(body, request.correlation_id)])
    body = response_class(error_code=code, mechanisms=offered)
    log.info("Kafka listener: SaslHandshake %r from %s: error %d%s", asked, session.host, code,
             f" ({why})" if why else "")  # fmt: skip
    return Reply([frame(body, request.correlation_id)], error=code, close=True)


def _no_reauth(session: Session, request: Request) -> str | None:
    """Why the SaslHandshake ``request`` on an authenticated session may not re-authenticate
    it; None when it may."""
    if not session.reauthenticable:
        return "re-authentication not offered: this connection was told no session lifetime"
    if request.api_version == 0:
        return "re-authentication needs SaslHandshake v1"
    if request.body.mechanism != session.sasl_mechanism:
        return f"re-authentication may not change the mechanism ({session.sasl_mechanism})"
    return None


async def authenticate(
    access: Access, session: Session, request: Request, reauth_ms: int = 0
) -> Reply:
    """The SaslAuthenticate answer: the principal the token proves and (v1+) the session's
    lifetime (``reauth_ms``: ``kafka_reauth_ms``), or the failure (and the connection closed
    after it). A re-authentication must prove the session's principal again."""
    response_class = _response(request)
    mechanism = session.mechanism
    if mechanism is None or session.raw_token_next:
        code, message = codes.ILLEGAL_SASL_STATE, "SaslAuthenticate without a SaslHandshake"
    else:
        try:
            proof = await prove(access, session.host, mechanism, request.body.auth_bytes)
            if session.reauthenticating and proof.principal != session.principal:
                log.info("Kafka listener: %s from %s re-authenticated as %s: refused",
                         session.principal, session.host, proof.principal)  # fmt: skip
                raise AuthenticationError("re-authentication may not change the principal")
        except AuthenticationError as exc:
            code, message = codes.SASL_AUTHENTICATION_FAILED, f"Authentication failed: {exc}"
        else:
            told = request.api_version >= 1
            lifetime_ms = session.start(mechanism, proof, reauth_ms, told=told)
            body = response_class(error_code=codes.NONE, error_message=None, auth_bytes=b"",
                                  session_lifetime_ms=lifetime_ms)  # fmt: skip
            return Reply([frame(body, request.correlation_id)])
    log.info("Kafka listener: SASL %s from %s: %s", mechanism, session.host, message)
    body = response_class(
        error_code=code, error_message=message, auth_bytes=b"", session_lifetime_ms=0
    )
    return Reply([frame(body, request.correlation_id)], error=code, close=True)


async def raw_token(access: Access, session: Session, payload: bytes, reauth_ms: int = 0) -> Reply:
    """The answer to the bare token that follows a v0 handshake: an empty frame on success (the
    session then ends as :meth:`Session.start` says, and the client, told nothing, cannot
    re-authenticate); a failure raises :class:`SaslFailedError` (Kafka closes the connection,
    with no answer)."""
    mechanism = session.mechanism
    assert mechanism is not None
    session.raw_token_next = False
    try:
        proof = await prove(access, session.host, mechanism, payload)
    except AuthenticationError as exc:
        raise SaslFailedError(
            f"SASL {mechanism} (v0) from {session.host}: {exc}", mechanism
        ) from exc
    session.start(mechanism, proof, reauth_ms, told=False)
    return Reply([size_prefix(0)])


async def verify(access: Access, host: str, mechanism: str, token: bytes | None) -> str:
    """The principal ``token`` proves with ``mechanism`` (raises :class:`AuthenticationError`
    naming the check that failed)."""
    return (await prove(access, host, mechanism, token)).principal


async def prove(access: Access, host: str, mechanism: str, token: bytes | None) -> Proof:
    """What ``token`` proves with ``mechanism``: :func:`verify`'s principal and when the
    credential expires."""
    if not token:
        raise AuthenticationError("empty SASL token")
    if len(token) > _MAX_TOKEN_BYTES:
        raise AuthenticationError("SASL token too long")
    try:
        text = bytes(token).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuthenticationError("SASL token is not UTF-8") from exc
    try:
        if mechanism == PLAIN:
            return Proof(await _plain(access, host, text))
        return await _oauthbearer(access, host, text)
    except AuthUnavailableError as exc:  # the JWT keys cannot be loaded now: fail closed
        raise AuthenticationError(f"cannot verify tokens now: {exc}") from exc


async def _plain(access: Access, host: str, text: str) -> str:
    parts = text.split("\0")
    if len(parts) != 3:
        raise AuthenticationError("malformed PLAIN token: expected authzid NUL user NUL password")
    authzid, username, password = parts
    if not username:
        raise AuthenticationError("malformed PLAIN token: empty username")
    if authzid and authzid != username:
        raise AuthenticationError("an authorization id different from the username")
    if not password:
        raise AuthenticationError("empty password: give a gateway API key")
    return await access.authenticate(Credentials(host=host, api_key=password))


async def _oauthbearer(access: Access, host: str, text: str) -> Proof:
    gs2, sep, rest = text.partition("\x01")
    if not sep or not rest.endswith("\x01\x01"):
        raise AuthenticationError("malformed OAUTHBEARER token (RFC 7628 framing)")
    flags = gs2.split(",")
    if len(flags) != 3 or flags[0] not in ("n", "y") or flags[2] != "":
        raise AuthenticationError("malformed OAUTHBEARER GS2 header")
    authzid = flags[1].removeprefix("a=") if flags[1].startswith("a=") else None
    if flags[1] and authzid is None:
        raise AuthenticationError("malformed OAUTHBEARER GS2 header")
    pairs = dict(kv.partition("=")[::2] for kv in rest[:-2].split("\x01"))
    auth = pairs.get("auth")
    if auth is None:
        raise AuthenticationError("OAUTHBEARER token has no auth=Bearer value")
    principal = await access.authenticate(Credentials(host=host, authorization=auth))
    if authzid and authzid != principal.partition(":")[2]:
        raise AuthenticationError("the authorization id is not the token's principal")
    return Proof(principal, _expiry(auth))


def _expiry(authorization: str) -> float:
    """The ``exp`` claim of the JWT in ``authorization`` (``Bearer <JWT>``), which
    :meth:`Access.authenticate` has just verified (signature, and ``exp`` required and not
    past): only read here, to end the session when the token does. The HTTP API's verifier
    returns only the principal, so the listener reads the claim itself."""
    jwt_text = authorization.strip(" \t").rpartition(" ")[2]
    try:
        claims = json.loads(base64url_decode(jwt_text.split(".")[1]))
    except (IndexError, ValueError) as exc:
        raise AuthenticationError("malformed token") from exc
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise AuthenticationError("token has no numeric 'exp' claim")
    return float(exp)


def check_allowed(session: Session, request_key: int) -> None:
    """Raise (the connection closes): :class:`MalformedRequestError` for a request other than
    ApiVersions and SASL before the session authenticated, or other than SASL during a
    re-authentication; :class:`SessionExpiredError` for one other than SASL (any, when the
    client cannot re-authenticate) past the session's end."""
    sasl_key = request_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
    if session.expired and not (sasl_key and session.reauthenticable):
        mechanism = session.sasl_mechanism or "none"
        raise SessionExpiredError(
            f"the SASL {mechanism} session of {session.principal} from {session.host} expired "
            f"(API key {request_key} came; no re-authentication)",
            mechanism,
        )
    if session.reauthenticating and not sasl_key:
        raise UnauthenticatedRequestError(
            f"API key {request_key} from {session.host} during SASL re-authentication"
        )
    if session.authenticated or sasl_key or request_key == API_VERSIONS:
        return
    raise UnauthenticatedRequestError(
        f"API key {request_key} from {session.host} before SASL authentication"
    )


class UnauthenticatedRequestError(MalformedRequestError):
    """A request that needs an authenticated connection, on one that is not."""
