"""What every handler is given: the service, the settings, the byte budget, the address, and
the access rules (authentication, ACLs) of the HTTP API."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import AuthenticationError, AuthorizationError
from gateway.flights import Flights
from gateway.security.access import Access
from gateway.security.acl import Operation
from gateway.service.admission import ByteBudget
from gateway.service.protocol import Service

NODE_ID = 0
"""The gateway's broker id: the only broker, leader of every partition."""

TOPIC_IDS_MAX_AGE_S: Final = 10.0
"""How long the topic ids of :class:`TopicIds` are used before they are listed again."""
TOPIC_IDS_MISS_S: Final = 0.1
"""The most often an id not known makes :class:`TopicIds` list the topics again (a client
asking for made-up ids costs at most ten listings a second)."""


class TopicIds:
    """Topic id -> name for the ids the listener serves (each name's newest incarnation, as
    Metadata lists it), from :meth:`Service.topics`, kept between Fetch requests (a listing
    scans the catalog; a Fetch v13+ names its topics by id). Listed again when older than
    :data:`TOPIC_IDS_MAX_AGE_S`, or when an id asked is not in it (at most every
    :data:`TOPIC_IDS_MISS_S`). A stale entry never serves another incarnation's records: each
    read is checked against the id asked (:mod:`gateway.listener.fetch`). One listing at a
    time: the requests that need one while it runs wait for it (single flight; a failure is
    not kept, the next request lists again)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._names: dict[uuid.UUID, str] = {}
        self._listed = float("-inf")
        self._listing: Flights[None, dict[uuid.UUID, str]] = Flights()

    async def names(self, service: Service, wanted: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The id -> name map, listed again first when stale or missing one of ``wanted``
        (the service's errors, e.g. ``NotReadyError``, propagate)."""
        age = self._clock() - self._listed
        missing = any(i not in self._names for i in wanted)
        if age >= TOPIC_IDS_MAX_AGE_S or (missing and age >= TOPIC_IDS_MISS_S):
            # shielded: one waiter going away does not cancel the listing the others share
            return await asyncio.shield(self._listing.join(None, lambda: self._list(service)))
        return self._names

    async def _list(self, service: Service) -> dict[uuid.UUID, str]:
        started = self._clock()
        catalog = await service.topics()  # name -> ids, newest first
        self._names = {ids[0]: name for name, ids in catalog.items() if ids}
        self._listed = started
        return self._names


@dataclass(frozen=True, slots=True)
class Context:
    service: Service
    settings: Settings
    budget: ByteBudget
    host: str  # advertised in Metadata and FindCoordinator: where clients reconnect
    port: int
    access: Access = field(default_factory=Access)  # no arguments: open, everything allowed
    topic_ids: TopicIds = field(default_factory=TopicIds)  # shared by the copies of a context

    def deadline(self, wait_ms: int = 0) -> Deadline:
        """A request's hard deadline: ``request_timeout_ms``, or ``wait_ms`` when longer."""
        return Deadline.after(max(self.settings.request_timeout_ms, wait_ms) / 1000)

    def allows(self, principal: str, host: str, operation: Operation, topic: str) -> bool:
        """Whether ``principal`` may do ``operation`` on ``topic``: the HTTP API's check
        (:meth:`Access.check_topic`); a refusal is ``TOPIC_AUTHORIZATION_FAILED`` whether or
        not the topic exists."""
        try:
            self.access.check_topic(principal, host, operation, topic)
        except (AuthorizationError, AuthenticationError):
            return False
        return True
