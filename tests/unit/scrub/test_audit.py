"""The scrub core on the demo bucket: clean is clean, and each injected fault is found with
the right check, severity and object key."""

from __future__ import annotations

import dataclasses
import shutil
import struct
import uuid

import pytest

from gateway.demo import DemoBucket
from gateway.kafka.batch import RecordBatch, iter_batches
from gateway.kafka.txn_index import AbortedTxn, TransactionIndex, encode_txn_index
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix, parse_object_key
from gateway.remote.manifest import parse_manifest
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.remote.tiering import (
    LocalSegment,
    SegmentObjects,
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    segment_metadata,
)
from gateway.scrub import Finding, audit_segment
from gateway.scrub import findings as checks
from gateway.storage.sync import SyncStoreSpec
from tests.unit.scrub.helpers import Bucket, problems


def only(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def test_the_demo_bucket_is_clean_but_for_the_displaced_reupload(bucket: Bucket) -> None:
    findings = bucket.scrub()
    assert problems(findings) == []
    [dup] = findings
    assert (dup.check, dup.severity, dup.topic) == (checks.DUPLICATE, "info", "inventory")


def test_a_flipped_byte_in_an_encrypted_chunk_names_the_chunk(bucket: Bucket) -> None:
    key = bucket.keys("payments", 0, Suffix.LOG)[1]
    manifest = parse_manifest(bucket.path(key).with_suffix(".rsm-manifest").read_bytes())
    chunk = manifest.chunk_index.chunk(1)
    bucket.flip(key, chunk.transformed_position + 40)
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.CHUNK, "error", key)
    assert "chunk 1 " in bad.message and "IntegrityError" in bad.message
    assert f"[{chunk.transformed_position}, {chunk.transformed_end})" in bad.message


@pytest.mark.parametrize("position", [200, 1000, 3000])
def test_a_flipped_byte_in_a_compressed_chunk(bucket: Bucket, position: int) -> None:
    # The plugin's zstd frames carry no checksum: a flipped byte either breaks the frame
    # (a chunk error) or decompresses to wrong bytes, which the batch CRC or framing catches.
    key = bucket.keys("audit", 0, Suffix.LOG)[0]
    bucket.flip(key, position)
    bad = problems(bucket.scrub())
    assert bad
    assert {(f.severity, f.object_key) for f in bad} == {("error", key)}
    # (or changes a header field outside the CRC, which the framer checks)
    assert {f.check for f in bad} <= {
        checks.CHUNK,
        checks.BATCH_CRC,
        checks.BATCH_FRAMING,
        checks.OFFSETS,
        checks.LEADER_EPOCH,
    }


def test_a_flipped_byte_in_a_plain_log_fails_that_batch_crc(bucket: Bucket) -> None:
    key = bucket.keys("orders", 1, Suffix.LOG)[0]
    bucket.flip(key, 100)  # inside the first batch's records
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.BATCH_CRC, "error", key)
    assert "position 0 " in bad.message


def test_a_missing_indexes_object(bucket: Bucket, demo: DemoBucket) -> None:
    key = bucket.keys("orders", 0, Suffix.INDEXES)[2]
    bucket.path(key).unlink()
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.MISSING_OBJECT, "error", key)
    # audited alone (no listing), the segment reports it itself
    store = SyncStoreSpec(bucket.url).open()
    manifest_key = key.removesuffix(".indexes") + ".rsm-manifest"
    audit = audit_segment(SyncSegmentReader(store), manifest_key, KeyRing())
    assert [(f.check, f.object_key) for f in problems(audit.findings)] == [
        (checks.MISSING_OBJECT, key)
    ]
    assert audit.batches > 0  # the log was still checked


