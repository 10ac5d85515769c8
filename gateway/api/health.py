"""``/healthz`` (alive), ``/readyz`` (the catalog is loaded) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field
from starlette.responses import Response

from gateway.api.auth import PrincipalDep, access_of, client_host, is_operator
from gateway.api.models import Status, error_responses
from gateway.api.observe import HttpMetrics
from gateway.api.params import ServiceDep
from gateway.api.render import topic_id_text
from gateway.errors import NotReadyError
from gateway.metadata.follow import FollowStatus
from gateway.service.types import UnreadableManifest


class UnreadableSegment(BaseModel):
    start_offset: int = Field(description="where the segment starts (from the object key)")
    key: str = Field(description="the .rsm-manifest object key")
    reason: str = Field(description="why it cannot be read")


class DegradedPartition(BaseModel):
    topic: str
    topic_id: str
    partition: int
    unreadable: list[UnreadableSegment] = Field(
        description="manifests that cannot be read, by start offset: reads in the offsets "
        "they claim fail with an error naming them"
    )


class FollowedTopic(BaseModel):
    topic: str = Field(description="the followed metadata topic")
    connected: bool = Field(description="the consumer is connected")
    caught_up: bool = Field(description="it reached the end offsets seen at start")
    lag: int = Field(description="metadata records not applied yet, as far as it knows")
    records: int = Field(description="metadata records read")
    errors: int = Field(description="consumer errors, each retried on a new consumer")
    failed_partitions: list[int] = Field(
        description="metadata partitions stopped by a record that does not decode"
    )
    last_error: str | None = Field(
        default=None, description="the last consumer error (shown to operators)"
    )


class Readiness(BaseModel):
    status: Literal["ready", "degraded"] = Field(
        description="ready; or degraded: serving, but some manifests cannot be read, or a "
        "followed metadata partition stopped on a record that does not decode"
    )
    degraded: Annotated[
        list[DegradedPartition] | None,
        Field(description="when degraded: the partitions with unreadable manifests"),
    ] = None
    metadata: Annotated[
        FollowedTopic | None,
        Field(description="when the catalog follows __remote_log_metadata: its state"),
    ] = None


def _followed(status: FollowStatus, details: bool) -> FollowedTopic:
    return FollowedTopic(
        topic=status.topic,
        connected=status.connected,
        caught_up=status.caught_up,
        lag=status.lag,
        records=status.records,
        errors=status.errors,
        failed_partitions=sorted(status.failed),
        last_error=status.last_error if details else None,
    )


def _degraded(unreadable: tuple[UnreadableManifest, ...]) -> list[DegradedPartition]:
    parts: dict[tuple[str, str, int], list[UnreadableSegment]] = {}
    for u in unreadable:
        entry = UnreadableSegment(start_offset=u.start_offset, key=u.key, reason=u.reason)
        parts.setdefault((u.topic, topic_id_text(u.topic_id), u.partition), []).append(entry)
    return [
        DegradedPartition(
            topic=topic,
            topic_id=topic_id,
            partition=partition,
            unreadable=sorted(entries, key=lambda e: (e.start_offset, e.key)),
        )
        for (topic, topic_id, partition), entries in sorted(parts.items())
    ]


def router(metrics: HttpMetrics) -> APIRouter:
    r = APIRouter(tags=["operations"])

    @r.get("/healthz", response_model=Status)
    async def healthz() -> Status:
        """200 while the process serves HTTP."""
        return Status(status="ok")

    @r.get(
        "/readyz",
        response_model=Readiness,
        response_model_exclude_none=True,
        responses=error_responses(503, auth=False),
    )
    async def readyz(request: Request, service: ServiceDep) -> Readiness:
        """503 `not_ready` (retriable) until the first bucket scan has finished, with the
        reason (e.g. the store cannot be listed; once ACLs or authentication are configured,
        for a principal allowed `Describe` on the Cluster): never ready with an empty catalog
        because the store failed. Then 200 `{"status": "ready"}`; or, when some `.rsm-manifest`
        objects cannot be read (corrupt, no segment metadata), still 200 so that one bad
        object does not take the instance out of service, but `{"status": "degraded"}` with
        `degraded` listing each affected partition: the manifest keys, the offsets they
        claim (reads there fail naming the key) and why they cannot be read. Once ACLs or
        authentication are configured the list is shown only to a principal allowed
        `Describe` on the Cluster (it names topics)."""
        readiness = service.readiness()
        if not readiness.ready:
            reason = readiness.reason or "the first bucket scan has not finished"
            shown = f": {reason}" if await is_operator(request) else ""  # it names the store
            raise NotReadyError(f"the catalog of remote segments is not loaded yet{shown}")
        details = await is_operator(request)
        followed = None
        if readiness.follow is not None:
            followed = _followed(readiness.follow, details)
        if readiness.unreadable or (followed is not None and followed.failed_partitions):
            degraded = _degraded(readiness.unreadable) if details else None
            return Readiness(status="degraded", degraded=degraded, metadata=followed)
        return Readiness(status="ready", metadata=followed)

    @r.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {}}, "description": "Prometheus text"},
            **error_responses(403),
        },
    )
    async def prometheus(
        request: Request, service: ServiceDep, principal: PrincipalDep
    ) -> Response:
        """HTTP latency by route and status, then the core's counters (GETs, caches, ...).
        Once ACLs or authentication are configured: for principals allowed `Describe` on the
        `Cluster` resource (`kafka-cluster`)."""
        access = access_of(request)
        if not access.open:  # its labels name topics
            access.check_cluster(principal, client_host(request), "read the metrics")
        more = getattr(request.state, "collectors", ())  # the Kafka listener's, when it runs
        body = generate_latest(metrics.exposition(service.collector, *more))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return r
