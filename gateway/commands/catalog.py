"""``tiered-gateway catalog scan|ls``: what the bucket holds, as the RLMM sees it.

``scan`` lists every ``.rsm-manifest`` under the prefix, registers the segments (into the
SQLite state of ``--state-dir`` when given, incrementally, else in memory) and prints per topic
and partition: topic id, segment count, remote start and end offsets, total size, epochs.
The leader-epoch lineage comes from the newest segment's checkpoint (``--key-pair`` opens
encrypted ones). ``ls`` prints one partition's segments with their states, from
``--state-dir`` alone or after a scan of ``--store``.

A manifest that cannot be read (corrupt, no segment metadata, metadata that disagrees with its
key) still claims its offsets: ``scan`` lists it after the partitions (``UNREADABLE``: topic,
partition, the start offset from its key, the key and the reason; ``"unreadable"`` in
``--json``, and a count per partition row). Exit codes: 0 all read; 1 when the scan skipped
manifests (each is named on stderr, with the reason); 2 for errors, among them a store fault
(a listing or read that fails: the scan is aborted and a ``--state-dir`` catalog is left
exactly as it was, never read as deleted segments).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from gateway.commands.common import (
    add_key_pair_arg,
    add_state_dir_arg,
    add_store_args,
    open_store_from,
)
from gateway.errors import ConfigurationError
from gateway.metadata.open import open_manager

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.metadata.manager import RemoteLogMetadataManager
    from gateway.metadata.model import RemoteLogSegmentMetadata, TopicIdPartition
    from gateway.metadata.scan import ScanReport, UnreadableSegment

    Unreadable = Sequence[tuple[TopicIdPartition, UnreadableSegment]]

EXIT_OK = 0
EXIT_SKIPPED = 1


def add_parser(sub: Any) -> None:
    c = sub.add_parser("catalog", help="list the remote segments of a bucket (the RLMM view)")
    csub = c.add_subparsers(dest="catalog_command", required=True)
    s = csub.add_parser("scan", help="scan the bucket's manifests; one line per partition")
    add_store_args(s)
    add_key_pair_arg(s)
    add_state_dir_arg(s, "keep the catalog in DIR (SQLite); later scans are incremental")
    s.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    ls = csub.add_parser("ls", help="the segments of one partition with their states")
    add_store_args(ls, required=False)
    add_key_pair_arg(ls)
    add_state_dir_arg(ls, "read (and with --store, update) the catalog kept in DIR")
    ls.add_argument("--topic", required=True)
    ls.add_argument("--topic-id", help="pick one incarnation of a re-created topic")
    ls.add_argument("--partition", type=int, required=True)
    ls.add_argument("--json", action="store_true", help="NDJSON, one segment per line")


def _unreadable_row(tp: TopicIdPartition, entry: UnreadableSegment) -> dict[str, Any]:
    from gateway.remote.keys import encode_uuid  # noqa: PLC0415

    return {
        "topic": tp.topic,
        "topic_id": encode_uuid(tp.topic_id),
        "partition": tp.partition,
        "start_offset": entry.start_offset,
        "key": entry.key,
        "reason": entry.reason,
    }


def _partition_row(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> dict[str, Any]:
    from gateway.remote.keys import encode_uuid  # noqa: PLC0415

    return {
        "topic": tp.topic,
        "topic_id": encode_uuid(tp.topic_id),
        "partition": tp.partition,
        "segments": rlmm.segment_count(tp),
        "remote_log_start_offset": rlmm.remote_log_start_offset(tp),
        "remote_log_end_offset": rlmm.remote_log_end_offset(tp),
        "size": rlmm.remote_log_size(tp),
        "leader_epochs": [[e.epoch, e.start_offset] for e in rlmm.epoch_lineage(tp)],
    }


def _segment_row(meta: RemoteLogSegmentMetadata) -> dict[str, Any]:
    from gateway.remote.keys import encode_uuid  # noqa: PLC0415

    return {
        "segment_id": encode_uuid(meta.segment_id.id),
        "start_offset": meta.start_offset,
        "end_offset": meta.end_offset,
        "state": meta.state.name,
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


async def _scan(
    args: argparse.Namespace, rlmm: RemoteLogMetadataManager
) -> tuple[ScanReport, Unreadable]:
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from gateway.metadata.scan import BucketScanner, checkpoint_reader  # noqa: PLC0415
    from gateway.remote.keyring import KeyRing  # noqa: PLC0415
    from gateway.remote.reader import SegmentReader  # noqa: PLC0415
    from gateway.storage.retry import Retrier, RetryPolicy  # noqa: PLC0415

    keys = KeyRing.from_specs(args.key_pair)
    store = await open_store_from(args)
    try:
        with ThreadPoolExecutor(2, thread_name_prefix="catalog") as pool:
            reader = SegmentReader(store, Retrier(RetryPolicy()), pool)
            scanner = BucketScanner(
                store,
                rlmm,
                key_prefix=args.key_prefix,
                checkpoint_reader=checkpoint_reader(reader, keys),
            )
            return await scanner.scan(), scanner.unreadable_all()
    finally:
        await store.close()


def _report_skipped(report: ScanReport) -> int:
    for key, reason in sorted(report.skipped.items()):
        print(f"warning: skipped {key}: {reason}", file=sys.stderr)
    return EXIT_SKIPPED if report.skipped else EXIT_OK


def run(args: argparse.Namespace) -> int:
    if args.catalog_command == "ls" and args.store is None and args.state_dir is None:
        raise ConfigurationError("catalog ls needs --store (to scan) or --state-dir (a catalog)")
    rlmm = open_manager(args.state_dir)
    try:
        report, unreadable = (
            asyncio.run(_scan(args, rlmm)) if args.store is not None else (None, ())
        )
        if args.catalog_command == "scan":
            assert report is not None
            rows = [_partition_row(rlmm, tp) for tp in rlmm.partitions()]
            rows.sort(key=lambda r: (r["topic"], r["topic_id"], r["partition"]))
            bad = [_unreadable_row(tp, entry) for tp, entry in unreadable]
            for row in rows:
                row["unreadable"] = sum(
                    (b["topic_id"], b["partition"]) == (row["topic_id"], row["partition"])
                    for b in bad
                )
            if args.json:
                print(json.dumps({"scan": report.to_json(), "partitions": rows, "unreadable": bad}))
            else:
                columns = ["topic", "topic_id", "partition", "segments"]
                columns += ["remote_log_start_offset", "remote_log_end_offset", "size"]
                columns += ["leader_epochs", "unreadable"]
                print(_table(rows, columns))
                if bad:
                    print("\nUNREADABLE manifests (they claim the offsets from START_OFFSET on):")
                    columns = ["topic", "topic_id", "partition", "start_offset", "key", "reason"]
                    print(_table(bad, columns))
        else:
            from uuid import UUID  # noqa: PLC0415

            from gateway.remote.keys import parse_topic_id  # noqa: PLC0415

            topic_id: UUID | None = (
                parse_topic_id(args.topic_id, "--topic-id") if args.topic_id else None
            )
            tp = rlmm.partition(args.topic, args.partition, topic_id)
            segments = [_segment_row(m) for m in rlmm.list_remote_log_segments(tp)]
            if args.json:
                for row in segments:
                    print(json.dumps(row, separators=(",", ":")))
            else:
                columns = ["segment_id", "start_offset", "end_offset", "state", "size"]
                columns += ["leader_epochs", "txn_index_empty"]
                print(_table(segments, columns))
        return _report_skipped(report) if report is not None else EXIT_OK
    finally:
        rlmm.close()