def test_an_orphan_log_and_the_upload_grace(bucket: Bucket) -> None:
    source = parse_object_key(bucket.keys("orders", 0, Suffix.LOG)[1], bucket.prefix)
    orphan = dataclasses.replace(source, segment_id=uuid.uuid4()).key
    shutil.copy(bucket.path(source.key), bucket.path(orphan))
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.ORPHAN_OBJECT, "error", orphan)
    [young] = problems(bucket.scrub(grace=3600))
    assert young.severity == "warning" and "upload in progress" in young.message


def test_an_offset_gap(bucket: Bucket) -> None:
    logs = bucket.keys("orders", 0, Suffix.LOG)
    gone = parse_object_key(logs[1], bucket.prefix)
    for suffix in Suffix:
        bucket.path(gone.with_suffix(suffix).key).unlink()
    [gap] = problems(bucket.scrub())
    after = parse_object_key(logs[2], bucket.prefix)
    assert (gap.check, gap.severity) == (checks.GAP, "error")
    assert gap.object_key == after.with_suffix(Suffix.MANIFEST).key
    assert f"..{after.start_offset - 1} are in no segment" in gap.message


def _indexes_piece(bucket: Bucket, log_key: str, piece: str) -> tuple[str, int, int]:
    manifest_key = log_key.removesuffix(".log") + ".rsm-manifest"
    layout = parse_manifest(bucket.path(manifest_key).read_bytes()).segment_indexes
    where = getattr(layout, piece)
    return log_key.removesuffix(".log") + ".indexes", where.position, where.size


def test_an_offset_index_entry_off_a_batch_boundary(bucket: Bucket) -> None:
    key, position, size = _indexes_piece(bucket, bucket.keys("orders", 0, Suffix.LOG)[0], "offset")
    assert size >= 16
    data = bytearray(bucket.path(key).read_bytes())
    entry = position + 8  # the second entry
    rel, pos = struct.unpack_from(">ii", data, entry)
    struct.pack_into(">ii", data, entry, rel, pos + 3)
    bucket.path(key).write_bytes(bytes(data))
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.OFFSET_INDEX, "error", key)
    assert f"byte {pos + 3}) points inside a batch" in bad.message


def test_an_offset_index_entry_that_would_skip_records(bucket: Bucket) -> None:
    key, position, _ = _indexes_piece(bucket, bucket.keys("orders", 0, Suffix.LOG)[0], "offset")
    data = bytearray(bucket.path(key).read_bytes())
    rel0, _ = struct.unpack_from(">ii", data, position)
    _, pos1 = struct.unpack_from(">ii", data, position + 8)
    struct.pack_into(">ii", data, position + 8, rel0 + 1, pos1)  # still increasing
    bucket.path(key).write_bytes(bytes(data))
    bad = problems(bucket.scrub())
    assert {(f.check, f.object_key) for f in bad} == {(checks.OFFSET_INDEX, key)}
    [error] = [f for f in bad if f.severity == "error"]
    assert "skip records" in error.message


def test_a_time_index_entry_that_would_skip_records(bucket: Bucket) -> None:
    key, position, size = _indexes_piece(
        bucket, bucket.keys("orders", 0, Suffix.LOG)[0], "timestamp"
    )
    assert size >= 36
    data = bytearray(bucket.path(key).read_bytes())
    ts0, _ = struct.unpack_from(">qi", data, position)
    _, rel1 = struct.unpack_from(">qi", data, position + 12)
    struct.pack_into(">qi", data, position + 12, ts0 + 1, rel1)  # still increasing, too small
    bucket.path(key).write_bytes(bytes(data))
    bad = problems(bucket.scrub())
    assert {(f.check, f.severity, f.object_key) for f in bad} == {(checks.TIME_INDEX, "error", key)}
    assert "skip records" in bad[0].message


def test_a_corrupt_manifest(bucket: Bucket) -> None:
    key = bucket.keys("orders", 1, Suffix.MANIFEST)[0]
    bucket.path(key).write_bytes(b'{"version":"1","chunkIndex":')
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.MANIFEST, "error", key)


