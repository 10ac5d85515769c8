"""A bucket's manifests as segment metadata: list them, read them, and what a pass reports.

The Aiven plugin writes ``remoteLogSegmentMetadata`` into every ``.rsm-manifest`` and writes the
manifest last, so a listed manifest is a finished upload. What the manifest does not say is
derived: ``segmentSizeInBytes`` is the chunk index's original file size, ``txnIdxEmpty`` is the
manifest's own copy where a Kafka 4.x broker wrote one, else true when the manifest has no (or an
empty) transaction index piece.

A manifest that cannot be parsed, has no ``remoteLogSegmentMetadata``, or whose metadata
disagrees with its key is never guessed at: it becomes an :class:`UnreadableSegment` (its key
still names the topic, topic id, partition and start offset). A manifest gone when read (404)
was deleted since the listing; a store fault (:func:`is_store_fault`) raises.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.deadline import Deadline
from gateway.errors import (
    ConfigurationError,
    CorruptManifestError,
    DeadlineExceededError,
    GatewayError,
    InvalidKeyError,
    ObjectNotFoundError,
    StorageError,
)
from gateway.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
    TopicIdPartition,
)
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.remote.manifest import SegmentManifest, parse_manifest
from gateway.remote.reader import all_or_nothing
from gateway.storage.base import ObjectStore
from gateway.storage.retry import Retrier

log = logging.getLogger(__name__)

MANIFEST_READ_TIMEOUT = 60.0
"""Seconds one manifest GET may take, retries included."""

MANIFEST_SUFFIX = "." + Suffix.MANIFEST.value


@dataclass(frozen=True, slots=True)
class UnreadableSegment:
    """A listed ``.rsm-manifest`` that cannot be read into segment metadata (unparsable, no
    ``remoteLogSegmentMetadata``, metadata that disagrees with its key). Its key still names
    the partition and where the segment starts, so the offsets from ``start_offset`` on stay
    claimed: a read in them fails naming ``key`` rather than hopping over them."""

    start_offset: int
    key: str  # the manifest's object key
    reason: str


@dataclass
class ScanReport:
    """What one scan saw and did. ``misprefixed``: manifests under ``prefix + "/"`` when the
    prefix lacks its trailing ``/`` (not read: see :mod:`gateway.metadata.scope`);
    ``scope_warning``: what is wrong with the scope when the pass found no manifest in it (or
    found misprefixed ones), set on the pass that first says it."""

    manifests: int = 0
    registered: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # manifest key -> reason
    lineages: int = 0
    misprefixed: int = 0
    scope_warning: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "manifests": self.manifests,
            "registered": self.registered,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "skipped": dict(sorted(self.skipped.items())),
            "lineages": self.lineages,
            "misprefixed": self.misprefixed,
            "scope_warning": self.scope_warning,
        }

    def describe(self) -> str:
        """One line of ``key=value`` pairs for the log."""
        return (
            f"manifests={self.manifests} registered={self.registered} "
            f"removed={self.removed} unchanged={self.unchanged} lineages={self.lineages} "
            f"skipped={len(self.skipped)}"
        )


def is_store_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the store (access denied, 5xx, network, timeout) rather
    than an answer about an object: it says nothing about what the bucket holds, so it must
    never be read as a deletion or as a corrupt object."""
    if isinstance(exc, ObjectNotFoundError | InvalidKeyError):
        return False
    return isinstance(
        exc, StorageError | DeadlineExceededError | ConfigurationError | OSError | TimeoutError
    )


def _epochs_fit(epochs: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """The copier writes the epochs of ``[start, end]``, the first clamped to ``start``
    (``remote-read-semantics.md`` §2): starts rise with the epochs, inside the segment."""
    ordered = sorted(epochs, key=lambda e: e[1])
    if not ordered or ordered[0][1] != start or ordered[-1][1] > end:
        return False
    return all(b[0] > a[0] and b[1] > a[1] for a, b in itertools.pairwise(ordered))


def metadata_from_manifest(key: ObjectKey, manifest: SegmentManifest) -> RemoteLogSegmentMetadata:
    """The COPY_SEGMENT_STARTED event for a manifest; :class:`CorruptManifestError` when its
    ``remoteLogSegmentMetadata`` is missing or disagrees with the object key."""
    meta = manifest.remote_log_segment_metadata
    if meta is None:
        raise CorruptManifestError(f"manifest {key.key!r} has no remoteLogSegmentMetadata")
    expected = (key.topic, key.topic_id, key.partition, key.segment_id, key.start_offset)
    found = (meta.topic, meta.topic_id, meta.partition, meta.segment_id, meta.start_offset)
    if expected != found:
        raise CorruptManifestError(
            f"manifest {key.key!r}: remoteLogSegmentMetadata names "
            f"{meta.topic}-{meta.partition} segment {meta.segment_id} at {meta.start_offset}, "
            "not the segment of its key"
        )
    if not _epochs_fit(meta.segment_leader_epochs, meta.start_offset, meta.end_offset):
        raise CorruptManifestError(
            f"manifest {key.key!r}: segmentLeaderEpochs {dict(meta.segment_leader_epochs)} do not "
            f"start at the segment's start offset {meta.start_offset} and rise within its "
            f"offsets up to {meta.end_offset}"
        )
    tp = TopicIdPartition(key.topic_id, key.partition, key.topic)
    try:
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, key.segment_id),
            meta.start_offset,
            meta.end_offset,
            meta.max_timestamp_ms,
            meta.broker_id,
            meta.event_timestamp_ms,
            meta.segment_leader_epochs,
            manifest.chunk_index.original_file_size,
            None,
            SegmentState.COPY_SEGMENT_STARTED,
            txn_index_empty=txn_index_empty(manifest),
        )
    except ValueError as exc:
        raise CorruptManifestError(f"manifest {key.key!r}: {exc}") from exc


