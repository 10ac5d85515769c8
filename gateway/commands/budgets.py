"""The server's budgets divided among ``--workers N`` processes: worker arithmetic, kept out of
the settings (which say what the whole server may use)."""

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