def test_a_truncated_log_object(bucket: Bucket) -> None:
    key = bucket.keys("inventory", 0, Suffix.LOG)[-1]
    data = bucket.path(key).read_bytes()
    bucket.path(key).write_bytes(data[:-100])
    bad = problems(bucket.scrub())
    assert {(f.check, f.object_key) for f in bad} == {
        (checks.OBJECT_SIZE, key),
        (checks.CHUNK, key),
    }


def test_without_the_key_pair_encrypted_segments_are_not_audited(bucket: Bucket) -> None:
    bad = problems(bucket.scrub(keys=False))
    assert {(f.check, f.topic) for f in bad} == {(checks.DATA_KEY, "payments")}
    assert len(bad) == len(bucket.keys("payments", 0, Suffix.MANIFEST)) + len(
        bucket.keys("payments", 1, Suffix.MANIFEST)
    )


def test_an_unrecognised_key_is_reported_not_crashed_on(bucket: Bucket) -> None:
    (bucket.root / "demo" / "README.txt").write_text("hello")
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (
        checks.UNRECOGNISED_KEY,
        "warning",
        "demo/README.txt",
    )


def _write_plain(bucket: Bucket, segment: LocalSegment, topic: str) -> SegmentObjects:
    """``segment`` as a one-segment partition of a new topic, tiered as is (no transform, so
    its objects' bytes are the segment's own)."""
    meta = segment_metadata(segment, topic=topic, topic_id=uuid.uuid4(), partition=0)
    objects = build_segment_objects(
        segment, meta, key_prefix=bucket.prefix, options=TieringOptions(), keys=KeyRing()
    )
    for suffix, data in (
        (Suffix.LOG, objects.log),
        (Suffix.INDEXES, objects.indexes),
        (Suffix.MANIFEST, objects.manifest_bytes()),
    ):
        path = bucket.path(objects.key.with_suffix(suffix).key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return objects


def _txn_segment(demo: DemoBucket) -> LocalSegment:
    """payments-0's first segment: its index lists one aborted transaction, (5000, 24, 39)."""
    segments = read_segment_dir(demo.root / "segments" / "payments-0", include_active=True)
    segment = next(s for s in segments if s.txn_index)
    assert segment.txn_index is not None
    return segment


@pytest.mark.parametrize("broken", ["wrong marker", "no marker"])
def test_a_txn_index_entry_that_names_no_abort_marker(
    bucket: Bucket, demo: DemoBucket, broken: str
) -> None:
    segment = _txn_segment(demo)
    assert segment.txn_index is not None
    txns = TransactionIndex(segment.txn_index, segment.base_offset).all_aborted_txns()
    first = txns[0]
    last = first.last_offset - 1 if broken == "wrong marker" else first.last_offset + 10**6
    txns[0] = AbortedTxn(first.producer_id, first.first_offset, last, first.last_stable_offset)
    objects = _write_plain(
        bucket, dataclasses.replace(segment, txn_index=encode_txn_index(txns)), "plain-txn"
    )
    bad = problems(bucket.scrub())
    indexes_key = objects.key.with_suffix(Suffix.INDEXES).key
    assert {(f.check, f.severity, f.object_key) for f in bad} == {
        (checks.TXN_INDEX, "error", indexes_key)
    }
    messages = " | ".join(f.message for f in bad)
    if broken == "wrong marker":
        assert f"the batch at offset {last} is not an ABORT marker" in messages
    else:
        assert "its ABORT marker offset lies outside the segment" in messages
    # and the marker it should name has no entry now
    assert f"at offset {first.last_offset} has no transaction index entry" in messages


def test_every_flip_of_a_txn_index_entry_that_changes_reads_is_an_error(
    bucket: Bucket, demo: DemoBucket
) -> None:
    objects = _write_plain(bucket, _txn_segment(demo), "plain-txn")
    indexes_key = objects.key.with_suffix(Suffix.INDEXES).key
    manifest_key = objects.key.with_suffix(Suffix.MANIFEST).key
    piece = objects.manifest.segment_indexes.transaction
    assert piece is not None and piece.size == 34  # one entry
    store = SyncStoreSpec(bucket.url).open()
    original = bucket.path(indexes_key).read_bytes()
    for byte in range(piece.size):
        bucket.path(indexes_key).write_bytes(original)
        bucket.flip(indexes_key, piece.position + byte)
        bad = problems(audit_segment(SyncSegmentReader(store), manifest_key, KeyRing()).findings)
        if byte == 1 or byte >= 26:
            # the version's second byte and lastStableOffset: no reader looks at them
            assert bad == [], byte
            continue
        assert bad, byte
        assert {(f.check, f.severity, f.object_key) for f in bad} == {
            (checks.TXN_INDEX, "error", indexes_key)
        }, byte


def test_every_flip_of_an_offset_index_entry_is_an_error(bucket: Bucket) -> None:
    log_key = bucket.keys("orders", 0, Suffix.LOG)[0]
    key, position, size = _indexes_piece(bucket, log_key, "offset")
    manifest_key = log_key.removesuffix(".log") + ".rsm-manifest"
    store = SyncStoreSpec(bucket.url).open()
    original = bucket.path(key).read_bytes()
    assert size >= 24
    for byte in range(24):  # the first three entries
        bucket.path(key).write_bytes(original)
        bucket.flip(key, position + byte)
        bad = problems(audit_segment(SyncSegmentReader(store), manifest_key, KeyRing()).findings)
        assert {(f.check, f.object_key) for f in bad} == {(checks.OFFSET_INDEX, key)}, byte
        assert any(f.severity == "error" for f in bad), byte


def test_a_truncated_tail_is_an_error_not_the_end_of_the_segment(
    bucket: Bucket, demo: DemoBucket
) -> None:
    # a segment whose last batch is cut short, uploaded with a manifest that agrees with its
    # size (and, as the broker's reader would, with the last whole batch as its end)
    segment = next(read_segment_dir(demo.root / "segments" / "orders-1", include_active=True))
    last = list(iter_batches(segment.log))[-1]
    cut = dataclasses.replace(segment, log=segment.log[: last.position + 40])
    objects = _write_plain(bucket, cut, "cut-tail")
    bad = problems(bucket.scrub())
    log_key = objects.key.key
    assert {f.severity for f in bad} == {"error"}
    [framing] = [f for f in bad if f.object_key == log_key]
    assert framing.check == checks.BATCH_FRAMING
    assert f"record batch at byte {last.position} runs " in framing.message
    # the indexes name the cut batch, past the manifest's end: errors on the .indexes object
    assert {f.object_key for f in bad} <= {log_key, objects.key.with_suffix(Suffix.INDEXES).key}


def _batches(bucket: Bucket, key: str) -> list[RecordBatch]:
    return list(iter_batches(bucket.path(key).read_bytes()))  # an untransformed .log


def test_a_batch_length_past_the_segment_end(bucket: Bucket) -> None:
    key = bucket.keys("orders", 0, Suffix.LOG)[1]
    batch = _batches(bucket, key)[3]
    bucket.flip(key, batch.position + 9)  # batchLength += 0x5A0000
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.BATCH_FRAMING, "error", key)
    assert f"record batch at byte {batch.position} runs " in bad.message
    assert "past the segment's" in bad.message


