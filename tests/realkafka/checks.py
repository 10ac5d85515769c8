"""Every surface of the gateway against what Kafka itself read from the same buckets
(``tests/fixtures/real_kafka``, written by :mod:`tests.realkafka.generate`).

Per bucket: ``serve`` (HTTP and the Kafka listener) on the bucket as the plugin wrote it (S3
buckets are put back on a moto server), then: the HTTP JSON, NDJSON and raw walks and
ListOffsets; the listener read by the Java consumer (with ``offsetsForTimes``) and by
librdkafka; ``catalog`` against the ``__remote_log_metadata`` records; the Spark source,
``export`` and ``scrub`` (:mod:`tests.realkafka.spark_checks`); ``dump`` against Kafka's
DumpLogSegments; and the raw bytes against the broker's own segment files. The schema
bucket (``schemas``: Confluent-framed Avro, Protobuf and JSON Schema) has checks of its own,
the decoded records against Confluent's deserializers (:mod:`tests.realkafka.schema_checks`).
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.realkafka import dumps, follow_scenarios, live, schema_checks, surfaces
from tests.realkafka.bucket import FIXTURES, Bucket, private_key, serving, store_of
from tests.realkafka.commands import SparkRun, catalog_checks, spark_checks
from tests.realkafka.jars import CACHE, kafka_libs
from tests.realkafka.java import JavaTools
from tests.realkafka.offsets import listener_offsets_checks, max_timestamp_rule, offsets_checks
from tests.realkafka.oracle import ISOLATIONS, librdkafka_read, load_ndjson
from tests.realkafka.report import Report


def check_bucket(
    bucket: Bucket, java: JavaTools, report: Report, work: Path, spark: SparkRun
) -> None:
    dumps.prepare(bucket, java)
    if bucket.live:
        max_timestamp_rule(bucket, report)
    with store_of(bucket, private_key(work)) as args:
        with (
            serving(args, work / f"serve-{bucket.name}.log") as (url, bootstrap),
            httpx.Client(base_url=url, timeout=60) as client,
        ):
            for topic, partitions in bucket.topics.items():
                http_checks(bucket, client, topic, partitions, report)
                listener_checks(bucket, java, bootstrap, topic, partitions, report, work)
        if not bucket.live:
            catalog_checks(bucket, args, report, work)
            spark_checks(bucket, args, report, work, spark)
    dumps.checks(bucket, report)


SMALL_PAGE = 1  # max_bytes: one batch a page, so pages start and end inside transactions


def http_checks(
    bucket: Bucket, client: httpx.Client, topic: str, partitions: int, report: Report
) -> None:
    """The JSON and NDJSON walks, the raw walk read as a consumer reads each answer, and the
    JSON and raw walks again one batch a page; both isolation levels; the raw bytes against the
    broker's segment files."""
    cell = f"{bucket.name}/{topic}"
    for isolation in ISOLATIONS:
        want = bucket.oracle(topic, "java", isolation)
        committed = isolation == "read_committed"
        walks = {
            "http-json": lambda p, i=isolation: surfaces.json_walk(client, topic, p, i),
            "http-ndjson": lambda p, i=isolation: surfaces.ndjson_walk(client, topic, p, i),
            "http-raw": lambda p, i=isolation, c=committed: surfaces.raw_pages_rows(
                p, surfaces.raw_walk(client, topic, p, i), c
            ),
            "http-json-1": lambda p, i=isolation: surfaces.json_walk(
                client, topic, p, i, SMALL_PAGE
            ),
            "http-raw-1": lambda p, i=isolation, c=committed: surfaces.raw_pages_rows(
                p, surfaces.raw_walk(client, topic, p, i, SMALL_PAGE), c
            ),
        }
        for surface, walk in walks.items():
            name = f"{cell} {surface} {isolation} = Java consumer"
            got = report.guarded(name, lambda w=walk: [r for p in range(partitions) for r in w(p)])
            if got is not None:
                report.compare(name, surface, cell, want, got)
    for p in range(partitions):
        name = f"{cell}-{p} http-raw bytes = the broker's segment files"
        pages = report.guarded(name, surfaces.raw_walk, client, topic, p)
        if pages is None:
            continue
        data = b"".join(page for page, _ in pages)
        local = dumps.local_log_bytes(bucket, topic, p)
        diffs = (
            []
            if data == local
            else [
                f"{len(data)} bytes served, the broker's segment files hold {len(local)}; "
                f"first difference at byte {_first_diff(data, local)}"
            ]
        )
        report.verdict(name, diffs)
    offsets_checks(bucket, client, topic, partitions, report)


