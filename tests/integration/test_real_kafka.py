"""Issue 28: every surface of the gateway reads the buckets a real Kafka broker (4.1) and the
real Aiven plugin (1.0.0) wrote exactly as Kafka's own clients and tools read them
(:mod:`tests.realkafka.checks`; ``make real-kafka`` prints the same report). Issue 29: the
gateway following a live broker's ``__remote_log_metadata`` (:mod:`tests.realkafka.
follow_scenarios`: live-metadata, retention, delete-records, topic-deleted, upload-in-flight).
The schema formats against Confluent's deserializers (:mod:`tests.realkafka.schema_checks`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from tests.realkafka import decoders, dumps, schema_checks
from tests.realkafka.bucket import FIXTURES, Bucket, private_key, serving, store_of
from tests.realkafka.checks import http_checks, run
from tests.realkafka.jars import CACHE, kafka_libs
from tests.realkafka.java import JavaToolError, JavaTools
from tests.realkafka.report import Report

pytestmark = pytest.mark.timeout(1200)


def test_every_surface_reads_what_real_kafka_wrote(capsys: pytest.CaptureFixture[str]) -> None:
    report = run(emit=lambda _line: None)
    failed = [line for line in report.lines if line.startswith("FAIL")]
    with capsys.disabled():
        print("\n" + report.summary())
    buckets = {t.split("/")[0] for _, t in report.table}
    assert buckets == {"fs", "s3", "live", "follow", "schemas"}, buckets
    checks = ["live-metadata", "retention", "delete-records", "topic-deleted"]
    if not any("(aiven)" in line for line in report.lines):  # with LocalTieredStorage only
        checks += ["upload-in-flight", "local-tiered-storage"]
    for check in checks:  # "PASS <check> (<mode>): ..." or "PASS <check>, <how> (<mode>): ..."
        passed = [x for x in report.lines if x.split(" (")[0].split(",")[0] == f"PASS {check}"]
        assert passed, check
    schema_surfaces = {s for s, t in report.table if t.startswith("schemas/")}
    wanted = {"schema-registry-json", "schema-registry-json-1", "schema-registry-ndjson"}
    wanted |= {"schema-registry-json-auto", "schema-raw-errors-json", "schema-raw-errors-ndjson"}
    if schema_checks.snapshot_command() is not None:
        wanted |= {"schema-dir-json", "schema-dir-json-1", "schema-dir-json-auto"}
    assert wanted <= schema_surfaces, wanted - schema_surfaces
    empty = [cell for cell, (n, _) in report.table.items() if n == 0]
    assert not empty, f"cells with no record compared: {empty}"
    assert not failed, "\n".join(failed)
    assert report.differences == 0


def test_every_decoder_reads_damaged_batches_as_kafka_does() -> None:
    """Issue 33: the reference decoder, aiokafka's behind the compiled checks and the compiled
    columns answer what Kafka's Java reader answers (the same records, or an error) on 2,000
    seeded damaged batches (:mod:`tests.realkafka.decoders`)."""
    report = decoders.run(JavaTools(kafka_libs(), CACHE / "classes"))
    assert not report.disagreements, "\n".join(report.disagreements[:10])
    # not vacuous: Java reads and refuses overlong varints, reads past-the-type bits, refuses
    # some flipped bytes; the columns answered some cases themselves
    seen = report.outcomes
    assert seen["padded", "ok"] and seen["padded", "error"] and seen["wide", "ok"], seen
    assert seen["attributes", "ok"] and seen["flip", "error"], seen
    assert report.column_answers > report.cases // 10, report.column_answers


def test_the_oracle_server_fails_a_command_and_answers_the_next() -> None:
    """KafkaOracle runs as one JVM per thread (``serve``): a failed command is a
    :class:`JavaToolError` with its message, the same JVM answers the next one, and closing the
    tools ends it."""
    with JavaTools(kafka_libs(), CACHE / "classes") as java:
        for _ in range(2):
            with pytest.raises(JavaToolError, match="exited 2: consume takes"):
                java.run("consume", "127.0.0.1:9")
        (server,) = java._servers
        assert server.alive
    assert server.proc.wait(timeout=30) == 1  # its last command failed


def test_the_checks_fail_on_a_wrong_bucket(tmp_path: Path) -> None:
    """The checks can fail: the first plain (unencrypted, uncompressed) ``.log`` object of
    ``codecs`` with one byte of a record flipped, and an oracle row changed, are FAIL lines
    (a typed error, a difference), never PASS."""
    bucket_dir = tmp_path / "fs"
    shutil.copytree(FIXTURES / "fs", bucket_dir)
    logs = sorted((bucket_dir / "bucket").glob("codecs-*/0/*.log"))
    data = bytearray(logs[0].read_bytes())
    data[len(data) - 3] ^= 0x01  # inside the last record of the object's last batch
    logs[0].write_bytes(bytes(data))
    oracle = bucket_dir / "oracle" / "logappend.java.read_uncommitted.ndjson"
    rows = oracle.read_text().splitlines()
    row = json.loads(rows[1])
    row["timestamp"] += 1
    oracle.write_text("\n".join([rows[0], json.dumps(row), *rows[2:]]) + "\n")
    bucket = Bucket(bucket_dir)
    dumps.prepare(bucket, JavaTools(kafka_libs(), CACHE / "classes"))
    report = Report(emit=lambda _line: None)
    with (
        store_of(bucket, private_key(tmp_path)) as args,
        serving(args, tmp_path / "serve.log") as (url, _),
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        http_checks(bucket, client, "codecs", 3, report)
        http_checks(bucket, client, "logappend", 1, report)
    failed = {line.split(":")[0] for line in report.lines if line.startswith("FAIL")}
    for surface in ("http-json", "http-ndjson", "http-raw", "http-json-1", "http-raw-1"):
        for isolation in ("read_uncommitted", "read_committed"):
            assert f"FAIL fs/codecs {surface} {isolation} = Java consumer" in failed
    assert "FAIL fs/codecs-0 http-raw bytes = the broker's segment files" in failed
    assert any("crc" in line.lower() for line in report.lines if "fs/codecs http-json " in line)
    assert "FAIL fs/logappend http-json read_uncommitted = Java consumer" in failed
    assert not [
        line
        for line in report.lines
        if line.startswith(("PASS fs/codecs-0", "PASS fs/codecs http-"))
    ]


def test_the_schema_checks_fail_on_a_wrong_oracle(tmp_path: Path) -> None:
    """The schema checks can fail: an Avro value's field and a Protobuf value's schema id
    changed in the oracle are FAIL lines on every surface that reads them, never PASS."""
    folder = tmp_path / "schemas"
    shutil.copytree(FIXTURES / "schemas", folder)
    for name in ("avro-1", "protobuf-0"):
        path = folder / "oracle" / f"{name}.ndjson"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        if name == "avro-1":
            rows[3]["value"]["status"] = "CHANGED"
        else:
            rows[3]["value_schema_id"] += 1
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = Report(emit=lambda _line: None)
    (tmp_path / "work").mkdir()
    schema_checks.check_bucket(folder, report, tmp_path / "work")
    failed = {line.split(":")[0] for line in report.lines if line.startswith("FAIL")}
    how = ["registry"] + (["--schema-dir"] if schema_checks.snapshot_command() else [])
    for partition in ("avro-1", "protobuf-0"):
        for source in how:
            for surface in ("json", "json-1", "json-auto") + ("ndjson",) * (source == "registry"):
                name = f"schemas/{partition} {source} {surface} = Confluent's deserializers"
                assert f"FAIL {name}" in failed, name
    for surface in ("json", "ndjson"):
        assert f"FAIL schemas/protobuf-0 value_format=avro decode_errors=raw {surface}" in failed
    assert report.differences == len(failed)  # one row each
    assert not [x for x in failed if "avro-0" in x or "jsonschema" in x or "mixed" in x]
