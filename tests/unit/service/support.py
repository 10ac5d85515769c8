"""Settings for the service tests (the ``ServiceSettings`` Protocol as a dataclass)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


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
