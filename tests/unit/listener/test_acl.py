"""The HTTP API's ACLs on the Kafka APIs: ``Describe`` for Metadata and ListOffsets, ``Read``
for Fetch; a refused topic is ``TOPIC_AUTHORIZATION_FAILED`` whether or not it exists, and
is never read; the start checks (off loopback only with authentication)."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from gateway.config import settings_for
from gateway.errors import ConfigurationError
from gateway.listener import codes
from gateway.listener.context import Context
from gateway.listener.dispatch import answer
from gateway.listener.sasl import Session
from gateway.listener.server import KafkaListener
from gateway.listener.startup import check_listener
from gateway.security.audit import AuditLog
from tests.fakes.service import FakeService
from tests.unit.listener.secure import call, connect, secured
from tests.unit.listener.support import (
    END,
    TOPIC,
    TOPIC_ID,
    context,
    fake_service,
    fetches,
    request,
    unframe,
)

MISSING = "t.missing"  # alice may describe it, bob and ci may not


def _ctx(folder: Path, service: FakeService) -> Context:
    sec = asyncio.run(secured(folder))
    return replace(context(service, **sec.settings_args), access=sec.access)


def _ask(ctx: Context, who: str, message: Any, response_class: Any, version: int) -> Any:
    session = Session("127.0.0.1", who)
    reply = asyncio.run(answer(ctx, request(message), session))
    return response_class.decode(unframe(reply), version=version, header=True)


def _metadata(ctx: Context, who: str, names: list[str] | None) -> list[tuple[str, int]]:
    r = MetadataRequest[12]
    topics = None if names is None else [r.MetadataRequestTopic(name=n) for n in names]
    response = _ask(ctx, who, r(topics=topics), MetadataResponse[12], 12)
    return [(t.name, t.error_code) for t in response.topics]


@pytest.mark.parametrize(
    ("who", "missing"),
    [
        ("User:alice", codes.UNKNOWN_TOPIC_OR_PARTITION),  # allowed to know it is not there
        ("User:bob", codes.TOPIC_AUTHORIZATION_FAILED),
    ],
)
def test_metadata_shows_what_a_principal_may_describe(
    tmp_path: Path, who: str, missing: int
) -> None:
    ctx = _ctx(tmp_path, fake_service())
    assert _metadata(ctx, who, None) == [(TOPIC, codes.NONE)]
    assert _metadata(ctx, who, [TOPIC, MISSING]) == [(TOPIC, codes.NONE), (MISSING, missing)]


def test_a_refused_topic_answers_as_a_missing_one(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, fake_service())
    assert _metadata(ctx, "User:ci", None) == []  # listed: none
    failed = codes.TOPIC_AUTHORIZATION_FAILED
    assert _metadata(ctx, "User:ci", [TOPIC, MISSING]) == [(TOPIC, failed), (MISSING, failed)]
    r = MetadataRequest[12]
    for tid in (TOPIC_ID, uuid.uuid4()):  # by id: refused and unknown alike
        asked = [r.MetadataRequestTopic(topic_id=tid, name=None)]
        response = _ask(ctx, "User:ci", r(topics=asked), MetadataResponse[12], 12)
        assert [(t.error_code, t.partitions) for t in response.topics] == [
            (codes.UNKNOWN_TOPIC_ID, [])
        ]


def _list_offsets(ctx: Context, who: str) -> list[tuple[str, int, int]]:
    r = ListOffsetsRequest[7]
    part = r.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=-1, current_leader_epoch=-1
    )
    topics = [r.ListOffsetsTopic(name=n, partitions=[part]) for n in (TOPIC, MISSING)]
    message = r(replica_id=-1, isolation_level=0, topics=topics)
    response = _ask(ctx, who, message, ListOffsetsResponse[7], 7)
    return [(t.name, p.error_code, p.offset) for t in response.topics for p in t.partitions]


def test_list_offsets_needs_describe(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, fake_service())
    unknown = codes.UNKNOWN_TOPIC_OR_PARTITION
    failed = codes.TOPIC_AUTHORIZATION_FAILED
    assert _list_offsets(ctx, "User:alice") == [(TOPIC, 0, END), (MISSING, unknown, -1)]
    assert _list_offsets(ctx, "User:bob") == [(TOPIC, 0, END), (MISSING, failed, -1)]
    assert _list_offsets(ctx, "User:ci") == [(TOPIC, failed, -1), (MISSING, failed, -1)]
    # a refused topic's partition named twice: refused (Kafka looks for duplicates among the
    # allowed ones only); an allowed one named twice: INVALID_REQUEST
    r = ListOffsetsRequest[7]
    part = r.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=-2, current_leader_epoch=-1
    )
    twice = r(replica_id=-1, isolation_level=0,
              topics=[r.ListOffsetsTopic(name=TOPIC, partitions=[part, part])])  # fmt: skip
    for who, code in (("User:ci", failed), ("User:bob", codes.INVALID_REQUEST)):
        response = _ask(ctx, who, twice, ListOffsetsResponse[7], 7)
        assert [p.error_code for t in response.topics for p in t.partitions] == [code] * 2


def _fetch(ctx: Context, who: str) -> list[tuple[str, int, bool]]:
    r = FetchRequest[12]
    partition = r.FetchTopic.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1
    )
    topics = [r.FetchTopic(topic=n, partitions=[partition]) for n in (TOPIC, MISSING)]
    message = r(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=2 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, topics=topics,
                forgotten_topics_data=[], rack_id="")  # fmt: skip
    session = Session("127.0.0.1", who)
    reply = asyncio.run(answer(ctx, request(message), session))
    assert reply is not None
    reply.release()
    assert ctx.budget.in_use == 0
    response = FetchResponse[12].decode(unframe(reply), version=12, header=True)
    return [
        (t.topic, p.error_code, bool(p.records)) for t in response.responses for p in t.partitions
    ]


def test_fetch_needs_read_and_a_refused_topic_is_not_read(tmp_path: Path) -> None:
    service = fake_service()
    ctx = _ctx(tmp_path, service)
    failed = codes.TOPIC_AUTHORIZATION_FAILED
    for who in ("User:bob", "User:ci"):  # bob may describe, not read
        assert _fetch(ctx, who) == [(TOPIC, failed, False), (MISSING, failed, False)]
    assert fetches(service) == []
    unknown = codes.UNKNOWN_TOPIC_OR_PARTITION
    assert _fetch(ctx, "User:alice") == [(TOPIC, codes.NONE, True), (MISSING, unknown, False)]
    assert len(fetches(service)) == 2  # read: both (the service says which one is missing)


def test_the_listener_starts_off_loopback_only_with_authentication(tmp_path: Path) -> None:
    sec = asyncio.run(secured(tmp_path))
    anywhere = {"store": "file:///", "workers": 1, "kafka_listener": "0.0.0.0:9092"}
    with pytest.raises(ConfigurationError, match="advertised"):  # clients can't reach 0.0.0.0
        check_listener(settings_for(**anywhere, **sec.settings_args))
    anywhere["kafka_advertised_listener"] = "gateway.example:9092"
    with pytest.raises(ConfigurationError, match="no authentication"):
        check_listener(settings_for(**anywhere))
    check_listener(settings_for(**anywhere, **sec.settings_args))
    check_listener(settings_for(**anywhere, allow_anonymous=True))
    check_listener(settings_for(**{**anywhere, "workers": 2}, **sec.settings_args))  # workers


def test_each_data_request_gets_an_audit_line(tmp_path: Path) -> None:
    """Metadata, ListOffsets and Fetch: principal, source, API and version, the first error
    code, bytes, the one topic named; ApiVersions and SASL: none."""
    stream = io.BytesIO()

    async def run() -> None:
        sec = await secured(tmp_path)
        ctx = replace(context(fake_service(), port=0, **sec.settings_args), access=sec.access)
        listener = KafkaListener(ctx, "127.0.0.1", 10, audit=AuditLog(stream))
        await listener.start()
        try:
            conn = await connect(listener)
            await call(conn, SaslHandshakeRequest[1](mechanism="PLAIN"),
                       SaslHandshakeResponse[1], 1)  # fmt: skip
            auth = SaslAuthenticateRequest[2](auth_bytes=f"\0ci\0{sec.api_key}".encode())
            await call(conn, auth, SaslAuthenticateResponse[2], 2)
            r = ListOffsetsRequest[7]
            part = r.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)
            message = r(replica_id=-1, isolation_level=0,
                        topics=[r.ListOffsetsTopic(name=TOPIC, partitions=[part])])  # fmt: skip
            await call(conn, message, ListOffsetsResponse[7], 7)
            conn[1].close()
        finally:
            await listener.close()

    asyncio.run(run())
    (line,) = [json.loads(raw) for raw in stream.getvalue().splitlines()]
    assert line["principal"] == "User:ci"
    assert (line["source"], line["method"], line["path"]) == (
        "127.0.0.1",
        "KAFKA",
        "ListOffsets v7",
    )
    assert (line["status"], line["error_code"]) == (29, "TOPIC_AUTHORIZATION_FAILED")
    assert line["topic"] == TOPIC
    assert line["bytes"] > 0
    assert line["request_id"].startswith("kafka-1-")
