"""``tiered-gateway tier``: upload a broker's partition folder as Aiven's plugin would.

One NDJSON line per segment on stdout. A segment the store already holds (same prefix, topic,
topic id, partition, start and end offsets, and original size, read from the partition's
manifests) is not uploaded again: its line has ``"skipped": true``, a reason, and the stored
segment's key; ``--force`` uploads it anyway (a second copy under a new segment id, as a
broker re-upload would be).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.commands.common import (
    add_key_pair_arg,
    add_state_dir_arg,
    add_store_args,
    open_store_from,
)
from gateway.errors import ConfigurationError

if TYPE_CHECKING:
    from gateway.remote.manifest import ManifestSegmentMetadata
    from gateway.remote.tiering import LocalSegment


def add_parser(sub: Any) -> None:
    t = sub.add_parser("tier", help="upload a broker's segment folder as Aiven's plugin would")
    t.add_argument("segment_dir", type=Path, help="a partition folder with rolled segments")
    add_store_args(t)
    t.add_argument("--topic", required=True)
    t.add_argument("--topic-id", required=True, help="Kafka topic id (base64url or UUID form)")
    t.add_argument("--partition", type=int, required=True)
    t.add_argument("--chunk-size", type=int, default=4 * 1024 * 1024, help="bytes per chunk")
    t.add_argument("--compression", action="store_true", help="zstd-compress each chunk")
    t.add_argument(
        "--compression-heuristic",
        action="store_true",
        help="compress only segments whose first batch is uncompressed",
    )
    t.add_argument(
        "--include-active",
        action="store_true",
        help="also tier the newest segment (only for a folder no broker appends to any more)",
    )
    t.add_argument("--encrypt-with", metavar="KEY_ID", help="encrypt with this key pair")
    add_key_pair_arg(t)
    t.add_argument(
        "--force",
        action="store_true",
        help="upload segments the store already holds again (default: skip them)",
    )
    add_state_dir_arg(
        t, "register each segment in the catalog kept in DIR (STARTED, upload, FINISHED)"
    )


def _line(row: dict[str, Any]) -> None:
    print(json.dumps(row, separators=(",", ":")))


async def _tier(args: argparse.Namespace) -> int:
    from gateway.kafka.uuids import parse_topic_id  # noqa: PLC0415
    from gateway.remote.keyring import KeyRing  # noqa: PLC0415
    from gateway.remote.tiering import (  # noqa: PLC0415
        TieringOptions,
        build_segment_objects,
        read_segment_dir,
        segment_metadata,
        upload_segment,
        uploaded_segments,
    )
    from gateway.storage.filesystem import FilesystemStore  # noqa: PLC0415

    options = TieringOptions(
        chunk_size=args.chunk_size,
        compression=args.compression,
        compression_heuristic=args.compression_heuristic,
        encrypt_with=args.encrypt_with,
    )
    keys = KeyRing.from_specs(args.key_pair)
    if args.encrypt_with is not None and args.encrypt_with not in keys:
        raise ConfigurationError(f"--encrypt-with {args.encrypt_with!r}: no such --key-pair")
    topic_id = parse_topic_id(args.topic_id, "--topic-id")
    if not args.segment_dir.is_dir():
        raise ConfigurationError(f"{args.segment_dir} is not a directory")
    segments = await asyncio.to_thread(
        lambda: list(read_segment_dir(args.segment_dir, include_active=args.include_active))
    )

    def describe(segment: LocalSegment) -> ManifestSegmentMetadata:
        return segment_metadata(
            segment, topic=args.topic, topic_id=topic_id, partition=args.partition
        )

    metas = await asyncio.to_thread(lambda: [describe(s) for s in segments])
    store = await open_store_from(args)
    if isinstance(store, FilesystemStore):
        store.root.mkdir(parents=True, exist_ok=True)  # a new bucket: listing it finds nothing
    manager = None
    if args.state_dir is not None:
        from gateway.metadata.lifecycle import upload_registered  # noqa: PLC0415
        from gateway.metadata.open import open_manager  # noqa: PLC0415

        manager = open_manager(args.state_dir)
    try:
        stored = {}
        if metas and not args.force:
            stored = await uploaded_segments(
                store, metas[0].object_key(args.key_prefix), (m.start_offset for m in metas)
            )
        for segment, meta in zip(segments, metas, strict=True):
            there = stored.get((meta.start_offset, meta.end_offset, len(segment.log)))
            if there is not None:
                _line(
                    {
                        "key": there.key.key,
                        "start_offset": meta.start_offset,
                        "end_offset": meta.end_offset,
                        "size": len(segment.log),
                        "skipped": True,
                        "reason": "already in the store (--force uploads it again)",
                    }
                )
                continue
            # compression, encryption and the key wrap are CPU work: off the event loop
            objects = await asyncio.to_thread(
                build_segment_objects,
                segment,
                meta,
                key_prefix=args.key_prefix,
                options=options,
                keys=keys,
            )
            if manager is not None:
                await upload_registered(store, objects, manager)
            else:
                await upload_segment(store, objects)
            _line(
                {
                    "key": objects.key.key,
                    "start_offset": meta.start_offset,
                    "end_offset": meta.end_offset,
                    "size": len(segment.log),
                    "stored_size": len(objects.log),
                    "chunks": objects.manifest.chunk_index.chunk_count,
                    "compression": objects.manifest.compression,
                    "encrypted_with": args.encrypt_with,
                }
            )
    finally:
        await store.close()
        if manager is not None:
            manager.close()
    if not segments:
        print(
            f"warning: no rolled segment in {args.segment_dir} (the newest is the active one; "
            "--include-active tiers it too)",
            file=sys.stderr,
        )
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_tier(args))
