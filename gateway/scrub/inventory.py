"""One listing of the bucket prefix, grouped by segment: what to audit, and the orphans.

The plugin writes ``.log``, then ``.indexes``, then ``.rsm-manifest``, and deletes all three
(aiven-remote-format.md §1). So a segment is complete when all three exist; anything else is
an orphan or a broken segment:

* ``.log`` / ``.indexes`` without a manifest: left over by a failed copy or an incomplete delete
  (they cost storage, nothing reads them). It is also exactly what a segment looks like while it
  is being uploaded, which a listing cannot tell apart; so an object younger than
  ``upload_grace_s`` is a warning that says so, an older one an error.
* a manifest whose ``.log`` or ``.indexes`` is missing: an error, fetches of it fail.
* a key that does not parse (another layout, a stray file under the prefix): a warning, listed
  once, never a crash.

The listing runs once on the driver; executors then read only the objects it found.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from gateway.errors import InvalidKeyError
from gateway.kafka.uuids import encode_uuid
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.scrub.findings import (
    MISSING_OBJECT,
    ORPHAN_OBJECT,
    UNRECOGNISED_KEY,
    Finding,
    Where,
)
from gateway.storage.base import ObjectInfo
from gateway.storage.sync import SyncObjectStore

DEFAULT_UPLOAD_GRACE_S: Final = 15 * 60.0


@dataclass(frozen=True, slots=True)
class SegmentObjects:
    """What the listing found for one segment (one upload attempt): key -> size per suffix."""

    manifest_key: str  # the manifest's key, even when the manifest itself is missing
    topic: str
    partition: int
    segment_id: str
    sizes: dict[Suffix, int]
    modified: float  # newest last-modified time of its objects (seconds since the epoch)

    @property
    def complete(self) -> bool:
        return len(self.sizes) == len(Suffix)

    def where(self) -> Where:
        return Where(self.topic, self.partition, self.segment_id, self.manifest_key)


@dataclass(slots=True)
class Inventory:
    """The segments that have a manifest (to audit) and the inventory's own findings."""

    segments: list[SegmentObjects] = field(default_factory=list)  # with a manifest, by key
    findings: list[Finding] = field(default_factory=list)
    objects: int = 0
    bytes: int = 0


def _key_of(key: ObjectKey, suffix: Suffix) -> str:
    return key.with_suffix(suffix).key


def _group(
    infos: Iterable[ObjectInfo], prefix: str, topic: str | None, inv: Inventory
) -> dict[str, tuple[ObjectKey, dict[Suffix, int], float]]:
    groups: dict[str, tuple[ObjectKey, dict[Suffix, int], float]] = {}
    for info in infos:
        try:
            key = parse_object_key(info.key, prefix)
        except InvalidKeyError as exc:
            if topic is None:  # with --topic, other keys are simply out of scope
                inv.objects += 1
                inv.bytes += info.size
                inv.findings.append(
                    Where(object_key=info.key).finding(
                        UNRECOGNISED_KEY, "warning", f"not a tiered-storage object key: {exc}"
                    )
                )
            continue
        if topic is not None and key.topic != topic:
            continue
        inv.objects += 1
        inv.bytes += info.size
        manifest_key = _key_of(key, Suffix.MANIFEST)
        _, sizes, modified = groups.get(manifest_key, (key, {}, 0.0))
        sizes[key.suffix] = info.size
        groups[manifest_key] = (key, sizes, max(modified, info.last_modified))
    return groups


def inventory(
    store: SyncObjectStore,
    prefix: str,
    topic: str | None = None,
    *,
    upload_grace_s: float = DEFAULT_UPLOAD_GRACE_S,
    now: float | None = None,
) -> Inventory:
    """List ``prefix`` once and sort what is there into segments and findings.

    ``topic`` limits the audit to one topic (keys of other topics, and unparseable keys, are
    then ignored). ``now`` is for tests (defaults to the wall clock)."""
    now = time.time() if now is None else now
    inv = Inventory()
    groups = _group(store.list(prefix), prefix, topic, inv)
    for manifest_key, (key, sizes, modified) in sorted(groups.items()):
        seg = SegmentObjects(
            manifest_key,
            key.topic,
            key.partition,
            encode_uuid(key.segment_id),
            sizes,
            modified,
        )
        where = seg.where()
        if Suffix.MANIFEST not in sizes:
            age = now - modified
            young = age < upload_grace_s
            for suffix in sorted(sizes):
                inv.findings.append(
                    where.finding(
                        ORPHAN_OBJECT,
                        "warning" if young else "error",
                        f"{suffix.value} object without a manifest, last written {age:.0f} s ago: "
                        + (
                            "probably an upload in progress (a segment being copied looks "
                            "the same until its manifest is written)"
                            if young
                            else "left by a failed copy or an incomplete delete (or an upload "
                            "that stalled); nothing reads it"
                        ),
                        _key_of(key, suffix),
                    )
                )
            continue
        for suffix in (Suffix.LOG, Suffix.INDEXES):
            if suffix not in sizes:
                inv.findings.append(
                    where.finding(
                        MISSING_OBJECT,
                        "error",
                        f"the manifest exists but its {suffix.value} object does not: "
                        "fetches of this segment fail",
                        _key_of(key, suffix),
                    )
                )
        inv.segments.append(seg)
    return inv