def _first_diff(a: bytes, b: bytes) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def listener_checks(
    bucket: Bucket,
    java: JavaTools,
    bootstrap: str,
    topic: str,
    partitions: int,
    report: Report,
    work: Path,
) -> None:
    for isolation in ISOLATIONS:
        want = bucket.oracle(topic, "java", isolation)
        out = work / f"{bucket.name}-{topic}-{isolation}.ndjson"
        name = f"{bucket.name}/{topic} listener {isolation}: Java consumer"
        if (
            report.guarded(name, java.run, "consume", bootstrap, topic, isolation, str(out))
            is not None
        ):
            report.compare(name, "listener-java", f"{bucket.name}/{topic}", want, load_ndjson(out))
        name = f"{bucket.name}/{topic} listener {isolation}: librdkafka"
        got = report.guarded(name, librdkafka_read, bootstrap, topic, partitions, isolation)
        if got is not None:
            report.compare(
                name,
                "listener-librdkafka",
                f"{bucket.name}/{topic}",
                bucket.oracle(topic, "librdkafka", isolation),
                got,
            )
    listener_offsets_checks(bucket, java, bootstrap, topic, partitions, report, work)


def _check_one(folder: Path | None, java: JavaTools, work: Path, spark: SparkRun) -> Report:
    """One bucket's checks; ``folder`` None: the live broker's, made first."""
    report = Report(emit=lambda _line: None)
    try:
        work.mkdir()
        if folder is None:
            try:
                folder = live.build(work, java)
            except Exception as e:
                report.fail("live broker", f"{type(e).__name__}: {str(e)[:1500]}")
                return report
        check_bucket(Bucket(folder), java, report, work, spark)
    except Exception as e:
        report.fail(f"{work.name} served", f"{type(e).__name__}: {str(e)[:500]}")
    finally:
        spark.leave(work.name, report)  # if it failed before its Spark checks
    return report


def run(emit: Any = print, only: tuple[str, ...] = ()) -> Report:
    """Every bucket's checks (the fixtures' and the live broker's, ``only`` these names), the
    buckets side by side (each mostly waits on its servers and JVMs); each bucket's lines are
    emitted when it is done."""
    report = Report(emit=emit)
    java = JavaTools(kafka_libs(), CACHE / "classes")
    java.compile()
    schemas = schema_checks.schema_buckets()  # checked apart (tests.realkafka.schema_checks)
    folders = sorted(
        p for p in FIXTURES.iterdir() if (p / "settings.json").exists() and p not in schemas
    )
    if not folders:
        report.fail("fixtures", f"no bucket under {FIXTURES}")
        return report
    jobs: list[Path | None] = [*folders, None]
    jobs = [j for j in jobs if not only or (j.name if j else "live") in only]
    spark = SparkRun({j.name for j in jobs if j is not None})  # the live bucket has no Spark checks
    with (
        java,
        tempfile.TemporaryDirectory(prefix="real-kafka-") as tmp,
        ThreadPoolExecutor(len(jobs) + 2) as pool,
    ):
        futures = [
            pool.submit(_check_one, j, java, Path(tmp) / (j.name if j else "live"), spark)
            for j in jobs
        ]
        if not only or "follow" in only:  # issue 29: a broker that tiers, followed live
            futures.append(pool.submit(_check_follow, Path(tmp) / "follow"))
        if not only or "schemas" in only:  # the schema formats (avro, protobuf, ...)
            futures.append(pool.submit(schema_checks.run, Path(tmp) / "schemas"))
        for future in futures:
            report.merge(future.result())
    return report


def _check_follow(work: Path) -> Report:
    report = Report(emit=lambda _line: None)
    try:
        work.mkdir()
        follow_scenarios.run(work, report)
    except Exception as e:
        report.fail("follow", f"{type(e).__name__}: {str(e)[:1500]}")
    return report


def main() -> None:
    report = run(only=tuple(sys.argv[1:]))
    print(report.summary())
    sys.exit(1 if report.differences else 0)


if __name__ == "__main__":
    main()
