"""The budgets of each worker of ``serve --workers N`` (:mod:`gateway.commands.workers`): the
memory, in-flight and GET budgets configured are the server's total, divided by
:func:`per_worker` (worker arithmetic, kept out of the settings, which say what the whole
server may use); of the chunk cache's budget,
``shared_runs_share`` is one ring of verified runs every worker reads
(:mod:`gateway.cache.shared_runs`), the rest divided. Worker ``i`` > 0 keeps its catalog in
``state_dir/worker-i``."""

from __future__ import annotations

from typing import Final

from gateway.config import Settings

DIVIDED: Final = (
    "index_cache_bytes",
    "chunk_cache_bytes",
    "inflight_bytes",
    "max_active_pages",
    "max_concurrent_gets",
    "get_rate_per_prefix",
    "max_connections",
    "rate_limit_per_s",
    "rate_limit_burst",
)
"""The budgets of the whole server that ``--workers N`` divides among its worker processes
(the disk tiers divide their directory bounds themselves, see :mod:`indexcache.share`)."""


def per_worker(settings: Settings) -> Settings:
    """The settings of one of ``settings.workers`` processes: the server-wide budgets of
    :data:`DIVIDED` divided (rounded down, at least 1 where a positive value was given)."""
    if settings.workers == 1:
        return settings
    parts = {name: _divide(getattr(settings, name), settings.workers) for name in DIVIDED}
    return settings.model_copy(update=parts)


def _divide(value: int | float, n: int) -> int | float:
    if isinstance(value, float):
        return value / n
    return max(1, value // n) if value > 0 else value


def arena_bytes(settings: Settings) -> int:
    """The part of the chunk cache's budget that is the shared run arena (none with one
    worker): ``shared_runs_share`` of it, since what is there is held once for every worker;
    the rest is divided between the workers (the units their reads load, read-ahead, the runs
    each is using)."""
    if settings.workers == 1 or settings.chunk_cache_bytes <= 0:
        return 0
    return int(settings.chunk_cache_bytes * settings.shared_runs_share)


def worker_settings(settings: Settings, index: int) -> Settings:
    """The settings of worker ``index``: divided budgets (the chunk cache's after the shared
    arena's part), its own catalog file."""
    mine = per_worker(settings)
    arena = arena_bytes(settings)
    if arena:
        own = max(1, (settings.chunk_cache_bytes - arena) // settings.workers)
        mine = mine.model_copy(update={"chunk_cache_bytes": own})
    if index > 0 and mine.state_dir is not None:
        mine = mine.model_copy(update={"state_dir": mine.state_dir / f"worker-{index}"})
    return mine
