"""What every handler is given: the service, the settings, the byte budget, the address."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Settings
from gateway.deadline import Deadline
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

    def deadline(self, wait_ms: int = 0) -> Deadline:
        """A request's hard deadline: ``request_timeout_ms``, or ``wait_ms`` when longer."""
        return Deadline.after(max(self.settings.request_timeout_ms, wait_ms) / 1000)
