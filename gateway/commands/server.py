"""uvicorn for ``serve`` (one process, or each worker of :mod:`gateway.commands.workers`): its
configuration (:func:`uvicorn_config`) and its server, told to drain: :class:`DrainingServer`
sets an event when it is asked to stop (SIGTERM, SIGINT), which the app reads
(``create_app(..., drain=...)``) to end its NDJSON streams after their current page with their
closing line, while uvicorn waits for the requests in flight for ``shutdown_grace_s`` (its
``timeout_graceful_shutdown``)."""

from __future__ import annotations

import ssl
import threading
from types import FrameType
from typing import Any

import uvicorn

from gateway.config import Settings


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: threading.Event) -> None:
        super().__init__(config)
        self.drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.drain.set()
        super().handle_exit(sig, frame)


def uvicorn_config(app: Any, settings: Settings) -> uvicorn.Config:
    """The uvicorn configuration of ``serve`` (one process or a worker)."""
    from gateway.api.transport import guarded_protocol  # noqa: PLC0415

    tls: dict[str, Any] = {}
    if settings.tls_certfile is not None:
        tls = {"ssl_certfile": str(settings.tls_certfile), "ssl_keyfile": str(settings.tls_keyfile)}
        if settings.tls_client_ca is not None:
            required = settings.tls_client_cert_required
            tls["ssl_ca_certs"] = str(settings.tls_client_ca)
            tls["ssl_cert_reqs"] = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,  # uvicorn's loggers go through configure_logging's one handler
        lifespan="on",
        server_header=False,
        http=guarded_protocol(settings.header_timeout_s, settings.max_header_bytes),
        timeout_graceful_shutdown=settings.shutdown_grace_s,
        # The client address feeds ACL hosts and the audit log: believe X-Forwarded-For only
        # from the proxies named (uvicorn's default trusts any local process).
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
        limit_concurrency=settings.max_connections,
        **tls,
    )
