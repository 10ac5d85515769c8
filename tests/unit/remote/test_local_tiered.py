"""``--layout local-tiered-storage``: Kafka's ``LocalTieredStorage`` files read as the Aiven
layout (gateway/remote/local_tiered.py). The files here are a segment the project's writer
made, named as ``LocalTieredStorage`` names them; the real broker's are read by
``make real-kafka`` (check ``local-tiered-storage``)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from gateway.errors import ObjectNotFoundError, StorageError
from gateway.kafka.batch import iter_batches
from gateway.kafka.demo import write_demo_segment
from gateway.kafka.uuids import encode_uuid
from gateway.remote.keys import ObjectKey, Suffix
from gateway.remote.local_tiered import ROOT, LocalTieredStorageView
from gateway.remote.manifest import IndexType, parse_manifest
from gateway.storage.filesystem import FilesystemStore

TOPIC_ID, SEGMENT_ID = uuid.UUID(int=0xABC), uuid.UUID(int=0xDEF)
KEY = ObjectKey("", "orders-eu", TOPIC_ID, 3, 0, SEGMENT_ID, Suffix.MANIFEST)


def lts_folder(root: Path, *, complete: bool = True) -> Path:
    """One segment as ``LocalTieredStorage`` keeps it (a topic name with a dash in it)."""
    files = write_demo_segment(root / "broker")
    folder = root / "lts" / ROOT / f"orders-eu-3-{encode_uuid(TOPIC_ID)}"
    folder.mkdir(parents=True)
    stem = f"{0:020d}-{encode_uuid(SEGMENT_ID)}"
    pieces = {
        "log": files.log,
        "index": files.offset_index,
        "timeindex": files.time_index,
        "snapshot": files.producer_snapshot,
        "txnindex": files.txn_index,
        "leader_epoch_checkpoint": files.leader_epoch_checkpoint if complete else None,
    }
    for ext, path in pieces.items():
        if path is not None:
            shutil.copyfile(path, folder / f"{stem}.{ext}")
    return root / "lts"


async def test_a_segment_reads_as_the_plugins_three_objects(tmp_path: Path) -> None:
    root = lts_folder(tmp_path)
    view = LocalTieredStorageView(FilesystemStore(root))
    listed = [info.key async for info in view.list("")]
    assert listed == sorted(KEY.with_suffix(s).key for s in Suffix)
    folder = next((root / ROOT).iterdir())
    log = next(folder.glob("*.log")).read_bytes()
    assert await view.get(KEY.with_suffix(Suffix.LOG).key) == log
    assert await view.get_range(KEY.with_suffix(Suffix.LOG).key, 10, 20) == log[10:20]
    manifest = parse_manifest(await view.get(KEY.key), KEY.key)
    meta = manifest.remote_log_segment_metadata
    assert meta is not None
    batches = list(iter_batches(log))
    assert (meta.topic, meta.partition, meta.segment_id) == ("orders-eu", 3, SEGMENT_ID)
    assert (meta.start_offset, meta.end_offset) == (0, batches[-1].last_offset)
    assert meta.max_timestamp_ms == max(b.max_timestamp for b in batches)
    assert meta.segment_leader_epochs == ((0, 0), (3, batches[6].base_offset))
    assert manifest.chunk_index.original_file_size == len(log)
    assert not manifest.compression and manifest.encryption is None
    indexes = await view.get(KEY.with_suffix(Suffix.INDEXES).key)
    stem = next(folder.glob("*.log")).stem
    for kind, ext in ((IndexType.OFFSET, "index"), (IndexType.LEADER_EPOCH,
                      "leader_epoch_checkpoint"), (IndexType.TRANSACTION, "txnindex")):  # fmt: skip
        piece = manifest.segment_indexes[kind]
        assert piece is not None
        assert indexes[piece.position : piece.end] == (folder / f"{stem}.{ext}").read_bytes()
    head = await view.head(KEY.key)
    assert head.size == len(await view.get(KEY.key))


async def test_a_copy_in_flight_has_no_manifest(tmp_path: Path) -> None:
    """No leader-epoch checkpoint yet (LocalTieredStorage writes it last): not listed, and
    its manifest is not found, as the plugin writes its manifest last."""
    view = LocalTieredStorageView(FilesystemStore(lts_folder(tmp_path, complete=False)))
    assert [info.key async for info in view.list("")] == []
    with pytest.raises(ObjectNotFoundError):
        await view.get(KEY.key)


async def test_the_view_is_read_only_and_refuses_other_keys(tmp_path: Path) -> None:
    view = LocalTieredStorageView(FilesystemStore(lts_folder(tmp_path)))
    with pytest.raises(StorageError, match="read-only"):
        await view.put(KEY.key, b"x")
    with pytest.raises(StorageError, match="read-only"):
        await view.delete(KEY.key)
    with pytest.raises(ObjectNotFoundError):
        await view.get("not/an/aiven/key")
    assert [i.key async for i in view.list("orders-eu-")] == sorted(
        KEY.with_suffix(s).key for s in Suffix
    )
    assert [i.key async for i in view.list("payments-")] == []
