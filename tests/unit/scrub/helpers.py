"""A writable copy of the demo bucket and the one-call audit the scrub tests share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.demo import DemoBucket
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix, parse_object_key
from gateway.remote.sync_reader import SyncSegmentReader
from gateway.scrub import Finding, audit_segment, check_continuity, inventory
from gateway.storage.sync import SyncStoreSpec
from tests.fixtures.demo import copy_demo_bucket


@dataclass
class Bucket:
    """A private copy of the demo bucket: its objects are files under ``root``."""

    demo: DemoBucket
    root: Path  # the filesystem store root
    prefix: str

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def path(self, key: str) -> Path:
        return self.root / key

    def keys(self, topic: str, partition: int, suffix: Suffix) -> list[str]:
        """The keys of one partition's objects with ``suffix``, by start offset."""
        found = []
        for path in self.root.rglob(f"*.{suffix.value}"):
            key = path.relative_to(self.root).as_posix()
            parsed = parse_object_key(key, self.prefix)
            if parsed.topic == topic and parsed.partition == partition:
                found.append((parsed.start_offset, key))
        return [k for _, k in sorted(found)]

    def flip(self, key: str, position: int) -> None:
        data = bytearray(self.path(key).read_bytes())
        data[position] ^= 0x5A
        self.path(key).write_bytes(bytes(data))

    def scrub(self, *, keys: bool = True, grace: float = 0.0) -> list[Finding]:
        """Inventory + every segment audit + continuity, as the job does, without Spark."""
        store = SyncStoreSpec(self.url).open()
        ring = KeyRing.from_specs([self.demo.key_pair_spec] if keys else [])
        inv = inventory(store, self.prefix, upload_grace_s=grace)
        reader = SyncSegmentReader(store)
        findings = list(inv.findings)
        ranges = []
        for seg in inv.segments:
            audit = audit_segment(reader, seg.manifest_key, ring, sizes=seg.sizes)
            findings += audit.findings
            if audit.range is not None:
                ranges.append(audit.range)
        return findings + check_continuity(ranges)


def copy_bucket(demo: DemoBucket, into: Path) -> Bucket:
    return Bucket(demo, copy_demo_bucket(demo, into), demo.key_prefix)


def problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity != "info"]
