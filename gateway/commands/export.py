"""``tiered-gateway export``: write a topic's records from the bucket to Parquet with Spark.

The command only parses: it builds a typed :class:`~gateway.spark.job.ExportJob` (pure, no
pyspark) and hands it over to :mod:`gateway.spark.export` (imported when it runs, so the CLI
works without the ``spark`` extra until someone exports). The same arguments are
the job's under spark-submit: ``spark-submit gateway/commands/export.py --store ... --output ...``
or ``python -m gateway.commands.export ...``.

``--format iceberg`` commits to an Apache Iceberg table instead of writing to ``--output``
(``--catalog``, ``--warehouse``, ``--table``; ``docs/iceberg.md``): a re-run appends only the
offsets the table does not hold yet.

``--from`` / ``--to`` take ``earliest``, ``latest``, an offset (every partition), Spark's
per-partition JSON (``{"orders":{"0":23,"1":-2}}``), or a time: ``@<epoch ms>`` or ISO-8601
(``2024-05-01T12:00:00Z``; no zone means UTC). ``--to`` is exclusive.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from gateway.commands.common import add_key_pair_arg, add_store_args, apply_settings
from gateway.errors import ConfigurationError, GatewayError
from gateway.spark.job import ExportJob, IcebergTarget
from gateway.spark.typed_request import SideRequest, TypedRequest

FORMATS = ("parquet", "orc", "json", "iceberg")
WRITERS = ("arrow", "spark")
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")
BOUNDS = (
    "earliest, latest, an offset (every partition), Spark's per-partition JSON "
    '(\'{"orders":{"0":23,"1":-2}}\', -2 earliest, -1 latest), or a time: @<epoch ms> or '
    "ISO-8601 (2024-05-01T12:00:00Z; no zone means UTC), the first offset at or after it"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_store_args(p)
    add_key_pair_arg(p)
    p.add_argument("--state-dir", help="plan from this catalog (tiered-gateway catalog scan)")
    p.add_argument(
        "--metadata-bootstrap",
        metavar="HOST:PORT,...",
        help="plan from the cluster's __remote_log_metadata, read to its end, instead of a "
        "bucket scan (security: the TIERED_GATEWAY_METADATA_* variables; docs/live-metadata.md)",
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", help="comma-separated partitions (default: all)")
    p.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="BOUND",
        help="where to start: " + BOUNDS + " (default: earliest)",
    )
    p.add_argument(
        "--to",
        dest="end",
        default="latest",
        metavar="BOUND",
        help="where to stop, exclusive: the same forms (default: latest, the remote log end)",
    )
    p.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
    )
    p.add_argument("--include-headers", action="store_true")
    p.add_argument("--output", help="output directory (any Hadoop path); not with --format iceberg")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="parquet",
        help="parquet (default), orc, json, or iceberg: one commit to an Iceberg table of "
        "the offsets it does not hold yet (--catalog, --warehouse, --table)",
    )
    p.add_argument(
        "--catalog",
        metavar="URI",
        help="iceberg: sqlite:///path/catalog.db or a REST catalog's http(s):// URL (default: "
        "an SQLite catalog.db in a local --warehouse)",
    )
    p.add_argument(
        "--warehouse",
        metavar="PATH",
        help="iceberg: where new tables go (a local folder, or s3://... with --catalog)",
    )
    p.add_argument(
        "--table",
        metavar="NS.NAME",
        help="iceberg: the table, created when missing (default: kafka.<topic>)",
    )
    p.add_argument(
        "--catalog-property",
        action="append",
        metavar="KEY=VALUE",
        help="iceberg: a pyiceberg catalog property (a REST catalog's token, credential, "
        "s3.endpoint ...); repeatable",
    )
    p.add_argument(
        "--writer",
        choices=WRITERS,
        help="arrow: each task writes Parquet with Arrow (the default for parquet, and the "
        "fast one); spark: Spark's DataFrame writer (any Hadoop path; orc and json)",
    )
    p.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default="snappy",
        help="the output's compression codec (default snappy; orc takes zstd, lz4, snappy, "
        "none; json gzip, lz4, snappy, none)",
    )
    p.add_argument(
        "--mode",
        choices=("errorifexists", "overwrite", "append", "ignore"),
        help="what to do when the output exists (default errorifexists; not with iceberg, "
        "which appends what the table lacks)",
    )
    p.add_argument(
        "--master",
        help="local[*] (default when not under spark-submit), local[2], spark://host:7077 ...",
    )
    p.add_argument(
        "--max-bytes-per-partition",
        type=int,
        default=128 * 1024 * 1024,
        help="segment bytes per Spark task (larger segments are split at index entries)",
    )
    for side in ("key", "value"):
        p.add_argument(
            f"--{side}-format",
            choices=("avro", "protobuf", "jsonschema"),
            help=f"decode {side}s with the schema registry into a typed {side} column (a "
            f"struct for records) and {side}_schema_id beside it (parquet, arrow writer)",
        )
        p.add_argument(
            f"--{side}-subject",
            metavar="SUBJECT",
            help=f"the subject whose versions type the {side}s (default <topic>-{side})",
        )
        p.add_argument(
            f"--{side}-message",
            metavar="NAME",
            help=f"protobuf: the {side}s' message type, full name (default: the file's first)",
        )
    p.add_argument(
        "--schema-registry-url",
        metavar="URL",
        help="the schema registry (env TIERED_GATEWAY_SCHEMA_REGISTRY_URL; credentials: "
        "TIERED_GATEWAY_SCHEMA_REGISTRY_USERNAME, _PASSWORD, _TOKEN, _CA)",
    )
    p.add_argument("--schema-dir", type=Path, metavar="DIR", help="or a schemas snapshot folder")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument(
        "--spark-log",
        type=Path,
        metavar="FILE",
        help="Spark's own log, traces included (default: a new file in the temp folder, "
        "named on failure); the terminal shows only the progress line and the error",
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export",
        help="write a topic's records to Parquet or an Iceberg table with Spark",
        description="Write a topic's records, read from the bucket, to Parquet (or ORC, JSON) "
        "with Spark, or append to an Iceberg table the offsets it does not hold yet: one row "
        "per record with Spark's Kafka source columns.",
    )
    add_arguments(p)


def _time_ms(text: str) -> int | None:
    if text.startswith("@"):
        try:
            return int(text[1:])
        except ValueError:
            return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def bound_options(flag: str, text: str, *, ending: bool) -> dict[str, str]:
    """The reader options for ``--from`` / ``--to``."""
    side = "ending" if ending else "starting"
    value = text.strip()
    if value in ("earliest", "latest") or value.startswith("{") or value.lstrip("-").isdigit():
        return {f"{side}Offsets": value}
    ms = _time_ms(value)
    if ms is None or ms < 0:
        raise ConfigurationError(
            f"{flag} {text!r}: expected earliest, latest, an offset, JSON, @<ms> or ISO-8601"
        )
    return {f"{side}Timestamp": str(ms)}


def reader_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``tiered-kafka`` options an export reads with."""
    opts = {
        "store": args.store,
        "keyPrefix": args.key_prefix,
        "topic": args.topic,
        "isolation.level": args.isolation_level,
        "includeHeaders": str(bool(args.include_headers)).lower(),
        "maxBytesPerPartition": str(args.max_bytes_per_partition),
    }
    if args.key_pair:
        opts["keyPairs"] = ",".join(args.key_pair)
    if args.s3_endpoint_url:
        opts["s3.endpointUrl"] = args.s3_endpoint_url
    if args.s3_region:
        opts["s3.region"] = args.s3_region
    if args.s3_path_style:
        opts["s3.pathStyle"] = "true"
    if args.state_dir:
        opts["catalog"] = str(args.state_dir)
    if args.metadata_bootstrap:
        opts["metadataBootstrap"] = args.metadata_bootstrap
    if args.partitions:
        opts["partitions"] = args.partitions
    for side in ("key", "value"):  # typed columns (the Spark writer reads them from the source)
        for what in ("format", "subject", "message"):
            if getattr(args, f"{side}_{what}", None):
                opts[f"{side}{what.capitalize()}"] = getattr(args, f"{side}_{what}")
    if getattr(args, "schema_registry_url", None):
        opts["schemaRegistryUrl"] = args.schema_registry_url
    if getattr(args, "schema_dir", None):
        opts["schemaDir"] = str(args.schema_dir)
    opts.update(bound_options("--from", args.start, ending=False))
    opts.update(bound_options("--to", args.end, ending=True))
    return opts


