"""The listener's metrics: requests by API, version and error; latency; response bytes;
connections; SASL outcomes; and their place on ``/metrics`` beside the core's counters."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path

from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.api.observe import HttpMetrics
from gateway.listener.metrics import ListenerMetrics
from tests.unit.listener.secure import call, closed, connect, secured_listener, token
from tests.unit.listener.test_sasl import _authenticate, _bearer, _handshake


def _value(metrics: ListenerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_requests_bytes_connections_and_authentications_are_counted(tmp_path: Path) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, _):
            m = listener.metrics
            conn = await connect(listener)
            await call(conn, ApiVersionsRequest[0](), ApiVersionsResponse[0], 0)
            assert _value(m, "tiered_gateway_kafka_connections") == 1
            await _handshake(conn, "OAUTHBEARER")
            await _authenticate(conn, _bearer(token("bob")))
            r = ListOffsetsRequest[7]
            part = r.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)
            message = r(replica_id=-1, isolation_level=0,
                        topics=[r.ListOffsetsTopic(name="t", partitions=[part])])  # fmt: skip
            await call(conn, message, ListOffsetsResponse[7], 7)
            bad = await connect(listener)  # a wrong token
            await _handshake(bad, "OAUTHBEARER")
            await _authenticate(bad, _bearer("not.a.jwt"))
            assert await closed(bad[0])
            bad[1].close()
            conn[1].close()
            while listener.connections:
                await asyncio.sleep(0.01)
            requests = "tiered_gateway_kafka_requests_total"
            assert _value(m, requests, api="ApiVersions", version="0", error="NONE") == 1
            assert _value(m, requests, api="SaslHandshake", version="1", error="NONE") == 2
            assert _value(m, requests, api="SaslAuthenticate", version="2", error="NONE") == 1
            failed = "SASL_AUTHENTICATION_FAILED"
            assert _value(m, requests, api="SaslAuthenticate", version="2", error=failed) == 1
            assert _value(m, requests, api="ListOffsets", version="7", error="NONE") == 1
            assert _value(m, "tiered_gateway_kafka_request_duration_seconds_count",
                          api="ListOffsets") == 1  # fmt: skip
            assert _value(m, "tiered_gateway_kafka_response_bytes_total", api="ListOffsets") > 0
            auth = "tiered_gateway_kafka_authentications_total"
            assert _value(m, auth, mechanism="OAUTHBEARER") == 1
            failures = "tiered_gateway_kafka_authentication_failures_total"
            assert _value(m, failures, mechanism="OAUTHBEARER") == 1
            assert _value(m, "tiered_gateway_kafka_connections") == 0
            assert _value(m, "tiered_gateway_kafka_connections_accepted_total") == 2

    asyncio.run(run())


def test_an_unauthenticated_request_is_counted_as_closed(tmp_path: Path) -> None:
    async def run() -> None:
        async with secured_listener(tmp_path) as (listener, _):
            reader, writer = await connect(listener)
            writer.write(struct.pack(">ihhih", 8, 3, 12, 1, -1))  # Metadata, before SASL
            assert await closed(reader)
            writer.close()
            name = "tiered_gateway_kafka_connections_closed_malformed_total"
            assert _value(listener.metrics, name) == 1

    asyncio.run(run())


class _Core(Collector):
    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("tiered_gateway_remote_gets", "GETs", value=3)


def test_the_metrics_show_beside_the_core_collector_on_metrics() -> None:
    metrics = ListenerMetrics()
    metrics.requests.labels("Fetch", "12", "NONE").inc()
    text = generate_latest(HttpMetrics().exposition(_Core(), metrics)).decode()
    assert "tiered_gateway_remote_gets_total 3.0" in text
    assert 'tiered_gateway_kafka_requests_total{api="Fetch",error="NONE",version="12"} 1.0' in (
        text
    )
    assert "_created" not in text
