"""The follower's Kafka client: kafka-python's consumer and admin client behind
:class:`gateway.metadata.follow.Consumer`.

Security settings pass through under kafka-python's names (``security_protocol`` PLAINTEXT,
SSL, SASL_PLAINTEXT or SASL_SSL; ``sasl_mechanism`` PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or
OAUTHBEARER; ``sasl_plain_username``/``sasl_plain_password`` for PLAIN and SCRAM;
``sasl_oauth_token_provider`` for OAUTHBEARER; ``ssl_cafile``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``). No group is joined and nothing is
committed: positions live in the catalog.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.net.sasl.oauth import AbstractTokenProvider

from gateway.errors import ConfigurationError, NotReadyError
from gateway.metadata.follow import FollowConfig, served_metadata_partitions

__all__ = ["KafkaPythonConsumer", "connect", "security_settings"]

_CLIENT_ID = "tiered-gateway-rlmm"
_TIMEOUTS = {"request_timeout_ms": 30_000}


class KafkaPythonConsumer:
    """One metadata topic through kafka-python (blocking: the follower's thread only)."""

    def __init__(self, config: FollowConfig) -> None:
        self._config = config
        self._topic = config.topic
        self._kwargs: dict[str, Any] = {
            "bootstrap_servers": config.bootstrap.split(","),
            "client_id": _CLIENT_ID,
            **_TIMEOUTS,
            **dict(config.client),
        }
        self._consumer = KafkaConsumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=5000,
            **self._kwargs,
        )

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self._topic, partition)

    def partitions(self) -> list[int]:
        found = self._consumer.partitions_for_topic(self._topic)
        if not found:
            raise NotReadyError(
                f"the cluster at {self._config.bootstrap} has no topic {self._topic!r} (yet): "
                "is remote.log.storage.system.enable on?"
            )
        return sorted(found)

    def served_partitions(self, topics: Iterable[str], count: int) -> set[int]:
        admin = KafkaAdminClient(**self._kwargs)
        try:
            described = admin.describe_topics(list(topics))
        finally:
            admin.close()
        ids: dict[str, tuple[uuid.UUID, int]] = {}
        for entry in described:
            if entry.get("error_code", 0) != 0:
                continue  # a served topic the cluster does not have (yet): nothing to follow
            topic_id = entry["topic_id"]
            if not isinstance(topic_id, uuid.UUID):
                topic_id = uuid.UUID(str(topic_id))
            ids[entry["name"]] = (topic_id, len(entry["partitions"]))
        return served_metadata_partitions(ids, count)

    def assign(self, partitions: dict[int, int]) -> None:
        self._consumer.assign([self._tp(p) for p in partitions])
        for p, offset in partitions.items():
            self._consumer.seek(self._tp(p), offset)

    def end_offsets(self, partitions: list[int]) -> dict[int, int]:
        found = self._consumer.end_offsets([self._tp(p) for p in partitions])
        return {tp.partition: int(offset) for tp, offset in found.items()}

    def poll(self, timeout_ms: int) -> dict[int, list[tuple[int, bytes | None]]]:
        batches = self._consumer.poll(timeout_ms=timeout_ms)
        return {
            tp.partition: [(r.offset, r.value) for r in records] for tp, records in batches.items()
        }

    def close(self) -> None:
        self._consumer.close(autocommit=False)


def connect(config: FollowConfig) -> KafkaPythonConsumer:
    """A consumer of ``config``'s cluster (raises when it cannot be reached). kafka-python's
    own INFO lines (every connection it opens) stay out of the gateway's log: the follower
    logs what matters, and its faults."""
    client_log = logging.getLogger("kafka")
    if client_log.getEffectiveLevel() < logging.WARNING:
        client_log.setLevel(logging.WARNING)
    return KafkaPythonConsumer(config)


class _TokenFile(AbstractTokenProvider):  # type: ignore[misc]
    """OAUTHBEARER: the token in a file, read again at each login (a sidecar renews it)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path

    def token(self) -> str:
        return self._path.read_text().strip()

    def extensions(self) -> dict[str, str]:
        return {}


def security_settings(
    protocol: str,
    mechanism: str | None,
    *,
    username: str | None = None,
    password: str | None = None,
    token_file: Path | None = None,
    cafile: Path | None = None,
    certfile: Path | None = None,
    keyfile: Path | None = None,
) -> dict[str, Any]:
    """kafka-python's client settings for a security protocol; a mechanism without what it
    needs is a :class:`~gateway.errors.ConfigurationError` naming it."""
    out: dict[str, Any] = {"security_protocol": protocol}
    if protocol.startswith("SASL_"):
        if mechanism is None:
            raise ConfigurationError(f"metadata_security_protocol {protocol} needs a mechanism")
        out["sasl_mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            if token_file is None:
                raise ConfigurationError("OAUTHBEARER needs metadata_oauth_token_file")
            out["sasl_oauth_token_provider"] = _TokenFile(token_file)
        else:
            if username is None or password is None:
                raise ConfigurationError(f"SASL {mechanism} needs a username and a password")
            out |= {"sasl_plain_username": username, "sasl_plain_password": password}
    files = {"ssl_cafile": cafile, "ssl_certfile": certfile, "ssl_keyfile": keyfile}
    out |= {k: str(v) for k, v in files.items() if v is not None}
    return out
