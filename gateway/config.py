"""One typed settings object for ``tiered-gateway serve``, validated at start.

The other commands that open the bucket (``tier``, ``catalog``, ``scrub``, ``export``) read their
shared settings (``store``, ``key_prefix``, ``key_pairs``, ``state_dir``, ``s3_*``) from the same
sources with :func:`load_command_settings`, where ``store`` may be absent.

Every setting has three spellings: a command-line flag (``--index-cache-bytes``), an environment
variable (``TIERED_GATEWAY_INDEX_CACHE_BYTES``) and a key of the optional TOML file given with
``--config`` (``index_cache_bytes = "256MiB"``). Precedence: flag > environment > TOML file >
default. A bad value stops the start with a :class:`~gateway.errors.ConfigurationError` whose
message names the setting in all three spellings. ``docs/configuration.md`` documents each one.

Byte sizes take an integer or a number with a unit (``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB``;
``KB``, ``MB``, ``GB`` are decimal). A list setting (:data:`LIST_FIELDS`: ``key_pairs``,
``allowed_hosts``, ...) is a repeatable flag, and in the environment a JSON list or
comma-separated entries.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from gateway.errors import ConfigurationError
from gateway.metadata.follow import FollowConfig
from gateway.metadata.follow_kafka import security_settings
from gateway.storage.hedge import HedgePolicy
from gateway.storage.retry import RetryPolicy
from gateway.storage.url import parse_store_url

ENV_PREFIX: Final = "TIERED_GATEWAY_"
CONFIG_ENV: Final = ENV_PREFIX + "CONFIG"  # the TOML file, when --config is not given
KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB

_UNITS: Final = {
    "": 1,
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 1024 * GiB,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_FLAG_NAMES: Final = {  # repeatable: one value per flag
    "key_pairs": "--key-pair",
    "allowed_hosts": "--allowed-host",
    "forwarded_allow_ips": "--forwarded-allow-ip",
    "cors_origins": "--cors-origin",
    "super_users": "--super-user",
    "jwt_algorithms": "--jwt-algorithm",
    "metadata_topics": "--metadata-topic-filter",
}
LIST_FIELDS: Final = tuple(_FLAG_NAMES)
"""The list settings: a repeatable flag each; in the environment a JSON list or comma-separated."""
_MAX_SHOWN_INPUT: Final = 80
LogLevel = Literal["debug", "info", "warning", "error", "critical"]


def parse_byte_size(value: object) -> object:
    """``"256MiB"`` -> 268435456; integers and anything else go to the int validator."""
    if not isinstance(value, str):
        return value
    match = _SIZE.fullmatch(value)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError("expected bytes: an integer or a number with a unit such as 256MiB")
    number, unit = match.groups()
    size = float(number) * _UNITS[unit.lower()]
    if not size.is_integer():
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(size)


ByteSize = Annotated[int, BeforeValidator(parse_byte_size)]


def _default_threads() -> int:
    return min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's own default


def usable_cpus() -> int:
    """The cores this process may run on (its affinity; a container's cpuset), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


DIVIDED: Final = (
    "index_cache_bytes",
    "chunk_cache_bytes",
    "inflight_bytes",
    "max_active_pages",
    "max_concurrent_gets",
    "get_rate_per_prefix",
    "max_connections",
    "rate_limit_per_s",
    "rate_limit_burst",
)
"""The budgets of the whole server that ``--workers N`` divides among its worker processes
(the disk tiers divide their directory bounds themselves, see :mod:`indexcache.share`)."""


class Settings(BaseSettings):
    """Everything ``serve`` can be told; see ``docs/configuration.md``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    # --- the bucket and the catalog ---------------------------------------------------------
    store: str = Field(description="the bucket: file:///abs/dir or s3://bucket")
    key_prefix: str = Field(default="", description="object key prefix (e.g. 'tiered/')")
    key_pairs: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="RSA key pairs ID=PATH (PKCS#8 private key PEM) opening encrypted segments",
    )
    state_dir: Path | None = Field(
        default=None,
        description="keep the catalog in DIR (SQLite) so restarts rescan incrementally",
    )
    rescan_interval_s: float = Field(
        default=60.0, ge=0, description="seconds between incremental bucket rescans (0: never)"
    )
    layout: Literal["aiven", "local-tiered-storage"] = Field(
        default="aiven",
        description="the bucket's layout: aiven (the plugin's objects) or local-tiered-storage "
        "(Kafka's own LocalTieredStorage folder, its raw segment files; read-only)",
    )
    # --- following a cluster's __remote_log_metadata (docs/live-metadata.md) ------------------
    metadata_source: Literal["bucket", "topic", "both"] = Field(
        default="bucket",
        description="where the catalog comes from: bucket (scans of the manifests), topic "
        "(follow the cluster's __remote_log_metadata: uploads seen at once, no listing), or "
        "both (the topic for every segment it names, scans for the rest)",
    )
    metadata_bootstrap: str | None = Field(
        default=None, description="the cluster's bootstrap servers (HOST:PORT,...) to follow"
    )
    metadata_topic_name: str = Field(
        default="__remote_log_metadata", min_length=1, description="the metadata topic"
    )
    metadata_topics: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="follow only the metadata partitions of these topics (default: every "
        "partition of the metadata topic)",
    )
    metadata_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="the follower's Kafka security protocol"
    )
    metadata_sasl_mechanism: (
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None
    ) = Field(default=None, description="the follower's SASL mechanism")
    metadata_sasl_username: str | None = Field(default=None, description="SASL PLAIN/SCRAM user")
    metadata_sasl_password: str | None = Field(
        default=None, description="SASL PLAIN/SCRAM password"
    )
    metadata_oauth_token_file: Path | None = Field(
        default=None, description="OAUTHBEARER: a file holding the token, read at each login"
    )
    metadata_ssl_cafile: Path | None = Field(default=None, description="CA bundle of the cluster")
    metadata_ssl_certfile: Path | None = Field(
        default=None, description="client certificate (mutual TLS)"
    )
    metadata_ssl_keyfile: Path | None = Field(default=None, description="its private key")
    # --- the listener -------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", min_length=1, description="address to listen on")
    port: int = Field(default=8080, ge=0, le=65535, description="TCP port (0: any free port)")
    workers: int = Field(
        default_factory=usable_cpus,
        ge=1,
        description="worker processes sharing the port (default: the usable cores; 1: one "
        "process). The memory, in-flight, GET and disk budgets are the server's total, divided "
        "among the workers",
    )
    kafka_listener: str | None = Field(
        default=None,
        description="also serve the Kafka protocol, read-only, on HOST:PORT (e.g. "
        "127.0.0.1:9092; port 0: any free port) for consumers that assign partitions; off "
        "by default; SASL/PLAIN (API keys) and OAUTHBEARER (JWT) over the tls_* settings, "
        "the same ACLs; off loopback only with authentication; served by every worker "
        "process (docs/kafka-listener.md)",
    )
    kafka_advertised_listener: str | None = Field(
        default=None,
        description="the HOST:PORT Metadata answers tell Kafka clients to connect to (default: "
        "kafka_listener's own; port 0: the port it took); required when kafka_listener binds "
        "a wildcard address such as 0.0.0.0",
    )
    kafka_reauth_ms: int = Field(
        default=3_600_000,
        ge=0,
        description="the longest a SASL session of the Kafka listener lasts (Kafka's "
        "connections.max.reauth.ms, KIP-368): past it, a connection must re-authenticate on "
        "itself or is closed at its next request, so a revoked API key or an expired JWT stops "
        "reading; a JWT's own expiry shortens it; 0: no bound but the JWT's",
    )
    log_level: LogLevel = Field(
        default="info", description="debug, info, warning, error or critical"
    )
    shutdown_grace_s: int = Field(
        default=25,
        ge=0,
        description="on SIGTERM: seconds in-flight requests have to finish (NDJSON streams end "
        "after their current page) before they are cut; keep it under the orchestrator's grace",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text lines, or json: one object per line (ts, level, logger, message, "
        "request_id)",
    )
    # --- S3 -----------------------------------------------------------------------------------
    s3_endpoint_url: str | None = Field(default=None, description="S3 endpoint (MinIO, moto, ...)")
    s3_region: str | None = Field(default=None, description="S3 region")
    s3_path_style: bool = Field(default=False, description="path-style S3 addressing")
    s3_data_plane: Literal["aiohttp", "aioboto3", "httpx"] = Field(
        default="aiohttp",
        description="client of the ranged GETs: aiohttp with SigV4 (measured fastest), "
        "aioboto3's get_object, or httpx",
    )
    # --- caches and reads ---------------------------------------------------------------------
    index_cache_bytes: ByteSize = Field(
        default=256 * MiB,
        ge=0,
        description="memory for the offset/time/txn indexes (all workers together)",
    )
    index_cache_dir: Path | None = Field(
        default=None, description="also keep loaded indexes on disk under DIR"
    )
    chunk_cache_bytes: ByteSize = Field(
        default=256 * MiB,
        ge=0,
        description="memory for detransformed chunks, all workers together (0: no chunk cache)",
    )
    shared_runs_share: float = Field(
        default=0.75,
        ge=0,
        lt=1,
        description="with workers, the part of chunk_cache_bytes that is one ring of verified "
        "runs every worker reads (held once); the rest is divided among the workers; 0: none",
    )
    chunk_cache_dir: Path | None = Field(
        default=None,
        description="also keep decoded chunks on disk under DIR (decrypted data: a private dir)",
    )
    chunk_cache_disk_bytes: ByteSize = Field(
        default=4 * GiB, ge=1, description="disk bound of chunk_cache_dir (all workers together)"
    )
    readahead_bytes: ByteSize = Field(
        default=2 * MiB, ge=0, description="chunks loaded ahead of a sequential read (0: none)"
    )
    max_get_bytes: ByteSize = Field(
        default=8 * MiB, ge=1, description="largest coalesced ranged GET"
    )
    max_concurrent_gets: int = Field(
        default=64,
        ge=1,
        description="ranged GETs in flight in the whole server (all reads, workers)",
    )
    get_rate_per_prefix: float = Field(
        default=5500.0,
        ge=0,
        description="GETs per second per key prefix, all workers together (0: no limit)",
    )
    hedge_after_ms: float = Field(
        default=0.0,
        ge=0,
        description="send a ranged GET again when unanswered after MS (0: the p95 of recent GETs)",
    )
    hedge_max_fraction: float = Field(
        default=0.05, ge=0, le=1, description="share of GETs that may be hedged (0: no hedging)"
    )
    block_bytes: ByteSize = Field(
        default=64 * KiB, ge=1, description="read and cache unit of untransformed segments"
    )
    retry_max_attempts: int = Field(
        default=5, ge=1, description="store attempts per read, the first included"
    )
    retry_base_delay_s: float = Field(
        default=0.05, ge=0, description="backoff base: attempt n waits up to base * 2^(n-1)"
    )
    retry_max_delay_s: float = Field(
        default=2.0, gt=0, description="the longest wait between two attempts"
    )
    retry_attempt_timeout_s: float = Field(
        default=10.0, gt=0, description="timeout of one store attempt"
    )
    threads: int = Field(
        default_factory=_default_threads,
        ge=1,
        description="threads for decompression, decryption and decoding",
    )
    malloc_mmap_threshold: ByteSize = Field(
        default=0,
        ge=0,
        description="C heap blocks of at least this size get their own mapping, unmapped when "
        "freed, so resident memory follows the bytes in flight at a CPU cost (every large "
        "buffer faulted in anew: JSON/NDJSON ~40 %% slower at 256KiB); 0: glibc's sliding "
        "threshold, freed memory reused and given back by the heap trimmer",
    )
    malloc_arenas: int = Field(
        default=2,
        ge=0,
        description="glibc only: at most this many C heap arenas for the process's threads "
        "(M_ARENA_MAX, set at start; MALLOC_ARENA_MAX in the environment wins); each arena "
        "keeps what it freed: under load, 2 left ~200 MiB less resident than glibc's 8 per "
        "core and used no more CPU; 0: glibc's default",
    )
    compiled_records: bool = Field(
        default=True,
        description="decode records and write JSON/NDJSON with compiled loops (numba): about "
        "twice the records per CPU-second; off: the pure-Python path, without numba's ~110 MiB "
        "of resident memory",
    )
    # --- requests -----------------------------------------------------------------------------
    request_timeout_ms: int = Field(
        default=30_000, ge=1, description="deadline of a request without timeout_ms"
    )
    max_request_timeout_ms: int = Field(
        default=300_000, ge=1, description="largest timeout_ms a request may ask for"
    )
    default_max_bytes: ByteSize = Field(
        default=MiB, ge=1, description="max_bytes of a JSON or raw fetch that gives none"
    )
    max_response_bytes: ByteSize = Field(
        default=64 * MiB,
        ge=1,
        description="largest max_bytes; also the NDJSON budget when none is given",
    )
    stream_page_bytes: ByteSize = Field(
        default=MiB, ge=1, description="record batch bytes fetched per NDJSON page"
    )
    inflight_bytes: ByteSize = Field(
        default=16 * MiB,
        ge=1,
        description="response bytes in flight, all requests and workers together: each reserves "
        "its page "
        "(max_bytes, or one NDJSON page) first; beyond it requests wait within their deadline, "
        "then get 503 overloaded",
    )
    max_active_pages: int = Field(
        default_factory=lambda: 16 * usable_cpus(),
        ge=1,
        description="JSON/NDJSON pages decoded and written at once, all workers together "
        "(default: 16 per usable core); beyond it pages queue in arrival order within half "
        "their deadline, then 503 overloaded (a stream's later pages: within the deadline)",
    )
    max_loop_lag_ms: int = Field(
        default=100,
        ge=0,
        description="while a worker's event loop stays later than this (six ticks of 50 ms), "
        "new data requests get 503 overloaded at once (0: never)",
    )
    queue_wait_ms: int = Field(
        default=500,
        ge=0,
        description="the longest a request waits for its share of inflight_bytes (at most "
        "half of its deadline), then 503 overloaded with Retry-After",
    )

    # --- who may read what (docs/security.md) -----------------------------------------------
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host header names answered (DNS rebinding guard; '*.example.com' for "
        "subdomains, '*' for any); default on a loopback address: localhost, 127.0.0.1, ::1; "
        "required on any other address",
    )
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="proxies whose X-Forwarded-For/-Proto are believed (addresses or CIDRs; "
        "default: none, the peer address is the client's)",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="origins allowed cross-origin GETs (default: none, CORS off)",
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="seconds a client has to send a request's head"
    )
    max_header_bytes: ByteSize = Field(
        default=16 * KiB, ge=1024, description="largest request line plus headers (431 beyond)"
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        description="open connections, all workers together (503 beyond)",
    )
    console: bool | None = Field(
        default=None,
        description="serve the history console at /ui (docs/console.md); default: on when "
        "listening on a loopback address or with authentication configured, else off",
    )
    console_downloads: bool = Field(
        default=True, description="let the console download ranges of records as NDJSON"
    )
    console_scan_bytes: ByteSize = Field(
        default=256 * MiB,
        ge=1,
        description="the stored bytes a console search reads before it stops and offers to "
        "go on (a search may ask for another budget)",
    )
    console_page_records: int = Field(
        default=50, ge=1, le=500, description="records a console page shows"
    )
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

    # --- schema registry (avro, protobuf, jsonschema and auto formats) -------------------
    schema_registry_url: str | None = Field(
        default=None, description="a Confluent-compatible schema registry (http[s]://host:port)"
    )
    schema_registry_username: str | None = Field(
        default=None, description="its basic-auth user (the password: schema_registry_password)"
    )
    schema_registry_password: str | None = Field(
        default=None, description="its basic-auth password (give it by environment variable)"
    )
    schema_registry_token: str | None = Field(
        default=None, description="a bearer token for it (give it by environment variable)"
    )
    schema_registry_ca: Path | None = Field(
        default=None, description="CA bundle of its TLS certificate (default: the system's)"
    )
    schema_registry_timeout_s: float = Field(
        default=5.0, gt=0, description="seconds one registry request may take"
    )
    schema_dir: Path | None = Field(
        default=None,
        description="serve schemas from this snapshot folder (tiered-gateway schemas snapshot) "
        "instead of a registry",
    )
    schema_cache_entries: int = Field(
        default=1000, ge=1, description="schemas kept decoded, by id (least recently used out)"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings  # no .env file, no secrets directory

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str | None) -> str | None:
        """The one check of every store kind (:func:`~gateway.storage.url.parse_store_url`);
        ``None`` only reaches here from :class:`CommandSettings`."""
        if value is not None:
            try:
                parse_store_url(value)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator(*LIST_FIELDS, mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):  # from the environment
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("key_pairs")
    @classmethod
    def _key_pair_specs(cls, value: list[str]) -> list[str]:
        from gateway.remote.keyring import parse_spec  # noqa: PLC0415

        ids: set[str] = set()
        for spec in value:
            try:
                key_id, _ = parse_spec(spec)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
            if key_id in ids:
                raise ValueError(f"key pair id {key_id!r} is given twice")
            ids.add(key_id)
        return value

    @field_validator("kafka_listener", "kafka_advertised_listener")
    @classmethod
    def _listener_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listener(value)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.request_timeout_ms > self.max_request_timeout_ms:
            raise ValueError(
                f"request_timeout_ms ({self.request_timeout_ms}) exceeds "
                f"max_request_timeout_ms ({self.max_request_timeout_ms})"
            )
        if self.default_max_bytes > self.max_response_bytes:
            raise ValueError(
                f"default_max_bytes ({self.default_max_bytes}) exceeds "
                f"max_response_bytes ({self.max_response_bytes})"
            )
        self._consistent_security()
        if self.schema_registry_url is not None and self.schema_dir is not None:
            raise ValueError("give schema_registry_url or schema_dir, not both")
        if self.layout == "local-tiered-storage" and self.key_prefix:
            raise ValueError("layout local-tiered-storage has no key_prefix (its own folders)")
        if self.metadata_source != "bucket" and not self.metadata_bootstrap:
            raise ValueError(
                f"metadata_source {self.metadata_source} needs metadata_bootstrap (the "
                "cluster to follow)"
            )
        return self

    def _consistent_security(self) -> None:
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

    @property
    def authentication(self) -> tuple[str, ...]:
        """The authentication methods configured: ``jwt``, ``mtls``, ``api_key``."""
        methods = (
            ("jwt", self.jwt_issuer is not None),
            ("mtls", self.tls_client_ca is not None),
            ("api_key", self.api_keys_file is not None),
        )
        return tuple(name for name, on in methods if on)

    def per_worker(self) -> Settings:
        """The settings of one of ``workers`` processes: the server-wide budgets of
        :data:`DIVIDED` divided (rounded down, at least 1 where a positive value was given)."""
        if self.workers == 1:
            return self
        parts = {name: _divide(getattr(self, name), self.workers) for name in DIVIDED}
        return self.model_copy(update=parts)

    def follow_config(self) -> FollowConfig | None:
        """The metadata topic to follow (``metadata_source`` topic or both), else None."""
        if self.metadata_source == "bucket" or not self.metadata_bootstrap:
            return None
        client = security_settings(
            self.metadata_security_protocol,
            self.metadata_sasl_mechanism,
            username=self.metadata_sasl_username,
            password=self.metadata_sasl_password,
            token_file=self.metadata_oauth_token_file,
            cafile=self.metadata_ssl_cafile,
            certfile=self.metadata_ssl_certfile,
            keyfile=self.metadata_ssl_keyfile,
        )
        return FollowConfig(
            self.metadata_bootstrap,
            self.metadata_topic_name,
            tuple(self.metadata_topics),
            client,
        )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.retry_max_attempts,
            base_delay=self.retry_base_delay_s,
            max_delay=self.retry_max_delay_s,
            attempt_timeout=self.retry_attempt_timeout_s,
        )

    def hedge_policy(self) -> HedgePolicy:
        return HedgePolicy(after_s=self.hedge_after_ms / 1000, max_fraction=self.hedge_max_fraction)

    @property
    def console_on(self) -> bool:
        """Whether ``/ui`` is served: as ``console`` says, else on loopback or with
        authentication (a console open to the network needs it, as the API does)."""
        if self.console is not None:
            return self.console
        return self.loopback or bool(self.authentication)

    @property
    def loopback(self) -> bool:
        """Whether ``host`` only accepts local connections."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name: it may resolve to anything


def parse_listener(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for an IPv6 address) -> (host, port); ``ValueError``
    naming what is wrong."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9092)")
    return host, int(port)


