"""Audit one segment: its manifest, its data key, every chunk, every batch, its indexes.

Framework-free and blocking (a Spark task, or a plain loop, calls :func:`audit_segment`); all
I/O goes through a :class:`~gateway.remote.sync_reader.SyncSegmentReader`. Typed errors of the
one exception tree become findings where they happen, so one bad chunk or index does not hide
the next; only :func:`audit_segment` itself turns an unexpected exception into an ``internal``
error finding (with its type name), so that one segment's surprise cannot abort the whole run.

Reading is bounded: chunks stream one coalesced GET at a time into
:class:`~gateway.scrub.logscan.LogScanner`, which keeps only the unframed tail and frames the
bytes with the read core's strict framer against what the manifest's ``remoteLogSegmentMetadata``
promises (start and end offset, size, leader epochs), as the service does. A chunk that
fails (GCM tag, zstd frame, object too short) is pinned down by re-reading the chunks of its GET
one by one, so the finding names the chunk id and its stored byte range; the remaining chunks
are still decoded (every bad chunk is reported), but batch and index checks stop at the first
bad one, since the batches after a hole cannot be framed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.errors import (
    ConfigurationError,
    CorruptDataError,
    CorruptManifestError,
    DeadlineExceededError,
    GatewayError,
    ObjectNotFoundError,
    StorageError,
)
from gateway.kafka.uuids import encode_uuid
from gateway.metadata.manifests import metadata_from_manifest
from gateway.read.framing import SegmentBounds
from gateway.remote.chunk_index import Chunk
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix, parse_object_key
from gateway.remote.manifest import SegmentManifest, parse_manifest
from gateway.remote.reader import DEFAULT_MAX_GET_BYTES, RemoteSegment, indexes_end, plan_gets
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.scrub.continuity import SegmentRange
from gateway.scrub.findings import (
    CHUNK,
    DATA_KEY,
    INTERNAL,
    MANIFEST,
    MISSING_OBJECT,
    OBJECT_SIZE,
    STORAGE,
    Finding,
    FindingSink,
    Where,
)
from gateway.scrub.indexes import read_index_view
from gateway.scrub.logscan import UNKNOWN_END, IndexView, LogScanner

_IO_ERRORS = (StorageError, DeadlineExceededError)


@dataclass(slots=True)
class SegmentAudit:
    """What auditing one segment found and how much it read."""

    manifest_key: str
    findings: list[Finding] = field(default_factory=list)
    range: SegmentRange | None = None  # for the continuity check; None without metadata
    log_bytes: int = 0  # original bytes of the segment that were decoded
    stored_bytes: int = 0  # bytes fetched from the store
    chunks: int = 0
    batches: int = 0
    records: int = 0


def _range(key: ObjectKey, manifest: SegmentManifest) -> SegmentRange:
    meta = metadata_from_manifest(key, manifest)  # CorruptManifestError when it disagrees
    return SegmentRange(
        key.topic,
        encode_uuid(key.topic_id),
        key.partition,
        encode_uuid(key.segment_id),
        key.key,
        meta.start_offset,
        meta.end_offset,
        meta.event_timestamp_ms,
    )


def _io_finding(sink: FindingSink, exc: GatewayError, key: str, what: str) -> None:
    if isinstance(exc, ObjectNotFoundError):
        sink.error(MISSING_OBJECT, f"{what}: the object is gone (deleted since the listing?)", key)
    else:
        sink.error(STORAGE, f"{what} not audited: {type(exc).__name__}: {exc}", key)


def _check_sizes(sink: FindingSink, seg: RemoteSegment, sizes: Mapping[Suffix, int]) -> None:
    manifest = seg.manifest
    log_size = sizes.get(Suffix.LOG)
    expected = manifest.chunk_index.transformed_file_size
    if log_size is not None and log_size != expected:
        sink.error(
            OBJECT_SIZE,
            f".log object is {log_size} bytes, its chunk index says {expected}",
            seg.key.key,
        )
    ix_size = sizes.get(Suffix.INDEXES)
    ix_end = indexes_end(seg)
    if ix_size is not None and ix_size != ix_end:
        sink.add(
            OBJECT_SIZE,
            "error" if ix_size < ix_end else "warning",
            f".indexes object is {ix_size} bytes, its manifest places pieces up to byte {ix_end}",
            seg.key.with_suffix(Suffix.INDEXES).key,
        )


def _decode_chunks(
    reader: SyncSegmentReader,
    seg: RemoteSegment,
    scanner: LogScanner,
    sink: FindingSink,
    audit: SegmentAudit,
) -> None:
    """Every chunk through the detransform and into the scanner, one GET at a time."""
    chunks = seg.manifest.chunk_index.chunks()
    key = seg.key.key
    before = reader.bytes_fetched
    for get in plan_gets(chunks, DEFAULT_MAX_GET_BYTES):
        try:
            for _, piece in reader.iter_chunks(seg, get.chunks):
                _feed(scanner, audit, piece)
        except CorruptDataError:
            try:
                _one_by_one(reader, seg, get.chunks, scanner=scanner, sink=sink, audit=audit)
            except _IO_ERRORS as exc:
                _io_finding(sink, exc, key, f".log from stored byte {get.start}")
                scanner.stop(get.chunks[0].original_position, "the store failed")
                break
        except _IO_ERRORS as exc:
            _io_finding(sink, exc, key, f".log from stored byte {get.start}")
            scanner.stop(get.chunks[0].original_position, "the store failed")
            break
    audit.stored_bytes += reader.bytes_fetched - before


def _one_by_one(
    reader: SyncSegmentReader,
    seg: RemoteSegment,
    chunks: Sequence[Chunk],
    *,
    scanner: LogScanner,
    sink: FindingSink,
    audit: SegmentAudit,
) -> None:
    """A GET whose chunks did not all decode: read each alone to name the bad ones."""
    for chunk in chunks:
        try:
            for _, piece in reader.iter_chunks(seg, [chunk]):
                _feed(scanner, audit, piece)
        except CorruptDataError as exc:
            where = (
                f"chunk {chunk.id} (stored bytes [{chunk.transformed_position}, "
                f"{chunk.transformed_end}), segment bytes [{chunk.original_position}, "
                f"{chunk.original_end}))"
            )
            sink.error(CHUNK, f"{where}: {type(exc).__name__}: {exc}", seg.key.key)
            scanner.stop(chunk.original_position, f"chunk {chunk.id} is unreadable")


def _feed(scanner: LogScanner, audit: SegmentAudit, piece: bytes) -> None:
    audit.chunks += 1
    audit.log_bytes += len(piece)
    scanner.feed(piece)


def _bounds(key: ObjectKey, seg: RemoteSegment, rng: SegmentRange | None) -> SegmentBounds:
    """What the manifest's ``remoteLogSegmentMetadata`` promises about the ``.log`` (the same
    bounds the service frames it with); without usable metadata (already a ``manifest``
    finding) only its start offset and size are known."""
    meta = seg.manifest.remote_log_segment_metadata
    if rng is None or meta is None:
        return SegmentBounds(seg.key.key, key.start_offset, UNKNOWN_END, seg.size)
    epochs = tuple(sorted(meta.segment_leader_epochs, key=lambda e: e[1]))
    return SegmentBounds(seg.key.key, rng.start_offset, rng.end_offset, seg.size, epochs)


def _audit(
    reader: SyncSegmentReader,
    key: ObjectKey,
    keyring: KeyRing,
    sizes: Mapping[Suffix, int] | None,
    *,
    sink: FindingSink,
    audit: SegmentAudit,
) -> None:
    manifest_key = key.key
    try:
        data = reader.get_object(manifest_key)
    except ObjectNotFoundError:
        # Gone since the listing: retention deleted the segment. Nothing is wrong with that.
        sink.warning(MISSING_OBJECT, "the manifest was deleted after the listing (retention?)")
        return
    except _IO_ERRORS as exc:
        _io_finding(sink, exc, manifest_key, "manifest")
        return
    audit.stored_bytes += len(data)
    try:
        manifest = parse_manifest(data, manifest_key)
    except CorruptManifestError as exc:
        sink.error(MANIFEST, f"unreadable manifest: {exc}")
        return
    try:
        audit.range = _range(key, manifest)
    except CorruptManifestError as exc:
        sink.error(MANIFEST, str(exc))
    try:
        seg = RemoteSegment.open(key, manifest, keyring)
    except (ConfigurationError, CorruptDataError) as exc:
        sink.error(DATA_KEY, f"data key does not unwrap, segment not audited: {exc}")
        return
    if sizes is not None:
        _check_sizes(sink, seg, sizes)
    indexes_key = key.with_suffix(Suffix.INDEXES).key
    view = IndexView()
    if sizes is None or Suffix.INDEXES in sizes:
        view = read_index_view(reader, seg, key.start_offset, audit.range, sink)
    bounds = _bounds(key, seg, audit.range)
    end_known = bounds.end_offset != UNKNOWN_END
    meta = manifest.remote_log_segment_metadata
    scanner = LogScanner(
        view,
        sink,
        bounds,
        indexes_key=indexes_key,
        end_known=end_known,
        max_timestamp_ms=meta.max_timestamp_ms if meta is not None and end_known else None,
    )
    if sizes is not None and Suffix.LOG not in sizes:
        return  # the inventory reported it missing
    _decode_chunks(reader, seg, scanner, sink, audit)
    scanner.finish()
    audit.batches, audit.records = scanner.batches, scanner.records


def audit_segment(
    reader: SyncSegmentReader,
    manifest_key: str,
    keyring: KeyRing,
    *,
    sizes: Mapping[Suffix, int] | None = None,
) -> SegmentAudit:
    """Audit the segment of ``manifest_key``.

    ``sizes``: the listing's object sizes of the segment by suffix, when the caller listed the
    bucket (the scrub job): sizes are then checked against the manifest, and a missing ``.log``
    or ``.indexes`` (already reported by the inventory) is not read. Without it, every object
    is read and a missing one is a finding here.
    """
    audit = SegmentAudit(manifest_key)
    try:
        key = parse_object_key(manifest_key)
    except GatewayError as exc:
        audit.findings.append(
            Where(object_key=manifest_key).finding(MANIFEST, "error", f"bad key: {exc}")
        )
        return audit
    if key.suffix is not Suffix.MANIFEST:
        key = key.with_suffix(Suffix.MANIFEST)
    where = Where(key.topic, key.partition, encode_uuid(key.segment_id), manifest_key)
    sink = FindingSink(where)
    try:
        _audit(reader, key, keyring, sizes, sink=sink, audit=audit)
    except Exception as exc:  # the per-segment boundary: a surprise is a finding, not a crash
        sink.error(INTERNAL, f"audit failed with {type(exc).__name__}: {exc}")
    audit.findings = sink.close()
    return audit
