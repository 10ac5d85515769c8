"""Request metrics and the last line of defence, as one pure ASGI middleware.

Every HTTP request is timed into a histogram labelled by method, route template (never the raw
path, whose topics and offsets would explode the label space) and status. An exception no
handler took is logged with its traceback and answered with a generic 500 when the response
has not started yet; the server never sees it. The registry belongs to one app (no global).
"""

from __future__ import annotations

import logging
import time
from typing import Final

from prometheus_client import CollectorRegistry, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.api.errors import error_response

log = logging.getLogger(__name__)

UNMATCHED: Final = "<unmatched>"
LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class HttpMetrics:
    """The HTTP layer's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram(
            "tiered_gateway_http_request_duration_seconds",
            "HTTP request latency until the last body byte, by route template and status",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "tiered_gateway_http_requests_in_flight",
            "HTTP requests being served",
            registry=self.registry,
        )


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        response_started = False

        async def observe_send(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = int(message["status"])
                response_started = True
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, observe_send)
        except Exception as exc:
            log.exception("unhandled error serving %s %s", scope["method"], scope["path"])
            if not response_started:
                await error_response(exc)(scope, receive, observe_send)
            # else: the response is cut short; the server closes the connection
        finally:
            self.metrics.in_flight.dec()
            self.metrics.latency.labels(
                scope["method"], route_template(scope), str(status)
            ).observe(time.perf_counter() - started)
