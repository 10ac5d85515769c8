"""Helpers for the service tests: a service opened from :class:`gateway.config.Settings` and
its first scan waited for, and the core's metrics as Prometheus text."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from prometheus_client import generate_latest

from gateway.config import Settings
from gateway.demo import DemoBucket
from gateway.service.core import GatewayService
from gateway.service.open import open_service


@contextlib.asynccontextmanager
async def ready_service(settings: Settings) -> AsyncIterator[GatewayService]:
    """An open service whose first bucket scan has completed."""
    async with open_service(settings) as svc:
        await svc.wait_ready()
        yield svc


def demo_settings(demo: DemoBucket) -> Settings:
    """Settings that serve the demo bucket as written."""
    return Settings(
        store=demo.store_url, key_prefix=demo.key_prefix, key_pairs=[demo.key_pair_spec]
    )


def metrics_text(service: GatewayService) -> str:
    """The core's metrics in the Prometheus text format."""
    return generate_latest(service.collector).decode()
