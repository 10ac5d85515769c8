"""The app factory: :func:`create_app` wires the routers; its lifespan owns the service.

The lifespan enters ``service_factory(settings)`` (default
:func:`gateway.service.open.open_service`, which owns the store clients, caches and thread
pool) and hands the service and the settings to every request through the lifespan state;
nothing lives in module globals. ``/docs`` and ``/redoc`` load their scripts from the
``fastapi-offline`` package (under ``/static-offline-docs``), never from a CDN.
:func:`openapi_schema` is the contract; ``python -m gateway.api`` writes it to ``openapi.yaml``
(:mod:`gateway.api.schema`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any, Final

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline
from prometheus_client.registry import Collector

from gateway import __version__
from gateway.api import health, records, topics
from gateway.api.errors import install_error_handlers
from gateway.api.hosts import HostAllowList, HostMiddleware, allowed_hosts
from gateway.api.logs import REQUEST_ID_HEADER
from gateway.api.models import ErrorBody
from gateway.api.observe import HttpMetrics, ObserveMiddleware
from gateway.config import Settings
from gateway.errors import ConfigurationError
from gateway.schemas.cache import schemas_for
from gateway.security.access import Access, access_for
from gateway.security.audit import AuditLog
from gateway.service.admission import ByteBudget, LoopLag, RequestGate
from gateway.service.memory import collector_settled, heap_returned
from gateway.service.metrics import AdmissionCollector
from gateway.service.protocol import Service

log = logging.getLogger(__name__)

ServiceFactory = Callable[[Settings], AbstractAsyncContextManager[Service]]
Companion = Callable[
    [Service, Settings, ByteBudget, Access, AuditLog | None, list[Collector]],
    AbstractAsyncContextManager[object],
]
"""Another server on the same service and event loop, entered by the lifespan once the
service is open (``serve --kafka-listener``: :func:`gateway.listener.server.listening`): it
shares the app's service, settings, memory budget, access rules (one JWKS cache, one ACL
watcher) and audit log, and adds its collectors to the list ``/metrics`` shows."""
OPENAPI_FILE: Final = "openapi.yaml"
DESCRIPTION: Final = """\
Kafka tiered-storage (KIP-405) history served straight from the bucket: fetch by
topic/partition/offset and ListOffsets by timestamp, with Kafka's semantics.

Every error is `{"error_code", "message", "retriable"}` plus `parameter` (invalid_request) or
`log_start_offset`/`log_end_offset` (offset_out_of_range); retriable errors carry Retry-After.
Every response carries `X-Request-ID` (the client's, when it sent a short token; else a new
one), which the log lines of that request name.
"""
SERVER_ERROR: Final = {
    "model": ErrorBody,
    "description": "a fault of the gateway's configuration or code, not retriable: "
    "`key_not_configured` (an encrypted segment's key pair id is not configured; the message "
    "names the id and the `--key-pair ID=PATH` to add), `configuration_error`, "
    "`internal_error`",
}


EXPOSED_HEADERS: Final = [*records.RAW_HEADERS, "X-Request-ID", "Retry-After"]
"""What a cross-origin page may read of a response (with cors_origins)."""


def _default_factory() -> ServiceFactory:
    from gateway.service.open import open_service  # noqa: PLC0415 - the core is heavy

    return open_service


def warm_up() -> None:
    """Compile (or load from numba's cache) the record loops before the first request, so no
    request, /healthz included, waits for them; a platform where they fail does not start."""
    try:
        from gateway.api import jsonkernel  # noqa: PLC0415 - numba only when it is used

        jsonkernel.warm_up()
    except Exception as exc:
        raise ConfigurationError(
            f"the compiled record loops failed to load ({exc!r}); serve with "
            "--no-compiled-records (TIERED_GATEWAY_COMPILED_RECORDS=false) for the Python path"
        ) from exc


def create_app(
    settings: Settings,
    service_factory: ServiceFactory | None = None,
    *,
    drain: threading.Event | None = None,
    companion: Companion | None = None,
    own_process: bool = False,
) -> FastAPI:
    """The ASGI app for ``settings``; ``service_factory`` opens the :class:`Service`;
    ``drain``, once set, says the server is stopping (NDJSON streams end after their page);
    ``companion`` runs beside the app on its service (:data:`Companion`); ``own_process``: the
    app is the process's (``serve``), which settles the garbage collector once the catalog is
    loaded (:func:`~gateway.service.memory.collector_settled`), not done in a host process."""
    draining = drain if drain is not None else threading.Event()
    metrics = HttpMetrics()
    audit = None if settings.audit_log is None else AuditLog.open(settings.audit_log)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        factory = service_factory if service_factory is not None else _default_factory()
        access = access_for(settings)  # bad ACL, key or JWKS files stop the start here
        await access.start()
        async with factory(settings) as service:
            log.info("serving %s (key prefix %r)", settings.store, settings.key_prefix)
            if settings.compiled_records:  # off the loop, while the first scan runs
                await asyncio.get_running_loop().run_in_executor(None, warm_up)
            wait_s = settings.queue_wait_ms / 1000
            budget = ByteBudget(settings.inflight_bytes, max_wait_s=wait_s)
            lag = LoopLag(settings.max_loop_lag_ms / 1000)
            gate = RequestGate(settings.max_active_pages, lag=lag)
            lag_task = asyncio.create_task(lag.run(), name="loop-lag")
            settle = (
                asyncio.create_task(collector_settled(service), name="collector-settled")
                if own_process
                else None
            )
            schemas = schemas_for(settings)
            threshold = settings.malloc_mmap_threshold or None
            # /metrics shows these beside the core's: admission's, then a companion's
            collectors: list[Collector] = [AdmissionCollector(budget, gate)]
            beside = (
                companion(service, settings, budget, access, audit, collectors)
                if companion
                else nullcontext()
            )
            try:  # freed response memory back to the system
                async with heap_returned(budget, mmap_threshold=threshold), beside:
                    yield {
                        "service": service,
                        "settings": settings,
                        "budget": budget,
                        "gate": gate,
                        "access": access,
                        "drain": draining,
                        "collectors": collectors,
                        "schemas": schemas,
                    }
            finally:
                if schemas is not None:
                    await schemas.aclose()
                lag_task.cancel()
                if settle is not None:
                    settle.cancel()
        if audit is not None:
            audit.close()
        log.info("service closed")

    app = FastAPIOffline(
        title="tiered-gateway",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        responses={500: SERVER_ERROR},
    )
    install_error_handlers(app)
    # Starlette wraps the last added outermost: Observe sees (counts, audits) every answer,
    # the Host allow-list's refusals included, and the Host check comes before CORS's
    # preflight answers.
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET"],
            allow_headers=["Authorization", "X-API-Key", REQUEST_ID_HEADER],
            expose_headers=EXPOSED_HEADERS,
        )
    app.add_middleware(HostMiddleware, allowed=HostAllowList(allowed_hosts(settings)))
    app.add_middleware(ObserveMiddleware, metrics=metrics, audit=audit)
    app.include_router(health.router(metrics))
    app.include_router(topics.router())
    app.include_router(records.router())
    if settings.console_on:
        from gateway.api import console  # noqa: PLC0415 - Jinja2 only when it is served

        app.include_router(console.router())
    return app


def openapi_schema() -> dict[str, Any]:
    """The app's OpenAPI document (it does not depend on the settings)."""
    return create_app(Settings.model_construct(store="file:///")).openapi()
