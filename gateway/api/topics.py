"""``/v1/topics``: topics, partitions, segments and ListOffsets (small JSON documents)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from gateway.api.auth import DescribableTopic, PrincipalDep, access_of, client_host
from gateway.api.models import Offset, Partition, Partitions, Segments, Topics, error_responses
from gateway.api.params import READY, DeadlineDep, PartitionNumber, ServiceDep, admit
from gateway.api.render import partition_json, segment_json, topic_id_text
from gateway.errors import InvalidRequestError
from gateway.kafka.ints import INT64_MAX
from gateway.service.protocol import OffsetSpec
from gateway.service.types import IsolationLevel

MAX_TIMESTAMP: Final = INT64_MAX
# Kafka's ListOffsetsRequest sentinels (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP)
# mean what the names do; -4 (earliest local) and -5 (latest tiered) need a broker's local log.
_NAMED_SPECS: Final[dict[str, OffsetSpec]] = {
    "earliest": "earliest",
    "-2": "earliest",
    "latest": "latest",
    "-1": "latest",
    "max_timestamp": "max_timestamp",
    "-3": "max_timestamp",
}
_DIGITS: Final = re.compile(r"[0-9]{1,19}")
# The contract's pattern (ECMA-262, no inline flags: each name spelled in any case); up to 18
# digits, all within int64 (19 digits are accepted when they are, which a pattern cannot say).
TIMESTAMP_PATTERN: Final = (
    "^([0-9]{1,18}|-[123]|[Ee][Aa][Rr][Ll][Ii][Ee][Ss][Tt]|[Ll][Aa][Tt][Ee][Ss][Tt]|"
    "[Mm][Aa][Xx]_[Tt][Ii][Mm][Ee][Ss][Tt][Aa][Mm][Pp])$"
)


def json_response(document: Any) -> Response:
    return Response(orjson.dumps(document), media_type="application/json")


def parse_offset_spec(text: str) -> OffsetSpec:
    """``earliest`` (or Kafka's -2), ``latest`` (-1), ``max_timestamp`` (-3), in any case,
    or a time in ms (>= 0)."""
    named = _NAMED_SPECS.get(text.lower())
    if named is not None:
        return named
    if _DIGITS.fullmatch(text) is None or int(text) > MAX_TIMESTAMP:
        raise InvalidRequestError(
            f"timestamp {text!r}: expected a time in ms (>= 0), earliest (-2), latest (-1) or "
            "max_timestamp (-3)",
            "timestamp",
        )
    return int(text)


def router() -> APIRouter:
    r = APIRouter(prefix="/v1", tags=["topics"], dependencies=[READY])

    @r.get("/topics", response_model=Topics, responses=error_responses(503))
    async def list_topics(
        request: Request, service: ServiceDep, principal: PrincipalDep
    ) -> Response:
        """Every topic of the remote tier the caller may describe, with its ids (a re-created
        topic has several)."""
        topics = await service.topics()
        names = access_of(request).visible(principal, client_host(request), sorted(topics))
        return json_response(
            {
                "topics": [
                    {"name": name, "topic_ids": [topic_id_text(i) for i in topics[name]]}
                    for name in names
                ]
            }
        )

    @r.get(
        "/topics/{topic}/partitions",
        response_model=Partitions,
        responses=error_responses(400, 403, 404, 502, 503),
    )
    async def list_partitions(topic: DescribableTopic, service: ServiceDep) -> Response:
        """The remote-tier partitions of a topic (its newest incarnation)."""
        infos = await service.partitions(topic)
        return json_response(
            {
                "topic": topic,
                "partitions": [partition_json(i) for i in sorted(infos, key=lambda i: i.partition)],
            }
        )

    @r.get(
        "/topics/{topic}/partitions/{partition}",
        response_model=Partition,
        responses=error_responses(400, 403, 404, 502, 503),
    )
    async def get_partition(
        topic: DescribableTopic, partition: PartitionNumber, service: ServiceDep
    ) -> Response:
        """Remote log start and end offsets, size (KIP-852), segment count, leader epochs."""
        return json_response(partition_json(await service.partition(topic, partition)))

    @r.get(
        "/topics/{topic}/partitions/{partition}/segments",
        response_model=Segments,
        responses=error_responses(400, 403, 404, 502, 503),
    )
    async def list_segments(
        topic: DescribableTopic, partition: PartitionNumber, service: ServiceDep
    ) -> Response:
        """The partition's remote segments with their states and sizes; `displaced` marks an
        upload a later upload of its offsets took the place of (reads never reach it)."""
        segments = await service.segments(topic, partition)
        return json_response(
            {
                "topic": topic,
                "partition": partition,
                "segments": [segment_json(s) for s in segments],
            }
        )

    @r.get(
        "/topics/{topic}/partitions/{partition}/offsets",
        response_model=Offset,
        responses=error_responses(400, 403, 404, 502, 503, 504),
    )
    async def list_offsets(
        *,
        request: Request,
        topic: DescribableTopic,
        partition: PartitionNumber,
        service: ServiceDep,
        deadline: DeadlineDep,
        timestamp: Annotated[
            str,
            Query(
                description="a time in ms: the first offset whose timestamp is at or after "
                "it; or earliest (Kafka's -2), latest (-1: the log end offset; with "
                "isolation_level read_committed the last stable offset), max_timestamp (-3), "
                "in any case",
                examples=["1700000000000", "earliest", "latest", "max_timestamp", "-1"],
                json_schema_extra={"pattern": TIMESTAMP_PATTERN},
            ),
        ],
        isolation_level: Annotated[
            IsolationLevel,
            Query(
                description="read_committed: latest is the last stable offset (the first "
                "offset of a transaction not decided in the remote tier; where a "
                "read_committed fetch stops), and a match at or past it is none (-1), as "
                "Kafka's ListOffsets answers (any case)"
            ),
        ] = IsolationLevel.READ_UNCOMMITTED,
    ) -> Response:
        """Kafka's ListOffsets on the remote tier; offset and timestamp -1 when none match.
        With `isolation_level` read_committed, as a broker answers it: the offsets a
        read_committed fetch reaches (the last stable offset for latest). While the event
        loop stays late: 503 `overloaded` at once, as for records."""
        spec = parse_offset_spec(timestamp)
        admit(request)
        result = await service.list_offsets(
            topic, partition, spec, deadline, isolation=isolation_level
        )
        return json_response(
            {
                "offset": result.offset,
                "timestamp": result.timestamp,
                "leader_epoch": result.leader_epoch,
            }
        )

    return r
