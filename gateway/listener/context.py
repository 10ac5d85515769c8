"""What every handler is given: the service, the settings, the byte budget, the address, and
the access rules (authentication, ACLs) of the HTTP API."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import AuthenticationError, AuthorizationError
from gateway.security.access import Access
from gateway.security.acl import Operation
from gateway.service.admission import ByteBudget
from gateway.service.protocol import Service

NODE_ID = 0
"""The gateway's broker id: the only broker, leader of every partition."""


@dataclass(frozen=True, slots=True)
class Context:
    service: Service
    settings: Settings
    budget: ByteBudget
    host: str  # advertised in Metadata and FindCoordinator: where clients reconnect
    port: int
    access: Access = field(default_factory=Access)  # no arguments: open, everything allowed

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
