"""Who is asking and what they may do: authentication, ACLs and rate limits as one object.

The HTTP layer hands :meth:`Access.authenticate` what a request presents (:class:`Credentials`),
counts the principal's rate with :meth:`Access.limit` and asks :meth:`Access.check_topic`
before anything about a topic is read or listed.

* **Who.** A bearer token (``Authorization``) goes to the JWT authenticator, an ``X-API-Key``
  to the API keys, a verified client certificate to the principal mapper; presented
  credentials that do not verify are a 401, never a fall back to anonymous. A request that
  presents none is ``User:ANONYMOUS``. A key removed from the API key file is refused from
  the file's next check on (within a second), without a restart.
* **What.** With an ACL file, Kafka's rules decide (``Read`` for records, ``Describe`` for
  offsets, partitions, segments and the topic list). Without one (allowed only when no
  authentication is configured: the local default), everything is allowed.
* **Anonymous, once authentication is configured**, is refused unless an ACL grants
  ``User:ANONYMOUS``; refused, it gets 401 (authenticate), not 403, so a client knows what to do.
* A denied topic is 403 ``topic_authorization_failed`` whether or not it exists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config import Settings
from gateway.errors import (
    AuthenticationError,
    AuthorizationError,
    AuthUnavailableError,
    ConfigurationError,
    TopicAuthorizationError,
)
from gateway.security.acl import ANONYMOUS, AclFile, AclSet, Operation, ResourceType
from gateway.security.apikeys import ApiKeyFile
from gateway.security.jwt_auth import JwksCache, JwtAuthenticator, JwtSettings
from gateway.security.mtls import PrincipalMapper, subject_dn
from gateway.security.ratelimit import RateLimiter

log = logging.getLogger(__name__)

CLUSTER = "kafka-cluster"  # the one Cluster resource name Kafka uses


@dataclass(frozen=True, slots=True)
class Credentials:
    """What one request presents."""

    host: str  # the client's address
    authorization: str | None = None
    api_key: str | None = None
    peer_cert: Mapping[str, Any] | None = None  # ssl.SSLSocket.getpeercert() of a TLS client


class Access:
    """See the module docstring."""

    def __init__(
        self,
        *,
        acls: AclFile | None = None,
        jwt: JwtAuthenticator | None = None,
        api_keys: ApiKeyFile | None = None,
        mtls: PrincipalMapper | None = None,
        limiter: RateLimiter | None = None,
        jwks: JwksCache | None = None,
        jwks_from_file: bool = False,
    ) -> None:
        self._jwks, self._jwks_from_file = jwks, jwks_from_file
        self._acls = acls
        self._jwt = jwt
        self._api_keys = api_keys
        self._mtls = mtls
        self._limiter = limiter
        self.authenticating = any(m is not None for m in (jwt, api_keys, mtls))

    async def start(self) -> None:
        """Load the JWT keys before the first request: a JWKS file that gives none stops the
        start (:class:`ConfigurationError`); a JWKS URL that cannot be fetched now is logged
        and tried again by the first request that needs it (fail closed until then)."""
        if self._jwks is None:
            return
        try:
            await self._jwks.refresh()
        except AuthUnavailableError as exc:
            if self._jwks_from_file:
                raise ConfigurationError(f"jwt_jwks_file: {exc}") from exc
            log.warning("JWT keys not loaded at start (retried on demand): %s", exc)

    @property
    def open(self) -> bool:
        """No ACLs and no authentication: the local default, everything allowed."""
        return self._acls is None and not self.authenticating

    async def authenticate(self, creds: Credentials) -> str:
        """The principal ``creds`` prove (raises :class:`AuthenticationError`). With no
        authentication configured every request is anonymous (credentials sent to such a
        gateway are not looked at)."""
        return await self._authenticate(creds) if self.authenticating else ANONYMOUS

    def limit(self, principal: str) -> None:
        """Count a request of ``principal`` against its rate (raises
        :class:`~gateway.errors.RateLimitedError` beyond it)."""
        if self._limiter is not None:
            self._limiter.take(principal)

    async def _authenticate(self, creds: Credentials) -> str:
        if creds.authorization is not None:
            if self._jwt is None:
                raise AuthenticationError("bearer tokens are not configured on this gateway")
            return await self._jwt.authenticate(creds.authorization)
        if creds.api_key is not None:
            if self._api_keys is None:
                raise AuthenticationError("API keys are not configured on this gateway")
            return self._api_keys.authenticate(creds.api_key)
        if creds.peer_cert and self._mtls is not None:
            return self._mtls.principal(subject_dn(creds.peer_cert))
        return ANONYMOUS

    def _rules(self) -> AclSet | None:
        return None if self._acls is None else self._acls.current()

    def _refused(self, principal: str, what: str) -> AuthenticationError | None:
        """For an anonymous request once authentication is configured: the 401 to answer."""
        if principal == ANONYMOUS and self.authenticating:
            return AuthenticationError(f"authentication required to {what}")
        return None

    def allows(self, principal: str, host: str, operation: Operation, topic: str) -> bool:
        rules = self._rules()
        return rules is None or rules.authorize(principal, host, operation, topic)

    def check_topic(self, principal: str, host: str, operation: Operation, topic: str) -> None:
        """Raise unless ``principal`` may do ``operation`` on ``topic``."""
        if self.allows(principal, host, operation, topic):
            return
        refused = self._refused(principal, f"{operation.value.lower()} topic {topic!r}")
        if refused is not None:
            raise refused
        raise TopicAuthorizationError(
            f"{principal} may not {operation.value.lower()} topic {topic!r} (or it does not exist)"
        )

    def visible(self, principal: str, host: str, topics: Iterable[str]) -> list[str]:
        """The ``topics`` ``principal`` may describe, in their order."""
        rules = self._rules()
        if rules is None:
            return list(topics)
        visible = rules.describable_topics(principal, host, topics)
        refused = None if visible else self._refused(principal, "list topics")
        if refused is not None:  # anonymous, with nothing granted it: authenticate
            raise refused
        return visible

    def check_cluster(self, principal: str, host: str, what: str) -> None:
        """``Describe`` on the Cluster resource (``/metrics`` once authentication is on)."""
        rules = self._rules()
        if rules is None or rules.authorize_resource(
            principal, host, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER
        ):
            return
        refused = self._refused(principal, what)
        if refused is not None:
            raise refused
        raise AuthorizationError(f"{principal} may not {what} (Describe on Cluster:{CLUSTER})")


def access_for(settings: Settings) -> Access:
    """The :class:`Access` ``settings`` describe: their files read and checked now (a bad
    one raises :class:`~gateway.errors.ConfigurationError` before the server starts). The ACL
    and API key files are then reloaded when they change (a bad change keeps what is in force:
    :class:`~gateway.security.watched.WatchedFile`)."""
    supers = frozenset(settings.super_users)
    acls = None if settings.acl_file is None else AclFile(settings.acl_file, super_users=supers)
    jwt, jwks = None, None
    if settings.jwt_issuer is not None and settings.jwt_audience is not None:
        jwt_settings = JwtSettings(
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            jwks_file=settings.jwt_jwks_file,
            jwks_url=settings.jwt_jwks_url,
            algorithms=tuple(settings.jwt_algorithms),
            leeway_s=settings.jwt_leeway_s,
            principal_claim=settings.jwt_principal_claim,
        )
        jwks = JwksCache(jwt_settings)
        jwt = JwtAuthenticator(jwt_settings, jwks)
    api_keys = None if settings.api_keys_file is None else ApiKeyFile(settings.api_keys_file)
    mtls = None
    if settings.tls_client_ca is not None:
        mtls = PrincipalMapper.parse(settings.tls_principal_mapping_rules)
    limiter = None
    if settings.rate_limit_per_s > 0:
        limiter = RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst)
    return Access(
        acls=acls,
        jwt=jwt,
        api_keys=api_keys,
        mtls=mtls,
        limiter=limiter,
        jwks=jwks,
        jwks_from_file=settings.jwt_jwks_file is not None,
    )
