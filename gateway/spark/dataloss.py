"""``failOnDataLoss`` on the driver: records a read would include that no readable segment holds.

With ``failOnDataLoss=true`` (the default, as in Spark's Kafka source) they fail the plan: a
hole in the lineage with :class:`~gateway.errors.RemoteGapError` naming the missing offsets,
records in segments whose manifests cannot be read with
:class:`~gateway.errors.CorruptManifestError` naming them. With ``failOnDataLoss=false`` they
are skipped with a warning on the ``gateway.spark.driver`` logger (the driver's log, where a
user looks for what a read left out).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gateway.errors import CorruptManifestError, RemoteGapError
from gateway.metadata.model import TopicIdPartition
from gateway.service.locate import Claim

log = logging.getLogger("gateway.spark.driver")

_SKIPS = "failOnDataLoss=false skips it"


def _unreadable(claims: Sequence[Claim]) -> str:
    return "; ".join(
        f"the manifest {c.key} of the segment from offset {c.start_offset} cannot be read "
        f"({c.reason})"
        for c in claims
    )


def hole(tp: TopicIdPartition, lo: int, hi: int, claims: Sequence[Claim], *, fail: bool) -> None:
    """Offsets ``lo..hi`` are held by no readable segment: fail, or warn and skip them."""
    where = f"{tp.topic}-{tp.partition}"
    message = f"no remote segment of {where} holds offsets {lo}..{hi}: the metadata has a hole"
    lost_here = [c for c in claims if lo <= c.start_offset <= hi]
    if lost_here:
        message += "; " + _unreadable(lost_here)
    if fail:
        raise RemoteGapError(f"{message} ({_SKIPS})", lo, hi)
    log.warning("%s: skipped (failOnDataLoss=false)", message)


def missing(tp: TopicIdPartition, lo: int, hi: int, reason: str, *, fail: bool) -> None:
    """Offsets ``lo..hi`` the read asks for are no longer in the remote tier (``reason``: why,
    e.g. retention deleted them): fail, or warn and skip them."""
    message = (
        f"offsets {lo}..{hi} of {tp.topic}-{tp.partition} are not in the remote tier: {reason}"
    )
    if fail:
        raise RemoteGapError(f"{message} ({_SKIPS})", lo, hi)
    log.warning("%s: skipped (failOnDataLoss=false)", message)


def lost(fail: bool, what: str, claims: Sequence[Claim]) -> None:
    """Records the read would include are in segments whose manifests cannot be read."""
    message = f"{what}: {_unreadable(claims)}"
    if fail:
        raise CorruptManifestError(f"{message} ({_SKIPS})")
    log.warning("%s: skipped (failOnDataLoss=false)", message)
