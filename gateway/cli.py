"""The ``tiered-gateway`` console script."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import mmap
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gateway import __version__
from gateway.commands import catalog, export, scrub, serve
from gateway.errors import ConfigurationError, GatewayError

EXIT_OK = 0
EXIT_CRC_WARNINGS = 1
EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tiered-gateway",
        description="Serve Kafka tiered-storage history straight from the bucket.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("dump", help="print a segment .log file as NDJSON")
    d.add_argument("file", type=Path, help="a Kafka segment .log file")
    d.add_argument("--batches", action="store_true", help="one line per batch, not per record")
    d.add_argument(
        "--verify-crc",
        action="store_true",
        help="stop with exit code 2 at the first batch whose CRC fails (default: warn)",
    )

    t = sub.add_parser("tier", help="upload a broker's segment folder as Aiven's plugin would")
    t.add_argument("segment_dir", type=Path, help="a partition folder with rolled segments")
    t.add_argument("--store", required=True, help="file:///abs/dir or s3://bucket")
    t.add_argument("--key-prefix", default="", help="object key prefix (e.g. 'tiered/')")
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
    t.add_argument(
        "--key-pair", action="append", default=[], metavar="ID=PEM", help="an RSA key pair"
    )
    t.add_argument("--s3-endpoint-url", help="S3 endpoint (MinIO, moto, ...)")
    t.add_argument("--s3-region")
    t.add_argument("--s3-path-style", action="store_true")

    t.add_argument(
        "--state-dir",
        type=Path,
        help="register each segment in the catalog kept in DIR (STARTED, upload, FINISHED)",
    )

    catalog.add_parser(sub)
    export.add_parser(sub)
    scrub.add_parser(sub)
    serve.add_parser(sub)

    g = sub.add_parser("demo-segment", help="write a demo segment folder, as a broker would")
    g.add_argument("--out", type=Path, required=True, help="folder to write the segment files to")
    return p


def _dump(args: argparse.Namespace) -> int:
    from gateway.kafka.dump import DumpReport, dump  # noqa: PLC0415 - keep startup light

    try:
        with args.file.open("rb") as fh:
            # Segments are often 1 GiB: map the file, batches are views into the map.
            size = os.fstat(fh.fileno()).st_size
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = DumpReport()
    lines = dump(data, batches=args.batches, verify_crc=args.verify_crc, report=report)
    out = sys.stdout
    try:
        for line in lines:
            out.write(json.dumps(line, separators=(",", ":")))
            out.write("\n")
    except GatewayError as exc:
        out.flush()
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `dump ... | head` is normal use
        return EXIT_OK
    finally:
        lines.close()
        if isinstance(data, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view still alive: freed with it
                data.close()
    for batch in report.bad_crc:
        print(
            f"warning: {args.file}: batch at position {batch.position} "
            f"(base offset {batch.base_offset}) fails its CRC check",
            file=sys.stderr,
        )
    return EXIT_CRC_WARNINGS if report.bad_crc else EXIT_OK


async def _tier_async(args: argparse.Namespace) -> int:
    from gateway.remote.keyring import KeyRing  # noqa: PLC0415
    from gateway.remote.keys import parse_topic_id  # noqa: PLC0415
    from gateway.remote.manifest import RemoteLogSegmentMetadata  # noqa: PLC0415
    from gateway.remote.tiering import (  # noqa: PLC0415
        LocalSegment,
        SegmentObjects,
        TieringOptions,
        build_segment_objects,
        read_segment_dir,
        segment_metadata,
        upload_segment,
    )
    from gateway.storage.factory import open_store  # noqa: PLC0415

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
    store = await open_store(
        args.store,
        endpoint_url=args.s3_endpoint_url,
        region=args.s3_region,
        path_style=args.s3_path_style,
    )
    count = 0
    manager = None
    if args.state_dir is not None:
        from gateway.metadata.lifecycle import upload_registered  # noqa: PLC0415
        from gateway.metadata.open import open_manager  # noqa: PLC0415

        manager = open_manager(args.state_dir)

    def build(segment: LocalSegment) -> tuple[RemoteLogSegmentMetadata, SegmentObjects]:
        meta = segment_metadata(
            segment, topic=args.topic, topic_id=topic_id, partition=args.partition
        )
        objects = build_segment_objects(
            segment, meta, key_prefix=args.key_prefix, options=options, keys=keys
        )
        return meta, objects

    try:
        segments = await asyncio.to_thread(
            lambda: list(read_segment_dir(args.segment_dir, include_active=args.include_active))
        )
        for segment in segments:
            # compression, encryption and the key wrap are CPU work: off the event loop
            meta, objects = await asyncio.to_thread(build, segment)
            if manager is not None:
                await upload_registered(store, objects, manager)
            else:
                await upload_segment(store, objects)
            count += 1
            print(
                json.dumps(
                    {
                        "key": objects.key.key,
                        "start_offset": meta.start_offset,
                        "end_offset": meta.end_offset,
                        "size": len(segment.log),
                        "stored_size": len(objects.log),
                        "chunks": objects.manifest.chunk_index.chunk_count,
                        "compression": objects.manifest.compression,
                        "encrypted_with": args.encrypt_with,
                    },
                    separators=(",", ":"),
                )
            )
    finally:
        await store.close()
        if manager is not None:
            manager.close()
    if count == 0:
        print(
            f"warning: no rolled segment in {args.segment_dir} (the newest is the active one; "
            "--include-active tiers it too)",
            file=sys.stderr,
        )
    return EXIT_OK


def _guarded(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command; a domain or OS error is one ``error:`` line and exit code 2."""
    try:
        return command(args)
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _demo_segment(args: argparse.Namespace) -> int:
    from gateway.kafka.demo import write_demo_segment  # noqa: PLC0415

    files = write_demo_segment(args.out)
    print(f"wrote demo segment {files.log}", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "dump":
        return _dump(args)
    if args.command == "tier":
        return _guarded(lambda a: asyncio.run(_tier_async(a)), args)
    if args.command == "catalog":
        return _guarded(catalog.run, args)
    if args.command == "export":
        return _guarded(export.run, args)
    if args.command == "scrub":
        return _guarded(scrub.run, args)
    if args.command in ("serve", "demo"):
        return _guarded(serve.run, args)
    if args.command == "demo-segment":
        return _demo_segment(args)
    raise AssertionError(args.command)  # argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
