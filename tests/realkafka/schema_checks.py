"""The schema formats against Confluent's own deserializers, on the bucket a real broker and the
real Aiven plugin tiered from Confluent's own serializers (``tests/fixtures/real_kafka/schemas``,
written by :mod:`tests.realkafka.generate_schemas`).

The test registry (:mod:`tests.fixtures.registry`) is started with the fixture's registrations
(the same ids), ``serve`` with ``--schema-registry-url`` on the bucket; then per partition,
record by record against the oracle (offset, key, value, key_schema_id, value_schema_id): the
JSON walk by ``next_offset`` (default ``max_bytes``, and ``max_bytes=1``: a batch a page), the
NDJSON stream, the JSON walk with ``auto`` for both key and value, and (the bytes themselves)
in ``base64``. On the topics of the other schema types, ``value_format=avro``: with
``decode_errors=raw`` every record with a null value beside its ``value_error`` (its raw
bytes), by default 422 ``invalid_format`` naming the offset asked (the first, a middle one).
When ``tiered-gateway schemas snapshot`` exists: a snapshot of the ids the topics' records
reference, and the decoding JSON walks again with ``--schema-dir`` on it, no registry running.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.registry import registry_process
from tests.realkafka.bucket import FIXTURES, Bucket, private_key, serving, store_of
from tests.realkafka.oracle import load_ndjson
from tests.realkafka.report import Report, Row
from tests.realkafka.surfaces import RECORDS, WALK_LIMIT, WalkError

SCHEMA_FORMATS = ("avro", "protobuf", "jsonschema", "auto")  # the record gains *_schema_id
ABSENT = "<absent>"  # a field the record does not have (a schema id in a plain format)
SMALL_PAGE = 1


def schema_buckets() -> list[Path]:
    """The fixture folders written by :mod:`tests.realkafka.generate_schemas`."""
    return sorted(p for p in FIXTURES.iterdir() if (p / "registrations.json").exists())


def walk_json(
    client: httpx.Client, topic: str, partition: int, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """The records of the pages by ``next_offset`` from the remote log start."""
    info = client.get(f"/v1/topics/{topic}/partitions/{partition}").json()
    offset, records = info["remote_log_start_offset"], []
    for _ in range(WALK_LIMIT):
        r = client.get(
            RECORDS.format(topic=topic, partition=partition), params={**params, "offset": offset}
        )
        if r.status_code != 200:
            raise WalkError(f"{topic}-{partition}@{offset}: {r.status_code} {r.text[:300]}")
        body = r.json()
        records += body["records"]
        if body["end_of_remote_log"]:
            return records
        if body["next_offset"] <= offset:
            raise WalkError(f"{topic}-{partition}@{offset}: next_offset {body['next_offset']}")
        offset = body["next_offset"]
    raise WalkError(f"{topic}-{partition}: no end after {WALK_LIMIT} pages")


def walk_ndjson(
    client: httpx.Client, topic: str, partition: int, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """The record lines of the streams from the remote log start until the end."""
    info = client.get(f"/v1/topics/{topic}/partitions/{partition}").json()
    offset, records = info["remote_log_start_offset"], []
    for _ in range(WALK_LIMIT):
        with client.stream(
            "GET",
            RECORDS.format(topic=topic, partition=partition),
            params={**params, "offset": offset},
            headers={"Accept": "application/x-ndjson"},
        ) as r:
            if r.status_code != 200:
                raise WalkError(f"{topic}-{partition}@{offset}: {r.status_code} {r.read()[:300]!r}")
            # lines end at "\n" only (httpx's iter_lines also splits at U+2028, which JSON
            # text may hold unescaped: a jsonschema value's text goes out as it came in)
            lines = [json.loads(line) for line in r.read().split(b"\n") if line]
        *page, last = lines
        if "next_offset" not in last or "error_code" in last:
            raise WalkError(f"{topic}-{partition}@{offset}: closing line {last}")
        records += page
        if last["end_of_remote_log"]:
            return records
        if last["next_offset"] <= offset:
            raise WalkError(f"{topic}-{partition}@{offset}: next_offset {last['next_offset']}")
        offset = last["next_offset"]
    raise WalkError(f"{topic}-{partition}: no end after {WALK_LIMIT} streams")


def oracle(bucket: Bucket, topic: str, partition: int) -> list[Row]:
    return load_ndjson(bucket.folder / "oracle" / f"{topic}-{partition}.ndjson")


def want_rows(rows: list[Row], partition: int, key_format: str, value_format: str) -> list[Row]:
    """The oracle's rows as the gateway writes them in these formats (the oracle's are the
    fixture's formats, or ``auto``, which reads the same from those topics; or ``base64``: the
    bytes the consumer read)."""
    out = []
    for o in rows:
        key, value = o["key"], o["value"]
        if (key_format, value_format) == ("base64", "base64"):
            key, value = o["key_b64"], o["value_b64"]
        row = {"partition": partition, "offset": o["offset"], "key": key, "value": value}
        for side, fmt in (("key", key_format), ("value", value_format)):
            row[f"{side}_schema_id"] = o[f"{side}_schema_id"] if fmt in SCHEMA_FORMATS else ABSENT
        out.append(row)
    return out


def got_rows(records: list[dict[str, Any]], partition: int) -> list[Row]:
    return [
        {
            "partition": partition,
            "offset": r["offset"],
            "key": r.get("key", ABSENT),
            "value": r.get("value", ABSENT),
            "key_schema_id": r.get("key_schema_id", ABSENT),
            "value_schema_id": r.get("value_schema_id", ABSENT),
        }
        for r in records
    ]


def decoded_checks(
    bucket: Bucket, client: httpx.Client, topic: str, report: Report, how: str
) -> None:
    """Per partition, the JSON walks (and the NDJSON stream) in the fixture's formats and in
    ``auto`` against the oracle; ``how``: the schemas from the ``registry`` or the ``dir``."""
    formats = bucket.settings["formats"][topic]
    fixture = {"key_format": formats["key"], "value_format": formats["value"]}
    auto = {"key_format": "auto", "value_format": "auto"}
    walks: dict[str, tuple[Any, dict[str, Any]]] = {
        "json": (walk_json, fixture),
        "json-1": (walk_json, {**fixture, "max_bytes": SMALL_PAGE}),
        "ndjson": (walk_ndjson, fixture),
        "json-auto": (walk_json, auto),
        "json-base64": (walk_json, {"key_format": "base64", "value_format": "base64"}),
    }
    if how == "dir":  # the schema folder: the JSON walks that decode
        walks = {k: walks[k] for k in ("json", "json-1", "json-auto")}
    for p in range(bucket.topics[topic]):
        rows = oracle(bucket, topic, p)
        for surface, (walk, params) in walks.items():
            source = "--schema-dir" if how == "dir" else how
            what = "librdkafka's bytes" if surface == "json-base64" else "Confluent's deserializers"
            name = f"{bucket.name}/{topic}-{p} {source} {surface} = {what}"
            records = report.guarded(name, walk, client, topic, p, params)
            if records is None:
                continue
            want = want_rows(rows, p, params["key_format"], params["value_format"])
            report.compare(
                name,
                f"schema-{how}-{surface}",
                f"{bucket.name}/{topic}",
                want,
                got_rows(records, p),
            )


def error_checks(bucket: Bucket, client: httpx.Client, topic: str, report: Report) -> None:
    """``value_format=avro`` on a topic of another schema type: ``decode_errors=raw`` keeps
    every record, its value null beside ``value_error`` {message, raw}; by default 422."""
    formats = bucket.settings["formats"][topic]
    params = {"key_format": formats["key"], "value_format": "avro"}
    cell = f"{bucket.name}/{topic}"
    for p in range(bucket.topics[topic]):
        rows = oracle(bucket, topic, p)
        want = [
            {
                "partition": p,
                "offset": o["offset"],
                "key": o["key"],
                "value": None,
                "value_schema_id": o["value_schema_id"],
                "value_error": {"message": True, "raw": o["value_b64"]},
            }
            for o in rows
        ]
        for surface, walk in (("json", walk_json), ("ndjson", walk_ndjson)):
            name = f"{cell}-{p} value_format=avro decode_errors=raw {surface}"
            records = report.guarded(
                name, walk, client, topic, p, {**params, "decode_errors": "raw"}
            )
            if records is None:
                continue
            got = []
            for r in records:
                error = r.get("value_error") or {}
                got.append(
                    {
                        "partition": p,
                        "offset": r["offset"],
                        "key": r.get("key", ABSENT),
                        "value": r.get("value", ABSENT),
                        "value_schema_id": r.get("value_schema_id", ABSENT),
                        "value_error": {
                            "message": isinstance(error.get("message"), str)
                            and bool(error["message"]),
                            "raw": error.get("raw", ABSENT),
                        },
                    }
                )
            report.compare(name, f"schema-raw-errors-{surface}", cell, want, got)
        for at in (rows[0]["offset"], rows[len(rows) // 2]["offset"]):
            name = f"{cell}-{p}@{at} value_format=avro decode_errors=fail: 422 naming {at}"
            path = RECORDS.format(topic=topic, partition=p)
            query = {**params, "offset": at}
            r = report.guarded(name, lambda u=path, q=query: client.get(u, params=q))
            if r is not None:
                report.verdict(name, _unfit_diffs(r, at, "value_format"))


def _unfit_diffs(r: httpx.Response, at: int, parameter: str) -> list[str]:
    """What differs from a 422 ``invalid_format`` naming ``parameter`` and the offset ``at``."""
    if r.status_code != 422:
        return [f"status {r.status_code}, want 422: {r.text[:200]}"]
    body = r.json()
    diffs = []
    if body.get("error_code") != "invalid_format":
        diffs.append(f"error_code {body.get('error_code')!r}, want 'invalid_format'")
    if body.get("offset") != at or f"offset {at}" not in str(body.get("message")):
        diffs.append(f"offset {body.get('offset')!r}, message {body.get('message')!r}, want {at}")
    if body.get("parameter") != parameter:
        diffs.append(f"parameter {body.get('parameter')!r}, want {parameter!r}")
    return diffs


def snapshot_command() -> list[str] | None:
    """``tiered-gateway schemas snapshot`` when this gateway has it."""
    command = [sys.executable, "-m", "gateway.cli", "schemas", "snapshot"]
    done = subprocess.run([*command, "--help"], capture_output=True, text=True, check=False)
    return command if done.returncode == 0 else None


def check_bucket(folder: Path, report: Report, work: Path) -> None:
    """Serve the bucket on the registry, then (when the gateway has ``schemas snapshot``) on
    a snapshot of it (the ids the topics' records reference) with no registry running."""
    bucket = Bucket(folder)
    key = private_key(work)
    snapshot: Path | None = None
    registrations = folder / "registrations.json"
    with (
        registry_process(work / "registry.log", load=registrations) as (_, registry),
        store_of(bucket, key) as args,
    ):
        with _client([*args, "--schema-registry-url", registry], work / "serve.log") as client:
            for topic in bucket.topics:
                decoded_checks(bucket, client, topic, report, "registry")
            for topic, formats in bucket.settings["formats"].items():
                if formats["value"] in ("protobuf", "jsonschema"):
                    error_checks(bucket, client, topic, report)
        command = snapshot_command()
        if command is not None:
            topics = [x for t in bucket.topics for x in ("--topic", t)]
            command += [*args, *topics, "--schema-registry-url", registry]
            command += ["--state-dir", str(work / "snapshot-state")]
            name = f"{bucket.name} schemas snapshot of the topics' ids"
            snapshot = report.guarded(name, _snapshot, command, work / "schema-dir")
    if snapshot is None:
        return
    with (
        store_of(bucket, key) as args,
        _client([*args, "--schema-dir", str(snapshot)], work / "serve-dir.log") as client,
    ):
        for topic in bucket.topics:
            decoded_checks(bucket, client, topic, report, "dir")


def _snapshot(command: list[str], folder: Path) -> Path:
    done = subprocess.run(
        [*command, "--out", str(folder)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"schemas snapshot exited {done.returncode}: {done.stderr[-1000:]}")
    return folder


@contextlib.contextmanager
def _client(args: list[str], log: Path) -> Iterator[httpx.Client]:
    with serving(args, log) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        yield client


def run(work: Path) -> Report:
    """Every schema bucket's checks (their own report: :func:`tests.realkafka.checks.run`
    runs it beside the other buckets')."""
    report = Report(emit=lambda _line: None)
    folders = schema_buckets()
    if not folders:
        report.fail("schemas", f"no schema bucket under {FIXTURES}")
    for folder in folders:
        try:
            (work / folder.name).mkdir(parents=True)
            check_bucket(folder, report, work / folder.name)
        except Exception as e:
            report.fail(f"{folder.name} served", f"{type(e).__name__}: {str(e)[:1500]}")
    return report


def main() -> None:
    """``python -m tests.realkafka.schema_checks``: these checks alone, timed."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="real-kafka-schemas-") as tmp:
        report = run(Path(tmp))
    for line in report.lines:
        print(line)
    print(report.summary())
    print(f"{time.monotonic() - started:.1f} s")
    sys.exit(1 if report.differences else 0)


if __name__ == "__main__":
    main()
