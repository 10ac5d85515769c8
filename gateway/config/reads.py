"""Caches, ranged GETs, retries and the CPU side of reads."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from gateway.config.units import ByteSize, GiB, KiB, MiB, default_threads
from gateway.storage.hedge import HedgePolicy
from gateway.storage.retry import RetryPolicy


class ReadSettings(BaseModel):
    """Memory and disk for indexes and chunks, the GET budgets, retries, threads."""

    # --- caches and reads ---------------------------------------------------------------------
    index_cache_bytes: ByteSize = Field(
        default=256 * MiB,
        ge=0,
        description="memory for the offset/time/txn indexes (all workers together)",
    )
    index_cache_dir: Path | None = Field(
        default=None, description="also keep loaded indexes on disk under DIR"
    )
    chunk_cache_bytes: ByteSize = Field(
        default=256 * MiB,
        ge=0,
        description="memory for detransformed chunks, all workers together (0: no chunk cache)",
    )
    shared_runs_share: float = Field(
        default=0.75,
        ge=0,
        lt=1,
        description="with workers, the part of chunk_cache_bytes that is one ring of verified "
        "runs every worker reads (held once); the rest is divided among the workers; 0: none",
    )
    chunk_cache_dir: Path | None = Field(
        default=None,
        description="also keep decoded chunks on disk under DIR (decrypted data: a private dir)",
    )
    chunk_cache_disk_bytes: ByteSize = Field(
        default=4 * GiB, ge=1, description="disk bound of chunk_cache_dir (all workers together)"
    )
    readahead_bytes: ByteSize = Field(
        default=MiB, ge=0, description="chunks loaded ahead of a sequential read (0: none)"
    )
    max_get_bytes: ByteSize = Field(
        default=8 * MiB, ge=1, description="largest coalesced ranged GET"
    )
    max_concurrent_gets: int = Field(
        default=64,
        ge=1,
        description="ranged GETs in flight in the whole server (all reads, workers)",
    )
    get_rate_per_prefix: float = Field(
        default=5500.0,
        ge=0,
        description="GETs per second per key prefix, all workers together (0: no limit)",
    )
    hedge_after_ms: float = Field(
        default=0.0,
        ge=0,
        description="send a ranged GET again when unanswered after MS (0: the p95 of recent GETs)",
    )
    hedge_max_fraction: float = Field(
        default=0.05, ge=0, le=1, description="share of GETs that may be hedged (0: no hedging)"
    )
    block_bytes: ByteSize = Field(
        default=64 * KiB, ge=1, description="read and cache unit of untransformed segments"
    )
    retry_max_attempts: int = Field(
        default=5, ge=1, description="store attempts per read, the first included"
    )
    retry_base_delay_s: float = Field(
        default=0.05, ge=0, description="backoff base: attempt n waits up to base * 2^(n-1)"
    )
    retry_max_delay_s: float = Field(
        default=2.0, gt=0, description="the longest wait between two attempts"
    )
    retry_attempt_timeout_s: float = Field(
        default=10.0, gt=0, description="timeout of one store attempt"
    )
    threads: int = Field(
        default_factory=default_threads,
        ge=1,
        description="threads for decompression, decryption and decoding",
    )
    malloc_mmap_threshold: ByteSize = Field(
        default=0,
        ge=0,
        description="C heap blocks of at least this size get their own mapping, unmapped when "
        "freed, so resident memory follows the bytes in flight at a CPU cost (every large "
        "buffer faulted in anew: JSON/NDJSON ~40 %% slower at 256KiB); 0: blocks under 8MiB "
        "from the heap and its free top kept up to 32MiB, freed memory reused until the heap "
        "trimmer gives it back",
    )
    malloc_arenas: int = Field(
        default=2,
        ge=0,
        description="glibc only: at most this many C heap arenas for the process's threads "
        "(M_ARENA_MAX, set at start; MALLOC_ARENA_MAX in the environment wins); each arena "
        "keeps what it freed: under load, 2 left ~200 MiB less resident than glibc's 8 per "
        "core and used no more CPU; 0: glibc's default",
    )
    compiled_records: bool = Field(
        default=True,
        description="decode records and write JSON/NDJSON with compiled loops (numba): about "
        "twice the records per CPU-second; off: the pure-Python path (the reference decoder: "
        "about a tenth of the records per CPU-second), without numba's ~110 MiB of resident "
        "memory",
    )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.retry_max_attempts,
            base_delay=self.retry_base_delay_s,
            max_delay=self.retry_max_delay_s,
            attempt_timeout=self.retry_attempt_timeout_s,
        )

    def hedge_policy(self) -> HedgePolicy:
        return HedgePolicy(after_s=self.hedge_after_ms / 1000, max_fraction=self.hedge_max_fraction)
