"""A demo segment tiered into a filesystem bucket, opened as the service opens it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from gateway.kafka.demo import write_demo_segment
from gateway.metadata.manifests import metadata_from_manifest
from gateway.metadata.model import RemoteLogSegmentMetadata
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import ObjectKey, Suffix
from gateway.remote.manifest import parse_manifest
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.remote.tiering import (
    TieringOptions,
    build_segment_objects,
    read_segment_dir,
    segment_metadata,
    upload_segment,
)
from gateway.storage.filesystem import FilesystemStore
from gateway.storage.retry import Retrier, RetryPolicy

Tiered = tuple[SegmentReader, RemoteSegment, bytes]
KEY_PREFIX = "p/"


@dataclass(frozen=True, slots=True)
class DemoTiered:
    store: FilesystemStore
    meta: RemoteLogSegmentMetadata
    key: ObjectKey  # the .log object's
    log: bytes  # the original segment bytes


async def tier_demo(tmp_path: Path, options: TieringOptions) -> DemoTiered:
    """The demo segment tiered into a filesystem bucket under ``tmp_path``."""
    write_demo_segment(tmp_path / "seg")
    (segment,) = read_segment_dir(tmp_path / "seg", include_active=True)
    meta = segment_metadata(segment, topic="t", topic_id=uuid.uuid4(), partition=0)
    objects = build_segment_objects(
        segment, meta, key_prefix=KEY_PREFIX, keys=KeyRing(), options=options
    )
    store = FilesystemStore(tmp_path / "bucket")
    await upload_segment(store, objects)
    key = objects.key.with_suffix(Suffix.MANIFEST)
    return DemoTiered(
        store, metadata_from_manifest(key, objects.manifest), objects.key, segment.log
    )


@asynccontextmanager
async def tiered_demo(tmp_path: Path, options: TieringOptions) -> AsyncIterator[Tiered]:
    """A reader (one attempt per GET), the opened segment, and its original bytes."""
    demo = await tier_demo(tmp_path, options)
    key = demo.key.with_suffix(Suffix.MANIFEST)
    remote = RemoteSegment.open(key, parse_manifest(await demo.store.get(key.key)), KeyRing())
    with ThreadPoolExecutor(2) as pool:
        reader = SegmentReader(demo.store, Retrier(RetryPolicy(max_attempts=1)), pool)
        yield reader, remote, demo.log