def test_a_flipped_partition_leader_epoch(bucket: Bucket) -> None:
    # partitionLeaderEpoch is outside the CRC: only the manifest's leader epochs catch it
    for key in bucket.keys("inventory", 0, Suffix.LOG):
        manifest = parse_manifest(bucket.path(key).with_suffix(".rsm-manifest").read_bytes())
        assert manifest.remote_log_segment_metadata is not None
        if len(manifest.remote_log_segment_metadata.segment_leader_epochs) == 2:
            break
    batch = _batches(bucket, key)[-1]
    bucket.flip(key, batch.position + 15)
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.LEADER_EPOCH, "error", key)
    assert f"record batch at byte {batch.position} (offset {batch.base_offset})" in bad.message


def test_batches_that_end_before_the_manifest_end_offset(bucket: Bucket) -> None:
    key = bucket.keys("orders", 0, Suffix.MANIFEST)[-1]  # the last: no segment follows it
    manifest = parse_manifest(bucket.path(key).read_bytes())
    assert manifest.remote_log_segment_metadata is not None
    end = manifest.remote_log_segment_metadata.end_offset
    data = bucket.path(key).read_bytes()
    assert data.count(b'"endOffset":%d' % end) == 1
    bucket.path(key).write_bytes(
        data.replace(b'"endOffset":%d' % end, b'"endOffset":%d' % (end + 2))
    )
    [bad] = problems(bucket.scrub())
    log_key = key.removesuffix(".rsm-manifest") + ".log"
    assert (bad.check, bad.severity, bad.object_key) == (checks.OFFSETS, "error", log_key)
    assert f"batches end at offset {end}; its metadata says {end + 2}" in bad.message


