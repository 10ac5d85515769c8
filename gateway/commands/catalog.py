"""``tiered-gateway catalog scan|ls``: what the bucket holds, as the RLMM sees it.

``scan`` lists every ``.rsm-manifest`` under the prefix, registers the segments (into the
SQLite state of ``--state-dir`` when given, incrementally, else in memory) and prints per topic
and partition: topic id, segment count, remote start and end offsets, total size, epochs.
``REMOTE_LOG_END_OFFSET`` is Kafka's end offset, one past the highest remote offset, as the
HTTP API's ``remote_log_end_offset`` (so ``end - start`` offsets are remote). The
leader-epoch lineage comes from the newest segment's checkpoint (``--key-pair`` opens
encrypted ones). ``ls`` prints one partition's segments with their states, from
``--state-dir`` alone or after a scan of ``--store``; a finished segment a later upload of the
same offsets displaced (no read reaches it) says so (``DISPLACED_BY``: the segment now holding
its first offset).

A manifest that cannot be read (corrupt, no segment metadata, metadata that disagrees with its
key) still claims its offsets: ``scan`` lists it after the partitions (``UNREADABLE``: topic,
partition, the start offset from its key, the key and the reason; ``"unreadable"`` in
``--json``, and a count per partition row).

Exit codes (``EXIT_CODES``): 0 all read; 1 when the scan skipped manifests (each is named on
stderr, with the reason); 2 for errors, among them a store fault (a listing or read that fails:
the scan is aborted and a ``--state-dir`` catalog is left exactly as it was, never read as
deleted segments); 3 when the scan found no manifest under the prefix (a wrong
``--key-prefix``, a missing folder: a ``warning:`` on stderr says what lies around it, with a
did-you-mean). Output cut short by its reader (``catalog ls | head``) is not an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from gateway.commands.common import add_key_pair_arg, add_state_dir_arg, add_store_args
from gateway.errors import ConfigurationError
from gateway.metadata.open import open_manager

if TYPE_CHECKING:
    from gateway.metadata.bucket import BucketScan
    from gateway.metadata.listing import ListedSegment
    from gateway.metadata.manager import RemoteLogMetadataManager
    from gateway.metadata.manifests import UnreadableSegment
    from gateway.metadata.model import TopicIdPartition

EXIT_OK = 0
EXIT_SKIPPED = 1
EXIT_EMPTY = 3
EXIT_CODES = (
    "exit codes: 0 all read; 1 some manifests skipped (named on stderr); 2 error (store fault, "
    "bad option); 3 no manifest under the key prefix (a warning says what lies around it)"
)


def add_parser(sub: Any) -> None:
    c = sub.add_parser("catalog", help="list the remote segments of a bucket (the RLMM view)")
    csub = c.add_subparsers(dest="catalog_command", required=True)
    s = csub.add_parser(
        "scan",
        help="scan the bucket's manifests; one line per partition",
        description="One line per partition. REMOTE_LOG_END_OFFSET is one past the highest "
        "remote offset (Kafka's end offset, as the HTTP API's remote_log_end_offset).",
        epilog=EXIT_CODES,
    )
    add_store_args(s)
    add_key_pair_arg(s)
    add_state_dir_arg(s, "keep the catalog in DIR (SQLite); later scans are incremental")
    s.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    f = csub.add_parser(
        "follow",
        help="read the cluster's __remote_log_metadata to its end; one line per partition",
        description="The catalog as the cluster's metadata topic says it is (no listing): "
        "read up to the end offsets seen at start, then printed as by scan. With --store, each "
        "partition's newest leader-epoch checkpoint is read (the log start it reveals). The "
        "client's security settings come from the environment or --config (docs/"
        "configuration.md, metadata_*).",
        epilog="exit codes: 0 read to its end; 2 error (the cluster not reached in time: "
        "metadata_unavailable, bad option)",
    )
    add_store_args(f, required=False)
    add_key_pair_arg(f)
    add_state_dir_arg(f, "keep the catalog and its position in DIR (SQLite); a rerun resumes")
    f.add_argument("--metadata-bootstrap", metavar="HOST:PORT,...", help="the cluster")
    f.add_argument(
        "--metadata-topic-filter",
        action="append",
        metavar="TOPIC",
        help="follow only the metadata partitions of TOPIC (repeat)",
    )
    f.add_argument("--timeout-s", type=float, default=120.0, help="give up after (default 120)")
    f.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    ls = csub.add_parser(
        "ls",
        help="the segments of one partition with their states",
        description="One line per segment; DISPLACED_BY names the segment that took over the "
        "offsets of a finished segment no read reaches any more.",
        epilog=EXIT_CODES,
    )
    add_store_args(ls, required=False)
    add_key_pair_arg(ls)
    add_state_dir_arg(ls, "read (and with --store, update) the catalog kept in DIR")
    ls.add_argument("--topic", required=True)
    ls.add_argument("--topic-id", help="pick one incarnation of a re-created topic")
    ls.add_argument("--partition", type=int, required=True)
    ls.add_argument("--json", action="store_true", help="NDJSON, one segment per line")


def _unreadable_row(tp: TopicIdPartition, entry: UnreadableSegment) -> dict[str, Any]:
    from gateway.kafka.uuids import encode_uuid  # noqa: PLC0415

    return {
        "topic": tp.topic,
        "topic_id": encode_uuid(tp.topic_id),
        "partition": tp.partition,
        "start_offset": entry.start_offset,
        "key": entry.key,
        "reason": entry.reason,
    }


def _partition_row(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> dict[str, Any]:
    from gateway.kafka.uuids import encode_uuid  # noqa: PLC0415

    last = rlmm.remote_log_end_offset(tp)  # the highest remote offset
    return {
        "topic": tp.topic,
        "topic_id": encode_uuid(tp.topic_id),
        "partition": tp.partition,
        "segments": rlmm.segment_count(tp),
        "remote_log_start_offset": rlmm.log_start_offset(tp),  # the log start it reveals
        "remote_log_end_offset": None if last is None else last + 1,  # Kafka's: one past
        "size": rlmm.remote_log_size(tp),
        "leader_epochs": [[e.epoch, e.start_offset] for e in rlmm.epoch_lineage(tp)],
    }


def _segment_row(listed: ListedSegment) -> dict[str, Any]:
    from gateway.kafka.uuids import encode_uuid  # noqa: PLC0415

    meta, by = listed.meta, listed.displaced_by
    return {
        "segment_id": encode_uuid(meta.segment_id.id),
        "start_offset": meta.start_offset,
        "end_offset": meta.end_offset,
        "state": meta.state.name,
        "displaced": listed.displaced,
        "displaced_by": None if by is None else encode_uuid(by.id),
        "size": meta.segment_size_in_bytes,
        "max_timestamp_ms": meta.max_timestamp_ms,
        "event_timestamp_ms": meta.event_timestamp_ms,
        "leader_epochs": [list(e) for e in meta.segment_leader_epochs],
        "txn_index_empty": meta.txn_index_empty,
    }


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, list):
            return ",".join(f"{a}@{b}" for a, b in value) or "-"
        return "-" if value is None else str(value)

    cells = [[cell(r[c]) for c in columns] for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def _scan(args: argparse.Namespace, rlmm: RemoteLogMetadataManager) -> BucketScan:
    import logging  # noqa: PLC0415

    from gateway.metadata.bucket import scan_bucket  # noqa: PLC0415

    # What the scanner logs, this command prints itself (warning: lines, the error): without
    # a handler of its own, Python's last resort would print every warning a second time.
    quiet = logging.NullHandler()
    logger = logging.getLogger("gateway.metadata")
    logger.addHandler(quiet)
    try:
        return asyncio.run(
            scan_bucket(
                rlmm,
                args.store,
                key_prefix=args.key_prefix,
                key_pairs=args.key_pair,
                endpoint_url=args.s3_endpoint_url,
                region=args.s3_region,
                path_style=args.s3_path_style,
            )
        )
    finally:
        logger.removeHandler(quiet)


def _warnings(scan: BucketScan) -> int:
    """Print what the scan skipped and what is wrong with its scope; the exit code."""
    report = scan.report
    for key, reason in sorted(report.skipped.items()):
        print(f"warning: skipped {key}: {reason}", file=sys.stderr)
    if report.scope_warning is not None:
        print(f"warning: {report.scope_warning}", file=sys.stderr)
    if not report.manifests:
        return EXIT_EMPTY
    return EXIT_SKIPPED if report.skipped or report.misprefixed else EXIT_OK


def _print_scan(args: argparse.Namespace, rlmm: RemoteLogMetadataManager, scan: BucketScan) -> None:
    rows = [_partition_row(rlmm, tp) for tp in rlmm.partitions()]
    rows.sort(key=lambda r: (r["topic"], r["topic_id"], r["partition"]))
    bad = [_unreadable_row(tp, entry) for tp, entry in scan.unreadable]
    for row in rows:
        row["unreadable"] = sum(
            (b["topic_id"], b["partition"]) == (row["topic_id"], row["partition"]) for b in bad
        )
    if args.json:
        print(json.dumps({"scan": scan.report.to_json(), "partitions": rows, "unreadable": bad}))
        return
    columns = ["topic", "topic_id", "partition", "segments"]
    columns += ["remote_log_start_offset", "remote_log_end_offset", "size"]
    columns += ["leader_epochs", "unreadable"]
    print(_table(rows, columns))
    if bad:
        print("\nUNREADABLE manifests (they claim the offsets from START_OFFSET on):")
        columns = ["topic", "topic_id", "partition", "start_offset", "key", "reason"]
        print(_table(bad, columns))


def _print_ls(args: argparse.Namespace, rlmm: RemoteLogMetadataManager) -> None:
    from uuid import UUID  # noqa: PLC0415

    from gateway.kafka.uuids import parse_topic_id  # noqa: PLC0415
    from gateway.metadata.listing import list_segments  # noqa: PLC0415

    topic_id: UUID | None = parse_topic_id(args.topic_id, "--topic-id") if args.topic_id else None
    tp = rlmm.partition(args.topic, args.partition, topic_id)
    segments = [_segment_row(listed) for listed in list_segments(rlmm, tp)]
    if args.json:
        for row in segments:
            print(json.dumps(row, separators=(",", ":")))
        return
    columns = ["segment_id", "start_offset", "end_offset", "state", "displaced_by", "size"]
    columns += ["leader_epochs", "txn_index_empty"]
    for row in segments:
        if row["displaced"] and row["displaced_by"] is None:
            row["displaced_by"] = "yes"
    print(_table(segments, columns))


def _reader_gone() -> int:
    """stdout's reader closed it (``catalog ls | head``): what it wanted it has, so exit 0;
    stdout goes to /dev/null so that the interpreter's last flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


