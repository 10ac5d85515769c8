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
* **SaslAuthenticate** (v0-v2): success answers no error, empty ``auth_bytes`` and
  ``session_lifetime_ms`` 0 (re-authentication, KIP-368, is not offered); failure answers
  ``SASL_AUTHENTICATION_FAILED`` with the check that failed (never the credential) and closes
  the connection. Out of order (no handshake first, a second authentication):
  ``ILLEGAL_SASL_STATE``, then closed.
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

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

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


@dataclass(slots=True)
class Session:
    """One connection's authentication state."""

    host: str  # the client's address
    principal: str | None  # None: not authenticated yet
    mechanism: str | None = None  # chosen by a SaslHandshake, until its token came
    raw_token_next: bool = False  # after a v0 handshake: the next frame is a bare token
    sasl_done: bool = False  # a SASL exchange succeeded (no second one: no KIP-368)

    @property
    def authenticated(self) -> bool:
        return self.principal is not None


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
    """The SaslHandshake answer; the session then waits for the chosen mechanism's token."""
    offered = list(mechanisms(settings))
    response_class = _response(request)
    asked = request.body.mechanism
    if asked not in offered:
        code = codes.UNSUPPORTED_SASL_MECHANISM
    elif session.sasl_done or session.mechanism is not None:
        code = codes.ILLEGAL_SASL_STATE
    else:
        session.mechanism = asked
        session.raw_token_next = request.api_version == 0
        body = response_class(error_code=codes.NONE, mechanisms=offered)
        return Reply([frame(body, request.correlation_id)])
    body = response_class(error_code=code, mechanisms=offered)
    log.info("Kafka listener: SaslHandshake %r from %s: error %d", asked, session.host, code)
    return Reply([frame(body, request.correlation_id)], error=code, close=True)


async def authenticate(access: Access, session: Session, request: Request) -> Reply:
    """The SaslAuthenticate answer: the principal the token proves, or the failure (and the
    connection closed after it)."""
    response_class = _response(request)
    mechanism = session.mechanism
    if mechanism is None or session.raw_token_next:
        code, message = codes.ILLEGAL_SASL_STATE, "SaslAuthenticate without a SaslHandshake"
    else:
        try:
            session.principal = await verify(access, session.host, mechanism,
                                             request.body.auth_bytes)  # fmt: skip
        except AuthenticationError as exc:
            code, message = codes.SASL_AUTHENTICATION_FAILED, f"Authentication failed: {exc}"
        else:
            session.mechanism, session.sasl_done = None, True
            body = response_class(
                error_code=codes.NONE, error_message=None, auth_bytes=b"", session_lifetime_ms=0
            )
            return Reply([frame(body, request.correlation_id)])
    log.info("Kafka listener: SASL %s from %s: %s", mechanism, session.host, message)
    body = response_class(
        error_code=code, error_message=message, auth_bytes=b"", session_lifetime_ms=0
    )
    return Reply([frame(body, request.correlation_id)], error=code, close=True)


async def raw_token(access: Access, session: Session, payload: bytes) -> Reply:
    """The answer to the bare token that follows a v0 handshake: an empty frame on success;
    a failure raises :class:`SaslFailedError` (Kafka closes the connection, with no answer)."""
    mechanism = session.mechanism
    assert mechanism is not None
    session.raw_token_next = False
    try:
        session.principal = await verify(access, session.host, mechanism, payload)
    except AuthenticationError as exc:
        raise SaslFailedError(
            f"SASL {mechanism} (v0) from {session.host}: {exc}", mechanism
        ) from exc
    session.mechanism, session.sasl_done = None, True
    return Reply([size_prefix(0)])


async def verify(access: Access, host: str, mechanism: str, token: bytes | None) -> str:
    """The principal ``token`` proves with ``mechanism`` (raises :class:`AuthenticationError`
    naming the check that failed)."""
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
            return await _plain(access, host, text)
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


async def _oauthbearer(access: Access, host: str, text: str) -> str:
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
    return principal


def check_allowed(session: Session, request_key: int) -> None:
    """Raise :class:`MalformedRequestError` (the connection closes) for a request other than
    ApiVersions and SASL before the session authenticated."""
    if session.authenticated or request_key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
        return
    raise UnauthenticatedRequestError(
        f"API key {request_key} from {session.host} before SASL authentication"
    )


class UnauthenticatedRequestError(MalformedRequestError):
    """A request that needs an authenticated connection, on one that is not."""
