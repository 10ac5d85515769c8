"""Request metrics, the request id and the last line of defence, as one pure ASGI middleware.

Every HTTP request is timed into a histogram labelled by method, route template (never the raw
path, whose topics and offsets would explode the label space) and status. A request to a
``/v1/topics/{topic}/...`` route is also counted, with its response body bytes, by topic,
endpoint (the route's name) and outcome (``ok``, ``client_error``, ``server_error``); the topic
label is the name only when the catalog holds it, else :data:`OTHER_TOPIC`, so clients cannot
grow the label space. Each request runs with a request id (see :mod:`gateway.api.logs`). An
exception no handler took is logged with its traceback and answered with a generic 500 when
the response has not started yet; the server never sees it. The registry belongs to one app
(no global); no ``_created`` series are exposed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Final
from urllib.parse import parse_qs

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import __version__
from gateway.api.build import build_commit
from gateway.api.errors import error_response
from gateway.api.logs import REQUEST_ID_HEADER, new_request_id, request_id
from gateway.errors import GatewayError
from gateway.security.audit import AuditEvent, AuditLog
from gateway.service.protocol import Service

log = logging.getLogger(__name__)

UNMATCHED: Final = "<unmatched>"
OTHER_TOPIC: Final = "<other>"  # never a Kafka topic name: '<' and '>' are not legal in one
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
        Info(
            "tiered_gateway_build",
            "The running build: version and git commit (unknown when not known)",
            registry=self.registry,
        ).info({"version": __version__, "commit": build_commit()})
        self.topic_requests = Counter(
            "tiered_gateway_topic_requests_total",
            "Requests to a topic's routes, by topic (in the catalog, else <other>), endpoint "
            "and outcome",
            ["topic", "endpoint", "outcome"],
            registry=self.registry,
        )
        self.topic_bytes = Counter(
            "tiered_gateway_topic_response_bytes_total",
            "Response body bytes of a topic's routes, by topic, endpoint and outcome",
            ["topic", "endpoint", "outcome"],
            registry=self.registry,
        )

    def exposition(self, *more: Collector) -> Collector:
        """These metrics and ``more``, without ``_created`` series, for ``generate_latest``."""
        return _WithoutCreated((self.registry, *more))


class _WithoutCreated(Collector):
    def __init__(self, sources: tuple[Collector, ...]) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self._sources:
            for metric in source.collect():
                created = metric.name + "_created"
                metric.samples = [s for s in metric.samples if s.name != created]
                yield metric


def outcome(status: int) -> str:
    if status >= 500:
        return "server_error"
    return "client_error" if status >= 400 else "ok"


async def _topic_label(scope: Scope) -> str | None:
    """The topic label of a request to a topic's route (``None`` for other routes)."""
    topic = scope.get("path_params", {}).get("topic")
    if not isinstance(topic, str):
        return None
    service: Service | None = scope.get("state", {}).get("service")
    try:
        known = await service.catalog_topics() if service is not None else frozenset()
    except GatewayError:  # the catalog cannot be read now: the request is counted all the same
        known = frozenset()
    return topic if topic in known else OTHER_TOPIC


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, metrics: HttpMetrics, audit: AuditLog | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        response_started = False
        body_bytes = 0
        error_body = b""
        rid = new_request_id(_header(scope, REQUEST_ID_HEADER))
        token = request_id.set(rid)

        async def observe_send(message: Message) -> None:
            nonlocal status, response_started, body_bytes, error_body
            if message["type"] == "http.response.start":
                status = int(message["status"])
                response_started = True
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.encode(), rid.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                body_bytes += len(body)
                if status >= 400 and len(error_body) < _ERROR_BODY_MAX:
                    error_body += bytes(body[:_ERROR_BODY_MAX])
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
            try:
                await self._count_topic(scope, status, body_bytes)
                if self.audit is not None and scope["path"].startswith(DATA_PREFIX):
                    self._audit(
                        scope, status=status, body_bytes=body_bytes, rid=rid,
                        error_body=error_body,
                    )  # fmt: skip
            finally:
                request_id.reset(token)

    def _audit(
        self,
        scope: Scope,
        *,
        status: int,
        body_bytes: int,
        rid: str,
        error_body: bytes,
    ) -> None:
        """The audit line of a request to a topic's route (see :mod:`gateway.security.audit`)."""
        assert self.audit is not None
        params = scope.get("path_params", {})
        client = scope.get("client")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        state = scope.get("state", {})
        event = AuditEvent(
            principal=state.get("principal"),
            source=client[0] if client else None,
            method=scope["method"],
            path=scope["path"],
            status=status,
            bytes=body_bytes,
            request_id=rid,
            topic=params.get("topic"),
            partition=_int(params.get("partition")),
            offset=_int(query.get("offset", [None])[0]),
            next_offset=_int(state.get("next_offset")),
            error_code=_error_code(error_body) if status >= 400 else None,
        )
        try:
            self.audit.write(event)
        except OSError:
            log.exception("the audit log cannot be written")

    async def _count_topic(self, scope: Scope, status: int, body_bytes: int) -> None:
        topic = await _topic_label(scope)
        if topic is None:
            return
        labels = (topic, getattr(scope.get("route"), "name", UNMATCHED), outcome(status))
        self.metrics.topic_requests.labels(*labels).inc()
        self.metrics.topic_bytes.labels(*labels).inc(body_bytes)


DATA_PREFIX: Final = "/v1/"  # the data routes: what the audit log records
_ERROR_BODY_MAX: Final = 4096  # an error body is a small JSON object: its start names the code


def _int(value: object) -> int | None:
    try:
        return int(value) if isinstance(value, str | int) else None
    except ValueError:
        return None


def _error_code(body: bytes) -> str | None:
    try:
        code = orjson.loads(body).get("error_code")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return code if isinstance(code, str) else None


def _header(scope: Scope, name: str) -> str | None:
    wanted = name.encode()
    for key, value in scope.get("headers", []):
        if key.lower() == wanted:
            return bytes(value).decode("latin-1")
    return None