def txn_index_empty(manifest: SegmentManifest) -> bool:
    """The broker's ``txnIdxEmpty``: as the manifest's copy of the metadata says (Kafka 4.x),
    else no transaction index piece, or an empty one (a broker may hand the plugin an empty
    ``.txnindex`` file, stored as ``{"position":N,"size":0}``)."""
    meta = manifest.remote_log_segment_metadata
    if meta is not None and meta.txn_idx_empty is not None:
        return meta.txn_idx_empty
    piece = manifest.segment_indexes.transaction
    return piece is None or piece.size == 0


def finished(meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    """The COPY_SEGMENT_FINISHED event that follows ``meta``'s COPY_SEGMENT_STARTED."""
    return RemoteLogSegmentMetadataUpdate(
        meta.segment_id,
        meta.event_timestamp_ms,
        None,
        SegmentState.COPY_SEGMENT_FINISHED,
        meta.broker_id,
    )


ReadManifest = tuple[ObjectKey, SegmentManifest, RemoteLogSegmentMetadata]
Unreadable = dict[str, tuple[TopicIdPartition, UnreadableSegment]]  # manifest key -> entry


def misprefixed(key: str, prefix: str) -> bool:
    """``key`` lies under ``prefix + "/"`` although the prefix was given without its ``/``:
    the rest would parse as a topic named ``/...``, which no Kafka topic can be."""
    return bool(prefix) and not prefix.endswith("/") and key.startswith(prefix + "/")


async def list_manifests(
    store: ObjectStore, prefix: str, report: ScanReport
) -> dict[uuid.UUID, ObjectKey]:
    """The manifests under ``prefix`` by segment id (one listing). Keys that do not parse are
    reported as skipped; keys under ``prefix + "/"`` of a prefix without its ``/`` are only
    counted (``report.misprefixed``), so a missing ``/`` is one diagnosis, not one per key."""
    keys: dict[uuid.UUID, ObjectKey] = {}
    async for info in store.list(prefix):
        if not info.key.endswith(MANIFEST_SUFFIX):
            continue
        if misprefixed(info.key, prefix):
            report.misprefixed += 1
            continue
        report.manifests += 1
        try:
            key = parse_object_key(info.key, prefix)
        except InvalidKeyError as exc:
            report.skipped[info.key] = str(exc)
            continue
        keys[key.segment_id] = key
    return keys


async def read_manifests(
    store: ObjectStore,
    retrier: Retrier,
    keys: list[ObjectKey],
    report: ScanReport,
    *,
    concurrency: int = 16,
) -> tuple[list[ReadManifest], Unreadable]:
    """The manifests of ``keys`` that read fine, and those that do not (corrupt). A manifest
    gone since the listing (404) is in neither; a store fault raises (and cancels the other
    reads)."""
    gate = asyncio.Semaphore(concurrency)
    unreadable: Unreadable = {}

    async def one(key: ObjectKey) -> ReadManifest | None:
        async with gate:
            deadline = Deadline.after(MANIFEST_READ_TIMEOUT)
            try:
                data = await retrier.run(f"GET {key.key}", lambda: store.get(key.key), deadline)
            except ObjectNotFoundError:  # deleted since the listing: the next pass agrees
                log.info("bucket scan: %s vanished since the listing", key.key)
                return None
            except InvalidKeyError as exc:  # the store refuses the key: unreadable
                error: GatewayError = exc
            else:
                try:
                    manifest = parse_manifest(data, key.key)
                    return key, manifest, metadata_from_manifest(key, manifest)
                except GatewayError as exc:  # corrupt: report it, and it keeps its claim
                    error = exc
            reason = f"{type(error).__name__}: {error}"
            report.skipped[key.key] = reason
            tp = TopicIdPartition(key.topic_id, key.partition, key.topic)
            unreadable[key.key] = (tp, UnreadableSegment(key.start_offset, key.key, reason))
            log.warning("bucket scan cannot read %s: %s", key.key, error)
            return None

    found = await all_or_nothing([one(k) for k in keys])
    return [f for f in found if f is not None], unreadable
