"""The seam between the HTTP layer and the core: what a gateway service offers.

:class:`gateway.service.core.GatewayService` implements it; the routers depend only on this
Protocol. Every method raises only :class:`gateway.errors.GatewayError` subclasses:

* before the first bucket scan has finished: ``NotReadyError`` (503, retriable);
* unknown topic or partition: ``UnknownTopicOrPartitionError`` (404); a partition known only
  from manifests that cannot be read: ``CorruptManifestError`` (502) naming them;
* an offset outside the remote tier: ``OffsetOutOfRangeError`` (416, carries start/end);
* a bad parameter: ``InvalidRequestError`` (400, ``parameter`` names it);
* store faults after retries: ``StorageUnavailableError`` (503, retriable);
* deadline passed: ``DeadlineExceededError`` (504); corrupt stored data: ``CorruptDataError``
  subclasses (502), naming the object;
* an encrypted segment whose key pair id is not configured: ``KeyNotConfiguredError`` (500,
  not retriable), naming the id and the ``--key-pair`` to add.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Literal, Protocol

from prometheus_client.registry import Collector

from gateway.deadline import Deadline
from gateway.service.types import (
    FetchedRecord,
    FetchResult,
    IsolationLevel,
    OffsetResult,
    PartitionInfo,
    Readiness,
    SegmentInfo,
)

OffsetSpec = int | Literal[
    "earliest", "latest", "max_timestamp", "earliest_local", "latest_tiered",
    "earliest_pending_upload",
]  # fmt: skip
"""A ListOffsets question: a time in ms, or one of Kafka's special timestamps (-2 earliest, -1
latest, -3 max_timestamp; the tiered-storage ones of KIP-405/KIP-1023, -4 earliest_local, -5
latest_tiered, -6 earliest_pending_upload, answered for a log that is all remote tier)."""


class Service(Protocol):
    def ready(self) -> bool:
        """The catalog has been loaded at least once."""
        ...

    async def wait_ready(self) -> None:
        """Return once the first bucket scan has completed; ``NotReadyError`` if the service
        closes first."""
        ...

    def readiness(self) -> Readiness:
        """:meth:`ready`, why not, and the manifests the catalog could not read."""
        ...

    async def topics(self) -> dict[str, list[uuid.UUID]]:
        """Topic name -> its ids, newest first."""
        ...

    async def partitions(self, topic: str) -> list[PartitionInfo]: ...

    async def partition(
        self, topic: str, partition: int, deadline: Deadline | None = None
    ) -> PartitionInfo:
        """Its bounds as a fetch reports them (the tail checked), within ``deadline``."""
        ...

    async def segments(self, topic: str, partition: int) -> list[SegmentInfo]: ...

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        isolation: IsolationLevel,
        deadline: Deadline,
    ) -> FetchResult:
        """Whole batches from the first one whose last offset is >= ``offset``, at least one
        batch, continuing into following segments while ``max_bytes`` allows. read_committed
        reads up to the remote last stable offset (``last_stable_offset`` of the result); at
        or past it, below the end: ``TransactionPendingError`` carrying the bounds."""
        ...

    async def decode(
        self, result: FetchResult, offset: int, isolation: IsolationLevel
    ) -> Sequence[FetchedRecord]:
        """The data records of ``result`` at or after ``offset`` (control records and, for
        read_committed, aborted records removed); CPU work, run off the event loop."""
        ...

    async def list_offsets(
        self,
        topic: str,
        partition: int,
        spec: OffsetSpec,
        deadline: Deadline,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> OffsetResult:
        """``earliest``, ``latest`` (the last fetchable offset: the remote end, or for
        read_committed the remote last stable offset), ``max_timestamp`` or the first offset
        at or after a timestamp; for read_committed, a match at or past the last stable offset
        is none (-1), as a broker answers."""
        ...

    async def catalog_topics(self) -> frozenset[str]:
        """The topic names in the catalog as of the last completed scan (none before it)."""
        ...

    @property
    def collector(self) -> Collector:
        """The core's counters (GETs, bytes, retries, caches, scans) for Prometheus."""
        ...
