"""Who may read what (``docs/security.md``): authentication, ACLs, TLS, rate limits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import NoDecode


class SecuritySettings(BaseModel):
    """Authentication methods, the ACL file, TLS, the per-principal rate, the audit log."""

    allow_anonymous: bool = Field(
        default=False,
        description="serve anonymous requests on a non-loopback address with no authentication "
        "configured (otherwise serve refuses to start there)",
    )
    acl_file: Path | None = Field(
        default=None,
        description="Kafka ACLs (the lines kafka-acls --list prints), reloaded on change; "
        "required once any authentication is configured",
    )
    super_users: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="principals allowed everything (e.g. User:admin)"
    )
    jwt_issuer: str | None = Field(
        default=None, description="OIDC issuer (iss) of bearer tokens; turns JWT auth on"
    )
    jwt_audience: str | None = Field(default=None, description="the audience (aud) tokens carry")
    jwt_jwks_url: str | None = Field(default=None, description="the issuer's JWKS URL")
    jwt_jwks_file: Path | None = Field(default=None, description="or a JWKS file")
    jwt_algorithms: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["RS256", "ES256", "PS256", "EdDSA"],
        description="signature algorithms accepted (asymmetric only)",
    )
    jwt_principal_claim: str = Field(
        default="sub", min_length=1, description="the claim naming the principal (User:<claim>)"
    )
    jwt_leeway_s: float = Field(
        default=30.0, ge=0, le=300, description="clock skew allowed on exp, nbf and iat"
    )
    api_keys_file: Path | None = Field(
        default=None, description="static API keys: lines '<principal> sha256:<hex>'"
    )
    tls_certfile: Path | None = Field(default=None, description="serve HTTPS with this certificate")
    tls_keyfile: Path | None = Field(default=None, description="and this private key")
    tls_client_ca: Path | None = Field(
        default=None, description="CA bundle of client certificates: turns mTLS auth on"
    )
    tls_client_cert_required: bool = Field(
        default=True, description="with tls_client_ca: refuse a TLS handshake without a certificate"
    )
    tls_principal_mapping_rules: str = Field(
        default="DEFAULT",
        description="certificate subject to principal, as Kafka's ssl.principal.mapping.rules",
    )
    rate_limit_per_s: float = Field(
        default=0.0,
        ge=0,
        description="requests per second per principal, all workers together (0: no limit; 429 "
        "with Retry-After beyond)",
    )
    rate_limit_burst: int = Field(
        default=0, ge=0, description="requests a principal may send at once (0: one second's worth)"
    )
    audit_log: str | None = Field(
        default=None,
        description="one JSON line per data request to this file, or - for stdout (default: off)",
    )
    allow_readable_keys: bool = Field(
        default=False,
        description="load private key files that group or others may read (refused by default)",
    )

    @model_validator(mode="after")
    def _consistent_security(self) -> Self:
        jwt = (self.jwt_issuer, self.jwt_audience, self.jwt_jwks_url, self.jwt_jwks_file)
        if any(v is not None for v in jwt):
            if self.jwt_issuer is None or self.jwt_audience is None:
                raise ValueError("JWT authentication needs both jwt_issuer and jwt_audience")
            if (self.jwt_jwks_url is None) == (self.jwt_jwks_file is None):
                raise ValueError("JWT authentication needs one of jwt_jwks_url or jwt_jwks_file")
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("TLS needs both tls_certfile and tls_keyfile")
        if self.tls_client_ca is not None and self.tls_certfile is None:
            raise ValueError("tls_client_ca (mTLS) needs TLS: tls_certfile and tls_keyfile")
        if self.authentication and self.acl_file is None:
            raise ValueError(
                "authentication is configured but no acl_file: without ACLs no authenticated "
                "principal may read anything (give the file kafka-acls --list prints)"
            )
        return self

    @property
    def authentication(self) -> tuple[str, ...]:
        """The authentication methods configured: ``jwt``, ``mtls``, ``api_key``."""
        methods = (
            ("jwt", self.jwt_issuer is not None),
            ("mtls", self.tls_client_ca is not None),
            ("api_key", self.api_keys_file is not None),
        )
        return tuple(name for name, on in methods if on)