def _follow(args: argparse.Namespace, rlmm: RemoteLogMetadataManager) -> int:
    from gateway.config import load_command_settings  # noqa: PLC0415
    from gateway.metadata.bucket import follow_topic  # noqa: PLC0415

    given = {"metadata_source": "topic"}
    if args.metadata_bootstrap:
        given["metadata_bootstrap"] = args.metadata_bootstrap
    settings = load_command_settings(
        given
        | ({"metadata_topics": args.metadata_topic_filter} if args.metadata_topic_filter else {}),
        args.config,
    )
    config = settings.follow_config()
    assert config is not None  # metadata_source is topic, and a bootstrap is required
    status = asyncio.run(
        follow_topic(
            rlmm, config, args.store, key_prefix=args.key_prefix, key_pairs=args.key_pair,
            endpoint_url=args.s3_endpoint_url, region=args.s3_region,
            path_style=args.s3_path_style, timeout_s=args.timeout_s,
        )
    )  # fmt: skip
    rows = [_partition_row(rlmm, tp) for tp in rlmm.partitions()]
    rows.sort(key=lambda r: (r["topic"], r["topic_id"], r["partition"]))
    for partition, error in sorted(status.failed.items()):
        print(f"warning: {config.topic}-{partition} stopped: {error}", file=sys.stderr)
    if args.json:
        follow = {"topic": config.topic, "records": status.records, "dropped": status.dropped}
        print(json.dumps({"follow": follow | {"positions": status.positions}, "partitions": rows}))
    else:
        columns = ["topic", "topic_id", "partition", "segments"]
        columns += ["remote_log_start_offset", "remote_log_end_offset", "size", "leader_epochs"]
        print(_table(rows, columns))
    return EXIT_SKIPPED if status.failed else EXIT_OK


def run(args: argparse.Namespace) -> int:
    if args.catalog_command == "follow":
        rlmm = open_manager(args.state_dir)
        try:
            return _follow(args, rlmm)
        except BrokenPipeError:
            return _reader_gone()
        finally:
            rlmm.close()
    if args.catalog_command == "ls" and args.store is None and args.state_dir is None:
        raise ConfigurationError("catalog ls needs --store (to scan) or --state-dir (a catalog)")
    rlmm = open_manager(args.state_dir)
    try:
        scan = _scan(args, rlmm) if args.store is not None else None
        code = EXIT_OK if scan is None else _warnings(scan)
        if code == EXIT_EMPTY and not (args.catalog_command == "scan" and args.json):
            return code  # no empty table: the warning says what lies around the scope
        try:
            if args.catalog_command == "scan":
                assert scan is not None
                _print_scan(args, rlmm, scan)
            else:
                _print_ls(args, rlmm)
            sys.stdout.flush()
        except BrokenPipeError:
            return _reader_gone()
        return code
    finally:
        rlmm.close()
