"""The ``tiered-gateway`` console script."""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway import __version__
from gateway.errors import GatewayError

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


def _demo_segment(args: argparse.Namespace) -> int:
    from gateway.kafka.demo import write_demo_segment  # noqa: PLC0415

    files = write_demo_segment(args.out)
    print(f"wrote demo segment {files.log}", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "dump":
        return _dump(args)
    if args.command == "demo-segment":
        return _demo_segment(args)
    raise AssertionError(args.command)  # argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
