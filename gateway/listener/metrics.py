"""The Kafka listener's Prometheus metrics, shown on the HTTP API's ``/metrics``.

Per API (Kafka's name: ``Fetch``, ``Metadata``, ...), version and error (the first error code
an answer carries, by Kafka's name, ``NONE`` when none): requests and their latency until the
answer is written; response bytes per API; connections open, accepted and refused (beyond
``max_connections``); SASL authentications, re-authentications (KIP-368) and failures by
mechanism; connections closed for a frame that is not a request this listener takes, and for
a request past the end of their SASL session; requests held back for their principal's rate,
and for how long. Every label takes a bounded set of values
(no topic, no principal, no client id).

The registry belongs to one listener; :func:`gateway.listener.server.listening` adds it to the
collectors the app's ``/metrics`` shows beside the service core's for as long as the listener
runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric

PREFIX: Final = "tiered_gateway_kafka_"
LATENCY_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                          1.0, 2.5, 5.0, 10.0, 30.0)  # fmt: skip


class ListenerMetrics:
    """See the module docstring."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            PREFIX + "requests",
            "Kafka requests answered, by API, version and error (the first error code of the "
            "answer, NONE when none)",
            ["api", "version", "error"],
            registry=r,
        )
        self.latency = Histogram(
            PREFIX + "request_duration_seconds",
            "Kafka request latency until the answer is written, by API",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.response_bytes = Counter(
            PREFIX + "response_bytes",
            "Bytes of Kafka answers written, by API",
            ["api"],
            registry=r,
        )
        self.connections = Gauge(PREFIX + "connections", "Kafka connections open", registry=r)
        self.accepted = Counter(
            PREFIX + "connections_accepted", "Kafka connections accepted", registry=r
        )
        self.refused = Counter(
            PREFIX + "connections_refused",
            "Kafka connections closed at once: max_connections were open",
            registry=r,
        )
        self.malformed = Counter(
            PREFIX + "connections_closed_malformed",
            "Kafka connections closed for a frame that is not a request the listener takes "
            "(oversized, undecodable, an API or version not served, a request before SASL "
            "authentication)",
            registry=r,
        )
        self.authentications = Counter(
            PREFIX + "authentications",
            "Successful SASL authentications, by mechanism",
            ["mechanism"],
            registry=r,
        )
        self.auth_failures = Counter(
            PREFIX + "authentication_failures",
            "Failed SASL exchanges (a wrong key or token, an unsupported mechanism, out of "
            "order), by mechanism (none: before one was chosen)",
            ["mechanism"],
            registry=r,
        )

        self.reauthentications = Counter(
            PREFIX + "reauthentications",
            "Successful SASL re-authentications (KIP-368) of an authenticated connection, which "
            "renew its session, by mechanism",
            ["mechanism"],
            registry=r,
        )
        self.session_expiries = Counter(
            PREFIX + "session_expiries",
            "Kafka connections closed for a request past the end of their SASL session "
            "(kafka_reauth_ms, or the JWT's exp) with no re-authentication, by mechanism",
            ["mechanism"],
            registry=r,
        )

        self.throttled = Counter(
            PREFIX + "throttled_requests",
            "Kafka requests held back because their principal was over rate_limit_per_s (the "
            "HTTP API's per-principal limit, shared with it), by API",
            ["api"],
            registry=r,
        )
        self.throttle_seconds = Counter(
            PREFIX + "throttle_seconds",
            "Seconds Kafka connections were held back (muted) for their principal's rate",
            registry=r,
        )

    def collect(self) -> Iterator[Metric]:
        """These metrics without ``_created`` series (as the HTTP metrics)."""
        for metric in self.registry.collect():
            created = metric.name + "_created"
            metric.samples = [s for s in metric.samples if s.name != created]
            yield metric
