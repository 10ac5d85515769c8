"""The Spark surfaces on the real-Kafka buckets, in one SparkSession of their own process
(``python -m tests.realkafka.spark_checks BUCKET_JSON...``, run by :mod:`tests.realkafka.checks`):
``format("tiered-kafka")`` batch reads in both isolation levels and, for a bucket whose spec
says ``full``, one ``Trigger.AvailableNow`` query per topic against Spark's own Kafka source on
the broker (same schema but the added ``leaderEpoch``, same rows) and ``export`` to Parquet and
to Iceberg against the same rows; and ``scrub`` finding nothing. Each verdict is one JSON line
on stdout:
``{"name", "surface", "topic", "want", "got"}`` or ``{"name", "error"}``."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.realkafka.report import Row, b64
from tests.realkafka.spark_oracle import rows, schema_of, session, stream_rows


def emit(**verdict: Any) -> None:
    print(json.dumps(verdict), flush=True)


def epochs(df: Any) -> list[Row]:
    """``partition``, ``offset``, ``leaderEpoch`` of every row (the column Spark's Kafka source
    lacks), in order."""
    got = df.select("partition", "offset", "leaderEpoch").collect()
    return sorted(
        ({"partition": r[0], "offset": r[1], "leaderEpoch": r[2]} for r in got),
        key=lambda r: (r["partition"], r["offset"]),
    )


def arrow_rows(table: Any) -> list[Row]:
    """Rows of an Arrow table of Spark's Kafka columns (an Iceberg scan), as :func:`rows`."""
    from tests.realkafka.report import compact  # noqa: PLC0415

    out = []
    for r in table.to_pylist():
        ts = r["timestamp"]
        out.append(
            compact(
                {
                    "topic": r["topic"],
                    "partition": r["partition"],
                    "offset": r["offset"],
                    "timestamp": int(ts.timestamp() * 1_000_000) if ts is not None else None,
                    "timestampType": r["timestampType"],
                    "key": b64(r["key"]),
                    "value": b64(r["value"]),
                    "headers": [[h["key"], b64(h["value"])] for h in r.get("headers") or []],
                }
            )
        )
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


def check_bucket(spark: Any, spec: dict[str, Any], work: Path) -> None:
    from gateway.cli import main as cli  # noqa: PLC0415

    name, options, cli_args, oracles = spec["name"], spec["options"], spec["cli"], spec["oracles"]
    for topic, oracle in oracles.items():
        for isolation in ("read_uncommitted", "read_committed"):
            want = oracle[f"batch_{isolation}"]
            df = (
                spark.read.format("tiered-kafka")
                .options(**options)
                .option("topic", topic)
                .option("includeHeaders", "true")
                .option("isolation.level", isolation)
                .load()
            )
            label = f"{name}/{topic} spark tiered-kafka {isolation} = Spark's Kafka source"
            emit(
                name=f"{label}: schema",
                surface="spark-schema",
                topic=f"{name}/{topic}",
                want=[*want["schema"], "leaderEpoch:int:True"],
                got=schema_of(df),
            )
            emit(
                name=label,
                surface="spark",
                topic=f"{name}/{topic}",
                want=want["rows"],
                got=rows(df),
            )
            emit(
                name=f"{name}/{topic} spark tiered-kafka {isolation} leaderEpoch = Java consumer",
                surface="spark-epochs",
                topic=f"{name}/{topic}",
                want=oracle[f"epochs_{isolation}"],
                got=epochs(df),
            )
        if not spec.get("full", True):  # the batch reads only (tests.realkafka.commands)
            continue
        want = oracle["stream_read_uncommitted"]
        reader = spark.readStream.format("tiered-kafka").options(**options).option("topic", topic)
        schema, got = stream_rows(
            spark, reader.option("includeHeaders", "true"), work / f"cp-{name}-{topic}"
        )
        label = (
            f"{name}/{topic} spark tiered-kafka AvailableNow stream = Spark's Kafka source stream"
        )
        emit(
            name=label, surface="spark-stream", topic=f"{name}/{topic}", want=want["rows"], got=got
        )
        emit(
            name=f"{label}: schema",
            surface="spark-schema",
            topic=f"{name}/{topic}",
            want=[*want["schema"], "leaderEpoch:int:True"],
            got=schema,
        )
        parquet = work / f"export-{name}-{topic}"
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli(
                [
                    "export",
                    *cli_args,
                    "--topic",
                    topic,
                    "--include-headers",
                    "--quiet",
                    "--output",
                    str(parquet),
                ]
            )
        label = f"{name}/{topic} export parquet = Spark's Kafka source"
        if code:
            emit(name=label, error=f"export exited {code}")
        else:
            got = rows(spark.read.parquet(str(parquet)))
            emit(
                name=label,
                surface="export-parquet",
                topic=f"{name}/{topic}",
                want=oracle["batch_read_uncommitted"]["rows"],
                got=got,
            )
        warehouse = work / f"iceberg-{name}"
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli(
                [
                    "export",
                    *cli_args,
                    "--topic",
                    topic,
                    "--include-headers",
                    "--quiet",
                    "--format",
                    "iceberg",
                    "--warehouse",
                    str(warehouse),
                ]
            )
        label = f"{name}/{topic} export iceberg = Spark's Kafka source"
        if code:
            emit(name=label, error=f"export exited {code}")
        else:
            from gateway.spark.iceberg import open_catalog  # noqa: PLC0415

            table = open_catalog(None, str(warehouse)).load_table(("kafka", topic))
            emit(
                name=label,
                surface="export-iceberg",
                topic=f"{name}/{topic}",
                want=oracle["batch_read_uncommitted"]["rows"],
                got=arrow_rows(table.scan().to_arrow()),
            )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(["scrub", *cli_args, "--json"])
    lines = [line for line in out.getvalue().splitlines() if line.startswith("{")]
    doc = json.loads(lines[-1]) if lines else {"output": out.getvalue()[-2000:]}
    emit(
        name=f"{name} scrub audits every segment and finds nothing",
        surface="scrub",
        topic=name,
        want=[{"exit": 0, "segments": spec["segments"], "problems": []}],
        got=[{"exit": code, "segments": doc.get("segments"), "problems": doc.get("problems")}],
    )


def main() -> None:
    specs = [json.loads(Path(p).read_text()) for p in sys.argv[1:]]
    spark = session()
    from gateway.spark.source import TieredKafkaDataSource  # noqa: PLC0415

    spark.dataSource.register(TieredKafkaDataSource)
    try:
        with tempfile.TemporaryDirectory(prefix="real-kafka-spark-") as tmp:
            for spec in specs:
                try:
                    check_bucket(spark, spec, Path(tmp))
                except Exception as e:
                    emit(name=f"{spec['name']} spark", error=f"{type(e).__name__}: {str(e)[:800]}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
