"""Kafka's own ``LocalTieredStorage`` uploads, laid out as the Aiven plugin lays them out.

On machines without the Aiven plugin (it is not on Maven Central, see
``tests/fixtures/real_kafka/README.md``) the live metadata checks run a real broker that tiers
with ``LocalTieredStorage``: the broker's ``__remote_log_metadata`` records, its segment files,
its leader-epoch checkpoints (cut at the log start by DeleteRecords) and its deletions are all
real. The gateway reads the Aiven layout, so this mirror writes each uploaded segment's files
as the plugin's three objects (``.log``, ``.indexes``, ``.rsm-manifest``) under the segment id
the broker gave it (from its file name), with the gateway's own tiering writer (plain chunks),
and removes them when the broker's storage no longer holds the segment. The data bytes are the
broker's; only the object layout is ours. With the plugin at hand the same checks run on the
plugin's bucket instead (:mod:`tests.realkafka.follow_scenarios`).

A segment is mirrored once all its files are written, or, while uploads are held
(``hold-uploads``), as soon as its ``.log`` is: so the bucket holds a segment whose copy never
finished, which a gateway following the topic must not serve. ``LocalTieredStorage`` writes a
segment's files one after the other, the leader-epoch checkpoint and then the producer
snapshot last (``RemoteLogSegmentFileset.copy``), each created before it is written. So a
segment is complete when its snapshot is there and no file of it changed size since the pass
before. (The checkpoint's mere presence was taken for completeness before; a checkpoint read
while still empty is written as the default ``0 <base>``, which hides a log start DeleteRecords
cut: the likely cause of a CI run where the mirrored bucket never revealed it.)
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from gateway.kafka.uuids import decode_uuid
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix
from gateway.remote.manifest import ManifestSegmentMetadata
from gateway.remote.tiering import (
    LocalSegment,
    TieringOptions,
    build_segment_objects,
    segment_metadata,
)
from tests.realkafka.tiering import HOLD_FILE, TieringBroker

CHUNK = 4096
_WRITTEN_IN_ORDER = (".log", ".index", ".timeindex", ".txnindex", ".leader_epoch_checkpoint",
                     ".snapshot")  # fmt: skip


class Mirror:
    """Keeps ``bucket`` in step with what ``broker``'s ``LocalTieredStorage`` holds, by its
    files alone (a pass every 50 ms: the objects are there before, or within a pass of, the
    FINISHED record, as the plugin's are before it)."""

    def __init__(self, broker: TieringBroker, bucket: Path) -> None:
        self.broker, self.bucket = broker, bucket
        self.mirrored: dict[Path, ManifestSegmentMetadata] = {}  # LTS .log -> what was written
        self._sizes: dict[Path, tuple[int, ...]] = {}  # LTS .log -> its files' sizes last pass
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lts-mirror", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> Mirror:
        self.bucket.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.sync()
            except Exception as e:  # a file half written: the next pass reads it again
                self.errors.append(f"{type(e).__name__}: {e}")

    def sync(self) -> None:
        """One pass over the storage folder."""
        root = self.broker.remote_dir / "kafka-tiered-storage"
        held = (self.broker.remote_dir / HOLD_FILE).exists()
        logs = set(root.glob("*/*.log")) if root.exists() else set()
        for log in sorted(logs - set(self.mirrored)):
            sizes = self._file_sizes(log)
            complete = sizes[-1] >= 0 and self._sizes.get(log) == sizes  # snapshot: last file
            self._sizes[log] = sizes
            if complete or held:
                self.mirrored[log] = self._write(log, complete)
                del self._sizes[log]
        for log in set(self.mirrored) - logs:
            self._remove(self.mirrored.pop(log))

    @staticmethod
    def _file_sizes(log: Path) -> tuple[int, ...]:
        """The sizes of the segment's files in the order they are written (-1: not there)."""
        sizes = []
        for suffix in _WRITTEN_IN_ORDER:
            try:
                sizes.append(log.with_suffix(suffix).stat().st_size)
            except FileNotFoundError:
                sizes.append(-1)
        return tuple(sizes)

    def _write(self, log: Path, complete: bool) -> ManifestSegmentMetadata:
        def read(suffix: str) -> bytes | None:
            path = log.with_suffix(suffix)
            return path.read_bytes() if path.exists() else None

        folder, (offset, segment_id) = log.parent.name, log.stem.split("-", 1)
        topic_partition, topic_id = folder[:-23], decode_uuid(folder[-22:])
        topic, partition = topic_partition.rsplit("-", 1)
        base = int(offset)
        checkpoint = read(".leader_epoch_checkpoint") if complete else None
        segment = LocalSegment(
            base_offset=base,
            log=read(".log") or b"",
            offset_index=read(".index") or b"",
            time_index=read(".timeindex") or b"",
            producer_snapshot=read(".snapshot") or b"",
            leader_epoch_checkpoint=checkpoint or f"0\n1\n0 {base}\n".encode(),
            txn_index=read(".txnindex"),
        )
        meta = dataclasses.replace(
            segment_metadata(segment, topic=topic, topic_id=topic_id, partition=int(partition)),
            segment_id=decode_uuid(segment_id),
        )
        objects = build_segment_objects(
            segment, meta, key_prefix="", options=TieringOptions(CHUNK), keys=KeyRing()
        )
        for key, data in (
            (objects.key, objects.log),
            (objects.key.with_suffix(Suffix.INDEXES), objects.indexes),
            (objects.key.with_suffix(Suffix.MANIFEST), objects.manifest_bytes()),
        ):  # the plugin's order: the manifest last
            path = self.bucket / key.key
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(data)
            tmp.rename(path)
        return meta

    def _remove(self, meta: ManifestSegmentMetadata) -> None:
        """The plugin's order on deletion: the manifest first."""
        for suffix in (Suffix.MANIFEST, Suffix.INDEXES, Suffix.LOG):
            (self.bucket / meta.object_key("", suffix).key).unlink(missing_ok=True)
