"""The plan of one Fetch request: which partitions to read, each once, from which offset with
which share of ``max_bytes``, and which are refused before any read (the principal's ACLs;
from v13 the topic ids, KIP-516, resolved to the names the service reads).
docs/kafka-listener.md ("Fetch, as the code implements it") gives the rules.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Final

from gateway.errors import GatewayError
from gateway.listener import codes
from gateway.listener.context import Context
from gateway.listener.fetch_wire import TOPIC_IDS_FROM, TopicKey
from gateway.listener.framing import MalformedRequestError, Request, array, name
from gateway.security.acl import Operation

log = logging.getLogger(__name__)

MAX_PARTITIONS: Final = 1000
"""The most partitions one Fetch names (Kafka's consumers ask for a few hundred at most)."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """One partition a Fetch asks for, as planned."""

    topic: str  # the name ("" for an id not served)
    partition: int
    offset: int
    max_bytes: int
    refused: int = codes.NONE  # not read: answered with this error
    topic_id: uuid.UUID | None = None  # v13+: the id asked, which the read must be of

    @property
    def where(self) -> str:
        """The partition and offset, as the failure line names them."""
        return f"{self.topic or self.topic_id}-{self.partition} at {self.offset}"

    @property
    def key(self) -> TopicKey:
        """How the answer names the topic: as the request did."""
        return self.topic if self.topic_id is None else self.topic_id


async def _topic_ids(ctx: Context, wanted: list[uuid.UUID]) -> tuple[dict[uuid.UUID, str], int]:
    """The ids served (each name's newest incarnation) and their names (:class:`TopicIds`,
    kept between requests), and the error an id not among them answers: ``UNKNOWN_TOPIC_ID``,
    or the catalog's own error while it cannot be listed (e.g. ``LEADER_NOT_AVAILABLE`` before
    the first bucket scan is done)."""
    try:
        names = await ctx.topic_ids.names(ctx.service, wanted)
    except GatewayError as exc:
        code = codes.error_code(exc)
        log.info("fetch: the topic ids cannot be resolved: error %d: %s", code, exc)
        return {}, code
    return names, codes.UNKNOWN_TOPIC_ID


async def plan(ctx: Context, request: Request, total: int) -> tuple[list[Wanted], dict[str, bool]]:
    """The partitions asked, each once (its first occurrence), with the principal's right to
    read their topics (v13+: named by id, resolved by :func:`_topic_ids`); more than
    :data:`MAX_PARTITIONS` entries is a malformed request."""
    body: Any = request.body
    by_id = request.api_version >= TOPIC_IDS_FROM
    names: dict[uuid.UUID, str] = {}
    unknown = codes.UNKNOWN_TOPIC_ID
    if by_id:
        wanted = [t.topic_id for t in array(body.topics, "topics")]
        names, unknown = await _topic_ids(ctx, [i for i in wanted if isinstance(i, uuid.UUID)])
    allowed: dict[str, bool] = {}
    wants: list[Wanted] = []
    seen: set[tuple[TopicKey, int]] = set()
    entries = 0
    for t in array(body.topics, "topics"):
        topic_id: uuid.UUID | None = None
        if by_id:
            topic_id = t.topic_id
            if not isinstance(topic_id, uuid.UUID):
                raise MalformedRequestError("a topic id is null")
            topic = names.get(topic_id, "")
        else:
            topic = name(t.topic, "a topic name")
        partitions = array(t.partitions, "partitions")
        entries += len(partitions)
        if entries > MAX_PARTITIONS:
            raise MalformedRequestError(f"a Fetch naming more than {MAX_PARTITIONS} partitions")
        if not topic and by_id:
            refused = unknown
        else:
            if topic not in allowed:
                allowed[topic] = ctx.allows(request.principal, request.host, Operation.READ,
                                            topic)  # fmt: skip
            refused = codes.NONE if allowed[topic] else codes.TOPIC_AUTHORIZATION_FAILED
        key: TopicKey = topic if topic_id is None else topic_id
        for p in partitions:
            if (key, p.partition) in seen:
                continue  # as Kafka: the first occurrence is read and answered
            seen.add((key, p.partition))
            share = max(1, min(p.partition_max_bytes, total))
            wants.append(Wanted(topic, p.partition, p.fetch_offset, share, refused, topic_id))
    return wants, allowed
