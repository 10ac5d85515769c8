"""The read-only Kafka-protocol listener (``docs/kafka-listener.md``)."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class KafkaListenerSettings(BaseModel):
    """Where the Kafka listener binds, what it advertises, how long a SASL session lasts."""

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

    @field_validator("kafka_listener", "kafka_advertised_listener")
    @classmethod
    def _listener_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listener(value)
        return value


def parse_listener(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for an IPv6 address) -> (host, port); ``ValueError``
    naming what is wrong."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9092)")
    return host, int(port)
