"""``tiered-gateway dump FILE...``: a partition folder's files as NDJSON, like ``kafka-dump-log``.

Reads segment ``.log`` files (one line per record, or per batch with ``--batches``; with
``--offsets-decoder`` each record also decoded as a ``__consumer_offsets`` record), offset
(``.index``), time (``.timeindex``) and transaction (``.txnindex``) indexes, producer
snapshots (``.snapshot``) and ``leader-epoch-checkpoint``: one line per entry. An offset index
with its ``.log`` beside it is checked against it (each entry must point at the start of the
batch that ends at its offset). With several files every line starts with ``"file"``. Exit
codes: 0 all good; 1 warnings (a batch failed its CRC, an index failed Kafka's sanity check or
disagrees with its segment, a file was not one of these and was skipped);
2 bad input, as one ``error:`` line, at the first file that cannot be read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, TextIO

from gateway.errors import GatewayError

EXIT_OK = 0
EXIT_WARNINGS = 1
EXIT_BAD_INPUT = 2


def add_parser(sub: Any) -> None:
    d = sub.add_parser(
        "dump",
        help="print segment, index, snapshot and checkpoint files as NDJSON",
    )
    d.add_argument(
        "files",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="a .log, .index, .timeindex, .txnindex, .snapshot or leader-epoch-checkpoint file",
    )
    d.add_argument("--batches", action="store_true", help="one line per batch, not per record")
    d.add_argument(
        "--verify-crc",
        action="store_true",
        help="stop with exit code 2 at the first batch whose CRC fails (default: warn)",
    )
    d.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode records as __consumer_offsets records (offset commits, group metadata)",
    )


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes; segments are often 1 GiB, so they are mapped, not read."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        data: bytes | mmap.mmap = (
            mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        )
    try:
        yield data
    finally:
        if isinstance(data, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view still alive: freed with it
                data.close()


def _lines(
    args: argparse.Namespace, path: Path, kind: str, data: bytes | mmap.mmap, report: Any
) -> Generator[dict[str, Any], None, None]:
    from gateway.kafka import dump as core  # noqa: PLC0415 - keep startup light

    if kind == "log":
        yield from core.dump(
            data,
            batches=args.batches,
            verify_crc=args.verify_crc,
            report=report,
            offsets_decoder=args.offsets_decoder,
        )
        return
    small = bytes(data)  # indexes, snapshots and checkpoints are small: a copy, no live view
    if kind == "snapshot":
        yield from core.snapshot_lines(small)
    elif kind == "checkpoint":
        yield from core.checkpoint_lines(small)
    elif kind == "index" and path.with_suffix(".log").is_file():
        with _mapped(path.with_suffix(".log")) as log:  # entries are checked against it
            yield from core.index_lines(kind, small, core.base_offset_of(path.name), report, log)
    else:
        yield from core.index_lines(kind, small, core.base_offset_of(path.name), report)


def _dump_one(args: argparse.Namespace, path: Path, out: TextIO, tag: bool) -> int:
    from gateway.kafka.dump import DumpReport, file_kind  # noqa: PLC0415

    kind = file_kind(path.name)
    if kind is None:
        print(
            f"warning: {path}: not a .log, .index, .timeindex, .txnindex, .snapshot or "
            "leader-epoch-checkpoint file: skipped",
            file=sys.stderr,
        )
        return EXIT_WARNINGS
    report = DumpReport()
    try:
        with _mapped(path) as data:
            lines = _lines(args, path, kind, data, report)
            try:
                for line in lines:
                    row = {"file": str(path), **line} if tag else line
                    out.write(json.dumps(row, separators=(",", ":")))
                    out.write("\n")
            finally:
                lines.close()  # its views into the map go before the map does
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"error: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except GatewayError as exc:
        out.flush()
        print(f"error: {path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for batch in report.bad_crc:
        print(
            f"warning: {path}: batch at position {batch.position} "
            f"(base offset {batch.base_offset}) fails its CRC check",
            file=sys.stderr,
        )
    for problem in report.failed_checks:
        print(f"warning: {path}: {problem}", file=sys.stderr)
    return EXIT_WARNINGS if report.bad_crc or report.failed_checks else EXIT_OK


def run(args: argparse.Namespace) -> int:
    code = EXIT_OK
    tag = len(args.files) > 1
    for path in args.files:
        result = _dump_one(args, path, sys.stdout, tag)
        if result == EXIT_BAD_INPUT:
            return result
        code = max(code, result)
    return code
