"""Settings for the service tests (the ``ServiceSettings`` Protocol as a dataclass)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gateway.service.core import GatewayService, open_service


@dataclass
class Settings:
    store: str
    key_prefix: str = ""
    key_pairs: list[str] = field(default_factory=list)
    state_dir: Path | None = None
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_path_style: bool = False
    s3_data_plane: Literal["aioboto3", "httpx"] = "aioboto3"
    index_cache_bytes: int = 64 << 20
    index_cache_dir: Path | None = None
    chunk_cache_dir: Path | None = None
    chunk_cache_disk_bytes: int = 1 << 30
    chunk_cache_bytes: int = 64 << 20
    readahead_bytes: int = 1 << 20
    max_get_bytes: int = 8 << 20
    max_concurrent_gets: int = 8
    retry_max_attempts: int = 3
    retry_base_delay_s: float = 0.01
    retry_max_delay_s: float = 0.5
    retry_attempt_timeout_s: float = 5.0
    threads: int = 2
    rescan_interval_s: float = 0.0


@contextlib.asynccontextmanager
async def ready_service(settings: Settings) -> AsyncIterator[GatewayService]:
    """An open service whose first bucket scan is done (or 4 s have passed)."""
    async with open_service(settings) as svc:
        for _ in range(200):
            if svc.ready():
                break
            await asyncio.sleep(0.02)
        yield svc