def _divide(value: int | float, n: int) -> int | float:
    if isinstance(value, float):
        return value / n
    return max(1, value // n) if value > 0 else value


def flag_name(field: str) -> str:
    """The command-line flag of a setting."""
    return _FLAG_NAMES.get(field, "--" + field.replace("_", "-"))


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def describe(field: str) -> str:
    """A setting in its three spellings, for messages."""
    return f"{field!r} ({flag_name(field)}, {env_name(field)}, {field} in the TOML file)"


def _message(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        loc = error.get("loc", ())
        field = str(loc[0]) if loc else ""
        message = error["msg"].removeprefix("Value error, ")
        if field in Settings.model_fields:
            shown = error.get("input")
            shown_ok = isinstance(shown, str | int | float) and len(repr(shown)) <= _MAX_SHOWN_INPUT
            if field != "key_pairs" and shown_ok:
                message += f" (got {shown!r})"
            problems.append(f"setting {describe(field)}: {message}")
        elif field:  # a key that is no setting (TOML file or keyword)
            problems.append(f"unknown setting {field!r}")
        else:
            problems.append(message)  # a check across settings, which names them
    return "invalid configuration: " + "; ".join(problems)


def read_toml(path: Path) -> dict[str, Any]:
    """The settings of a TOML file (flat keys, or under a ``[tiered_gateway]`` table)."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigurationError(
            f"config file {path}: cannot read it: {exc.strerror or type(exc).__name__}"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path}: not valid TOML: {exc}") from exc
    table = data.get("tiered_gateway", data)
    if not isinstance(table, dict):
        raise ConfigurationError(f"config file {path}: [tiered_gateway] must be a table")
    return table


class CommandSettings(Settings):
    """The settings as the commands other than ``serve`` read them: the same fields, sources and
    checks, but ``store`` may be absent (``catalog ls`` reads a catalog without one; a command
    that needs a store says so itself, naming the three spellings)."""

    store: str | None = Field(  # type: ignore[assignment]
        default=None, description="the bucket: file:///abs/dir or s3://bucket"
    )


_S = TypeVar("_S", bound=Settings)


def _load(model: type[_S], overrides: Mapping[str, Any] | None, config_file: Path | None) -> _S:
    """``model`` from the flags given (``overrides``), the environment, the TOML file and the
    defaults, in that precedence: the one loader of every command."""
    if config_file is None and os.environ.get(CONFIG_ENV):
        config_file = Path(os.environ[CONFIG_ENV])
    file_values = read_toml(config_file) if config_file is not None else {}

    class _WithFile(model):  # type: ignore[valid-type,misc]
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, InitSettingsSource(settings_cls, file_values)

    try:
        loaded = _WithFile(**dict(overrides or {}))
    except ValidationError as exc:
        where = f" (config file {config_file})" if config_file is not None else ""
        raise ConfigurationError(_message(exc) + where) from None
    return model.model_construct(_fields_set=loaded.model_fields_set, **loaded.model_dump())


def load_settings(
    overrides: Mapping[str, Any] | None = None, config_file: Path | None = None
) -> Settings:
    """Settings from ``overrides`` (the command-line flags that were given), the environment,
    the TOML ``config_file`` (or the file named by ``TIERED_GATEWAY_CONFIG``), the defaults."""
    return _load(Settings, overrides, config_file)


def load_command_settings(
    overrides: Mapping[str, Any] | None = None, config_file: Path | None = None
) -> CommandSettings:
    """:func:`load_settings` for the commands other than ``serve``: the same sources,
    precedence and checks (a file ``serve`` rejects is rejected here too), ``store`` optional."""
    return _load(CommandSettings, overrides, config_file)


def settings_for(**values: Any) -> Settings:
    """Settings from keyword values, the environment and the defaults (no TOML file); the
    error names the setting like :func:`load_settings` does."""
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigurationError(_message(exc)) from None
