"""The budgets of each worker of ``serve --workers N`` (:mod:`gateway.commands.workers`): the
memory, in-flight and GET budgets configured are the server's total, divided by
:meth:`Settings.per_worker <gateway.config.Settings.per_worker>`; of the chunk cache's budget,
``shared_runs_share`` is one ring of verified runs every worker reads
(:mod:`gateway.cache.shared_runs`), the rest divided. Worker ``i`` > 0 keeps its catalog in
``state_dir/worker-i``."""

from __future__ import annotations

from gateway.config import Settings


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
    mine = settings.per_worker()
    arena = arena_bytes(settings)
    if arena:
        own = max(1, (settings.chunk_cache_bytes - arena) // settings.workers)
        mine = mine.model_copy(update={"chunk_cache_bytes": own})
    if index > 0 and mine.state_dir is not None:
        mine = mine.model_copy(update={"state_dir": mine.state_dir / f"worker-{index}"})
    return mine