def test_an_index_piece_that_fails_its_tag_is_named(bucket: Bucket) -> None:
    log_key = bucket.keys("payments", 0, Suffix.LOG)[1]
    key, position, size = _indexes_piece(bucket, log_key, "timestamp")
    bucket.flip(key, position + size // 2)
    [bad] = problems(bucket.scrub())
    assert (bad.check, bad.severity, bad.object_key) == (checks.INDEXES, "error", key)
    assert bad.message.startswith("time index at bytes") and "IntegrityError" in bad.message


def test_a_manifest_deleted_after_the_listing_is_only_a_warning(bucket: Bucket) -> None:
    key = bucket.keys("orders", 0, Suffix.MANIFEST)[0]
    bucket.path(key).unlink()
    store = SyncStoreSpec(bucket.url).open()
    audit = audit_segment(SyncSegmentReader(store), key, KeyRing())
    assert [(f.check, f.severity) for f in audit.findings] == [(checks.MISSING_OBJECT, "warning")]


def test_an_unexpected_exception_is_an_internal_finding_not_a_crash(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("gateway.scrub.audit.parse_manifest", boom)
    key = bucket.keys("orders", 0, Suffix.MANIFEST)[0]
    store = SyncStoreSpec(bucket.url).open()
    [finding] = audit_segment(SyncSegmentReader(store), key, KeyRing()).findings
    assert (finding.check, finding.severity) == (checks.INTERNAL, "error")
    assert "RuntimeError: a bug" in finding.message


def test_a_manifest_leader_epoch_map_that_disagrees_with_the_batches(bucket: Bucket) -> None:
    # the reader checks each batch's partitionLeaderEpoch against the manifest's map: a map
    # that moves an epoch's start makes the batches in between fail (the checkpoint in the
    # .indexes, which Kafka derived the map from, disagrees too: a warning, reads ignore it)
    maps = {}
    for key in bucket.keys("inventory", 0, Suffix.MANIFEST):
        meta = parse_manifest(bucket.path(key).read_bytes()).remote_log_segment_metadata
        assert meta is not None
        maps[key] = sorted(meta.segment_leader_epochs, key=lambda e: e[1])
    key = next(k for k, epochs in maps.items() if len(epochs) == 2)
    _, (epoch, start) = maps[key]
    data = bucket.path(key).read_bytes()
    old, new = b'"%d":%d}' % (epoch, start), b'"%d":%d}' % (epoch, start + 1)
    assert data.count(old) == 1
    bucket.path(key).write_bytes(data.replace(old, new))
    bad = problems(bucket.scrub())
    log_key = key.removesuffix(".rsm-manifest") + ".log"
    indexes_key = key.removesuffix(".rsm-manifest") + ".indexes"
    assert {(f.check, f.severity, f.object_key) for f in bad} == {
        (checks.LEADER_EPOCH, "error", log_key),
        (checks.LEADER_EPOCH, "warning", indexes_key),
    }
