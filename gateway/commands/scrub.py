"""``tiered-gateway scrub``: an integrity audit of every tiered segment under a prefix, on Spark.

Checks (see :mod:`gateway.scrub`): every chunk decrypts and decompresses, every batch's CRC
holds and its records decode, offsets increase inside segments and are contiguous across them
(gaps, overlaps; re-uploads displaced by a later leader are info), the offset, time and
transaction indexes agree with the log, the leader-epoch checkpoint and producer snapshot
parse, and orphans are found (objects without a manifest, manifests without their objects).

Prints a summary (``--json``: one JSON document) and the error and warning findings; with
``--report PATH`` also writes every finding as a Parquet table (PATH must not exist; no report
is written without it). Exit code 0 when nothing is an error (warnings allowed), 1 when any
finding is an error, 2 for usage and configuration errors (bad store URL, unreadable key file,
pyspark not installed, report path taken, no tiered segment in the scope unless
``--allow-empty``: a wrong key prefix must not read as a clean bucket).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.commands.common import add_key_pair_arg, add_store_args
from gateway.errors import ConfigurationError, GatewayError
from gateway.remote.keys import Suffix

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gateway.scrub.job import ScrubResult
    from gateway.storage.sync import SyncObjectStore

MAX_FINDINGS_SHOWN = 50


def add_parser(sub: Any) -> None:
    s = sub.add_parser("scrub", help="audit the integrity of a bucket's segments (Spark)")
    add_store_args(s)
    add_key_pair_arg(s)
    s.add_argument("--topic", help="audit only this topic")
    s.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    s.add_argument("--report", type=Path, help="write every finding as Parquet to this new folder")
    s.add_argument(
        "--upload-grace",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="objects without a manifest younger than this may be uploads in progress: "
        "warnings, not errors (default: 900)",
    )
    s.add_argument("--json", action="store_true", help="print the summary as one JSON document")
    s.add_argument(
        "--spark-log",
        type=Path,
        metavar="FILE",
        help="Spark's own log, traces included (default: a new file in the temp folder)",
    )
    s.add_argument(
        "--allow-empty",
        action="store_true",
        help="a scope with no tiered segment is clean (exit 0); by default it is an error "
        "(exit 2): a wrong --key-prefix or bucket would otherwise report clean forever",
    )


def has_segments(store: SyncObjectStore, prefix: str, topic: str | None) -> bool:
    """Whether ``prefix`` holds a segment manifest (of ``topic``); stops at the first one."""
    suffix = "." + Suffix.MANIFEST
    for info in store.list(prefix):
        if info.key.endswith(suffix) and (
            topic is None or info.key[len(prefix) :].startswith(topic + "-")
        ):
            return True
    return False


def _key_pairs(specs: list[str]) -> tuple[tuple[str, bytes], ...]:
    """Read every ``ID=PEM`` on the driver (and validate it) so executors need no key files."""
    from gateway.remote.keyring import KeyRing, parse_spec  # noqa: PLC0415

    KeyRing.from_specs(specs)  # the same checks and messages as every other command
    pairs = []
    for spec in specs:
        key_id, path = parse_spec(spec)
        pairs.append((key_id, path.read_bytes()))
    return tuple(pairs)


def _require_pyspark() -> None:
    try:
        import pyspark.sql  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ConfigurationError(
            "scrub needs pyspark: pip install 'tiered-gateway[spark]'"
        ) from exc


def _session(master: str, log_path: Path) -> tuple[SparkSession, bool]:
    """The session to scrub on (:func:`gateway.spark.session.spark_session`), and whether this
    command started it (then it stops it)."""
    try:
        from gateway.spark.session import spark_session  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigurationError(
            "scrub needs pyspark: pip install 'tiered-gateway[spark]'"
        ) from exc
    spark, owned = spark_session(master, "tiered-gateway scrub", log_path)
    if owned:
        spark.sparkContext.setLogLevel("ERROR")
    return spark, owned


@contextlib.contextmanager
def _spark_failures(log_path: Path) -> Iterator[None]:
    """Spark itself failing (no Java, a bad ``--master``, a lost executor) is exit code 2 with
    one line, not a traceback that exits 1 like a bucket with errors."""
    try:
        yield
    except (ImportError, GatewayError):
        raise
    except Exception as exc:
        from py4j.protocol import Py4JError  # noqa: PLC0415
        from pyspark.errors import PySparkException  # noqa: PLC0415

        if not isinstance(exc, PySparkException | Py4JError):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigurationError(
            f"the Spark job failed: {type(exc).__name__}: {first} (Spark's log, with the "
            f"traces: {log_path})"
        ) from exc


def _print_text(result: ScrubResult, report: Path | None) -> None:
    s = result.summary()
    print(
        f"scrub: {s['segments']} segments, {s['objects']} objects ({s['bucket_bytes']} bytes), "
        f"{s['chunks']} chunks, {s['log_bytes_decoded']} log bytes decoded, "
        f"{s['batches']} batches, {s['records']} records in {s['seconds']:.1f} s"
    )
    counts = s["findings"]
    print(
        f"findings: {counts['error']} errors, {counts['warning']} warnings, {counts['info']} info"
    )
    for check, by_severity in s["by_check"].items():
        print(f"  {check}: " + ", ".join(f"{n} {sev}" for sev, n in by_severity.items()))
    shown = [f for f in result.findings if f.severity != "info"]
    for f in shown[:MAX_FINDINGS_SHOWN]:
        print(f"{f.severity}: {f.check}: {f.object_key}: {f.message}")
    if len(shown) > MAX_FINDINGS_SHOWN:
        print(f"... {len(shown) - MAX_FINDINGS_SHOWN} more (see --report or --json)")
    if report is not None:
        print(f"report: {report}")


def run(args: argparse.Namespace) -> int:
    from gateway.storage.sync import SyncStoreSpec  # noqa: PLC0415

    if args.report is not None and args.report.exists():
        raise ConfigurationError(f"--report {args.report}: already exists (choose a new path)")
    spec = SyncStoreSpec(args.store, args.s3_endpoint_url, args.s3_region, args.s3_path_style)
    store = spec.open()  # a bad URL is a usage error before Spark starts
    key_pairs = _key_pairs(args.key_pair)
    _require_pyspark()
    try:
        found = has_segments(store, args.key_prefix, args.topic)
    finally:
        store.close()
    if not found and not args.allow_empty:
        what = f"of topic {args.topic!r} " if args.topic else ""
        raise ConfigurationError(
            f"no tiered segment {what}under key prefix {args.key_prefix!r} of {args.store} "
            "(no .rsm-manifest object): check --key-prefix and --store, or pass --allow-empty "
            "if an empty scope is expected"
        )
    from gateway.spark.logs import default_log_path  # noqa: PLC0415

    log_path = args.spark_log or default_log_path("scrub")
    with _spark_failures(log_path):
        spark, owned = _session(args.master, log_path)
        try:
            from gateway.scrub.job import ScrubConfig, run_scrub, write_report  # noqa: PLC0415

            config = ScrubConfig(
                spec, args.key_prefix, key_pairs, args.topic, upload_grace_s=args.upload_grace
            )
            from gateway.spark.progress import Progress  # noqa: PLC0415

            scope = args.topic or args.key_prefix or args.store
            progress = contextlib.nullcontext() if args.json else Progress(spark, f"scrub {scope}")
            with progress:  # one line on stderr: tasks done, rate, ETA
                result = run_scrub(spark, config)
            report = str(args.report.resolve()) if args.report is not None else None
            if report is not None:
                write_report(spark, result.findings, report)
        finally:
            if owned:
                spark.stop()
    if args.json:
        doc = result.summary() | {"report": report, "exit_code": result.exit_code}
        doc["problems"] = [
            {name: getattr(f, name) for name in f.__dataclass_fields__}
            for f in result.findings
            if f.severity != "info"
        ][:MAX_FINDINGS_SHOWN]
        print(json.dumps(doc))
    else:
        _print_text(result, args.report)
    return result.exit_code
