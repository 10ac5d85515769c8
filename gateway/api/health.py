"""``/healthz`` (alive), ``/readyz`` (the catalog is loaded) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from gateway.api.models import Status, error_responses
from gateway.api.observe import HttpMetrics
from gateway.api.params import ServiceDep
from gateway.errors import NotReadyError


def router(metrics: HttpMetrics) -> APIRouter:
    r = APIRouter(tags=["operations"])

    @r.get("/healthz", response_model=Status)
    async def healthz() -> Status:
        """200 while the process serves HTTP."""
        return Status(status="ok")

    @r.get("/readyz", response_model=Status, responses=error_responses(503))
    async def readyz(service: ServiceDep) -> Status:
        """200 once the catalog has been loaded, else 503 (retriable)."""
        if not service.ready():
            raise NotReadyError("the catalog of remote segments is not loaded yet")
        return Status(status="ready")

    @r.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
    )
    async def prometheus(service: ServiceDep) -> Response:
        """HTTP latency by route and status, then the core's counters (GETs, caches, ...)."""
        body = generate_latest(metrics.registry) + service.metrics_text()
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return r