def check_target(args: argparse.Namespace) -> None:
    """``--output`` and ``--mode`` for files, the catalog flags for ``--format iceberg``."""
    iceberg = args.format == "iceberg"
    if iceberg and (args.output is not None or args.mode is not None):
        raise ConfigurationError(
            "--format iceberg writes into the table's location and appends only what it lacks: "
            "no --output or --mode (give --warehouse, --catalog, --table)"
        )
    if not iceberg:
        if args.output is None:
            raise ConfigurationError("--output is required (or --format iceberg)")
        given = [f for f in ("catalog", "warehouse", "table", "catalog_property") if
                 getattr(args, f)]  # fmt: skip
        if given:
            flags = ", ".join("--" + f.replace("_", "-") for f in given)
            raise ConfigurationError(f"{flags}: only with --format iceberg")
        args.mode = args.mode or "errorifexists"


def catalog_properties(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--catalog-property KEY=VALUE`` (repeated), in order."""
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"--catalog-property {pair!r}: expected KEY=VALUE")
        out.append((key.strip(), value))
    return tuple(out)


def typed_request(args: argparse.Namespace) -> TypedRequest:
    """The typed columns ``--key-format`` / ``--value-format`` ask for."""
    sides = tuple(
        SideRequest(side, fmt, getattr(args, f"{side}_subject", None),
                    getattr(args, f"{side}_message", None))
        for side in ("key", "value") if (fmt := getattr(args, f"{side}_format", None))
    )  # fmt: skip
    return TypedRequest(
        sides, getattr(args, "schema_registry_url", None), getattr(args, "schema_dir", None),
        getattr(args, "config", None),
    )  # fmt: skip


def export_job(args: argparse.Namespace) -> ExportJob:
    """The job the checked ``args`` describe."""
    iceberg = None
    if args.format == "iceberg":
        properties = catalog_properties(args.catalog_property or [])
        iceberg = IcebergTarget(args.catalog, args.warehouse, args.table, properties)
    return ExportJob(
        topic=args.topic, options=reader_options(args), format=args.format,
        compression=args.compression, writer=args.writer, output=args.output, mode=args.mode,
        iceberg=iceberg, typed=typed_request(args), quiet=bool(args.quiet), master=args.master,
        spark_log=args.spark_log,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    check_target(args)
    job = export_job(args)
    try:
        from gateway.spark.export import run_export  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigurationError(
            f"export needs the spark extra (pip install 'tiered-gateway[spark]'): {exc}"
        ) from exc
    return run_export(job)


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit's entry (``gateway/commands/export.py`` or ``-m gateway.commands.export``)."""
    parser = argparse.ArgumentParser(
        prog="gateway.commands.export", description="Export a topic from the bucket with Spark."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        apply_settings(args)
        return run(args)
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
