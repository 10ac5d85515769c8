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

A segment is mirrored once all its files are there (``LocalTieredStorage`` writes its
leader-epoch checkpoint last), or, while uploads are held (``hold-uploads``), as soon as its
``.log`` is: so the bucket holds a segment whose copy never finished, which a gateway
following the topic must not serve.
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


class Mirror:
    """Keeps ``bucket`` in step with what ``broker``'s ``LocalTieredStorage`` holds, by its
    files alone (a pass every 50 ms: the objects are there before, or within a pass of, the
    FINISHED record, as the plugin's are before it)."""

    def __init__(self, broker: TieringBroker, bucket: Path) -> None:
        self.broker, self.bucket = broker, bucket
        self.mirrored: dict[Path, ManifestSegmentMetadata] = {}  # LTS .log -> what was written
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
            complete = log.with_suffix(".leader_epoch_checkpoint").exists()
            if complete or held:
                self.mirrored[log] = self._write(log, complete)
        for log in set(self.mirrored) - logs:
            self._remove(self.mirrored.pop(log))

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
