"""A topic's broker folders whose segments are tiered into a bucket in steps, with the ``tier``
command, as a broker with the plugin tiers them (for the streaming tests)."""

from __future__ import annotations

import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from gateway.cli import main
from gateway.kafka.uuids import encode_uuid
from tests.spark.support import PartitionData, fill_partition

TOPIC = "events"
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, TOPIC)
PARTITIONS = 2


@dataclass
class Tiered:
    """Broker folders of ``TOPIC`` and a bucket their segments are tiered into, in steps."""

    root: Path
    data: dict[int, PartitionData]

    @property
    def bucket(self) -> Path:
        return self.root / "bucket"

    def folder(self, p: int) -> Path:
        return self.root / "broker" / f"{TOPIC}-{p}"

    def bases(self, p: int) -> list[int]:
        return sorted(int(f.stem) for f in self.folder(p).glob("[0-9]" * 20 + ".log"))

    def tier(
        self,
        segments: int,
        partitions: tuple[int, ...] = tuple(range(PARTITIONS)),
        topic_id: uuid.UUID = TOPIC_ID,
    ) -> None:
        """Tier the first ``segments`` segments of ``partitions`` (what is there is skipped)."""
        for p in partitions:
            bases = self.bases(p)
            stage = self.root / "stage" / f"{TOPIC}-{p}"
            shutil.rmtree(stage, ignore_errors=True)
            stage.mkdir(parents=True)
            last = segments >= len(bases)
            # The segments and the one after them (the active one, which tier leaves alone).
            upto = bases[-1] if last else bases[segments]
            for f in self.folder(p).iterdir():
                if not f.stem.isdigit() or int(f.stem) <= upto:
                    shutil.copy(f, stage / f.name)
            argv = [
                "tier", str(stage), "--store", self.bucket.as_uri(), "--topic", TOPIC,
                "--topic-id", encode_uuid(topic_id), "--partition", str(p),
                "--chunk-size", "1024",
            ]  # fmt: skip
            assert main([*argv, "--include-active"] if last else argv) == 0

    def delete_first_segment(self, p: int) -> int:
        """Retention: the objects of ``p``'s oldest remote segment go; its end offset + 1."""
        manifests = [m for m in self.bucket.rglob("*.rsm-manifest") if m.parent.name == str(p)]
        first = min(manifests, key=lambda m: int(m.name.split("-", 1)[0]))
        start = int(first.name.split("-", 1)[0])
        for sibling in first.parent.glob(first.name.removesuffix(".rsm-manifest") + ".*"):
            sibling.unlink()
        return next(b for b in self.bases(p) if b > start)


def make_tiered(tmp_path: Path) -> Tiered:
    """The broker folders of ``TOPIC`` written under ``tmp_path``, nothing tiered yet."""
    data = {}
    for p in range(PARTITIONS):
        folder = tmp_path / "broker" / f"{TOPIC}-{p}"
        data[p] = fill_partition(folder, random.Random(f"stream-{p}"), batches=70)
    (tmp_path / "bucket").mkdir()
    return Tiered(tmp_path, data)
