"""The HTTP server: its address and workers, its requests' budgets, what it answers."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode

from gateway.config.units import ByteSize, KiB, MiB, usable_cpus


class ServingSettings(BaseModel):
    """What ``serve`` listens on and how much a request may take."""

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
    shutdown_grace_s: int = Field(
        default=25,
        ge=0,
        description="on SIGTERM: seconds in-flight requests have to finish (NDJSON streams end "
        "after their current page) before they are cut; keep it under the orchestrator's grace",
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

    @property
    def loopback(self) -> bool:
        """Whether ``host`` only accepts local connections."""
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or ``localhost``) only accepts local connections; a host
    name is not (it may resolve to anything). The one rule of the HTTP server, the Kafka
    listener and the JWKS URL check."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
