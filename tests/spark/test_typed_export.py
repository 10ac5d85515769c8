"""Issue 31: ``export --value-format avro|protobuf|jsonschema`` writes typed columns, compared
record by record with what Confluent's own deserializers read from the same bytes; schema
versions that add fields merge; a changed field type fails the run naming offset and id."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.fixtures.extras import require_spark

require_spark()

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from gateway.cli import main as cli_main
from gateway.spark import iceberg as ice
from tests.fixtures import confluent_payloads as cp
from tests.fixtures.registry import registry_process
from tests.fixtures.schema_bucket import tier_records

N = 60


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("typed")
    with registry_process(work / "registry.log") as (_, url):
        client = SchemaRegistryClient({"url": url})
        payloads = cp.Payloads(client)
        rng = random.Random(3)
        written = {
            "orders": list(payloads.records("orders", "avro", N, seed=8, v2_from=N // 2)),
            "events": [
                (None, payloads.proto["Event"](_event(rng, i), _ctx("events"))) for i in range(N)
            ],
            "nanos": [(None, payloads.proto["Event"](_event(rng, 0, 1), _ctx("nanos")))],
            "readings": list(payloads.records("readings", "jsonschema", N, seed=9)),
            "changed": _changed(client),
        }
        v1 = Schema(json.dumps(cp.AVRO_V1), "AVRO")
        client.register_schema("orders-v1", v1)  # the first version alone: an older table
        store = ""
        for topic, records in written.items():
            store = tier_records(work, topic, records)
        yield {"work": work, "url": url, "client": client, "written": written, "store": store}


def _event(rng: random.Random, i: int, nanos: int | None = None) -> Any:
    """An Event whose Timestamp holds whole microseconds (the column's unit), or ``nanos``."""
    event = cp._event(rng, i)
    event.at.nanos = event.at.nanos // 1000 * 1000 if nanos is None else nanos
    return event


def _ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def _changed(client: SchemaRegistryClient) -> list[tuple[bytes | None, bytes | None]]:
    """Version 1 has ``a`` an int, version 2 a string: not to be merged."""
    conf = {"auto.register.schemas": True}
    record = {"type": "record", "name": "C", "fields": [{"name": "a", "type": "int"}]}
    v1 = AvroSerializer(client, json.dumps(record), conf=conf)
    record["fields"] = [{"name": "a", "type": "string"}]
    v2 = AvroSerializer(client, json.dumps(record), conf=conf)
    return [(None, v1({"a": 1}, _ctx("changed"))), (None, v1({"a": 2}, _ctx("changed"))),
            (None, v2({"a": "x"}, _ctx("changed")))]  # fmt: skip


def _micros(t: dt.time) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 10**6 + t.microsecond


def _export(world: dict[str, Any], topic: str, out: Path, *extra: str) -> int:
    return cli_main([
        "export", "--store", world["store"], "--topic", topic, "--output", str(out),
        "--master", "local[2]", "--quiet", "--schema-registry-url", world["url"], *extra,
    ])  # fmt: skip


def _rows(out: Path, topic: str) -> list[dict[str, Any]]:
    table = pq.read_table(out / f"topic={topic}" / "partition=0")
    return sorted(table.to_pylist(), key=lambda r: r["offset"])


def test_avro_values_and_keys_are_typed_columns(
    spark: SparkSession, world: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "orders"
    assert _export(world, "orders", out, "--value-format", "avro", "--key-format", "avro") == 0
    schema = pq.read_schema(next((out / "topic=orders" / "partition=0").glob("*.parquet")))
    value = schema.field("value").type
    assert value.field("price").type == pa.decimal128(12, 2)
    assert value.field("rate").type == pa.decimal128(18, 6)
    assert value.field("at_ms").type == pa.timestamp("ms", "UTC")
    assert value.field("day").type == pa.date32()
    assert value.field("attrs").type == pa.map_(pa.string(), pa.int32())
    assert value.field("note").type == pa.string()  # version 2's field, merged
    assert schema.field("key").type == pa.string()
    oracle = cp.Oracle(world["client"])
    rows = _rows(out, "orders")
    assert [r["offset"] for r in rows] == list(range(N))
    for row, (key, data) in zip(rows, world["written"]["orders"], strict=True):
        if data is None:
            assert row["value"] is None and row["value_schema_id"] is None
            continue
        read = oracle.avro(data, _ctx("orders"))
        want = {
            **read,
            "note": read.get("note"),
            "attrs": list(read["attrs"].items()),
            "uid": str(read["uid"]),
            "tod_ms": _micros(read["tod_ms"]) // 1000,
            "tod_us": _micros(read["tod_us"]),
        }
        union = next(f["type"] for f in cp.AVRO_V1["fields"] if f["name"] == "payload")
        plain = cp._avro_plain(union, read["payload"], {"Customer": cp._CUSTOMER})
        want["payload"] = (
            None if plain is None else json.dumps(plain, separators=(",", ":"), ensure_ascii=False)
        )
        if want["payload"] is not None:
            assert json.loads(row["value"]["payload"]) == json.loads(want["payload"])
            row["value"]["payload"] = want["payload"]
        assert row["value"] == want, row["offset"]
        assert row["value_schema_id"] == int.from_bytes(data[1:5], "big")
        assert row["key"] == oracle.avro(key, SerializationContext("orders", MessageField.KEY))
    # Spark reads the files as one table, the fields as nested columns.
    got = spark.read.parquet(str(out)).selectExpr("offset", "value.price", "value.status").collect()
    assert len(got) == N


def test_protobuf_values_are_typed_columns(
    spark: SparkSession, world: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "events"
    assert _export(world, "events", out, "--value-format", "protobuf") == 0
    classes = cp.proto_classes()
    reader = cp.ProtobufDeserializer(classes["Event"], {"use.deprecated.format": False})
    for row, (_, data) in zip(_rows(out, "events"), world["written"]["events"], strict=True):
        msg = reader(data, _ctx("events"))
        v = row["value"]
        assert (v["id"], v["name"], v["tags"], v["score"], v["big"]) == (
            msg.id, msg.name, list(msg.tags), msg.score, msg.big)  # fmt: skip
        assert v["kind"] == classes["Event"].Kind.Name(msg.kind)
        assert dict(v["counts"]) == dict(msg.counts)
        assert v["inner"] == ({"label": msg.inner.label, "delta": msg.inner.delta}
                              if msg.HasField("inner") else None)  # fmt: skip
        body = msg.WhichOneof("body")
        assert v["text"] == (msg.text if body == "text" else None)
        assert v["blob"] == (msg.blob if body == "blob" else None)
        assert v["nested"] == ({"label": msg.nested.label, "delta": msg.nested.delta}
                               if body == "nested" else None)  # fmt: skip
        at = msg.at.seconds * 10**9 + msg.at.nanos if msg.HasField("at") else None
        got_at = v["at"]
        if got_at is not None:
            got_at = (got_at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
                microseconds=1
            ) * 1000 + getattr(got_at, "nanosecond", 0)
        assert got_at == at
        assert v["maybe"] == (msg.maybe.value if msg.HasField("maybe") else None)


def test_json_schema_values_are_typed_columns(
    spark: SparkSession, world: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "readings"
    assert _export(world, "readings", out, "--value-format", "jsonschema") == 0
    for row, (_, data) in zip(_rows(out, "readings"), world["written"]["readings"], strict=True):
        doc = json.loads(data[5:])
        meta = doc.get("meta")
        text = None if meta is None else json.dumps(meta, separators=(",", ":"), ensure_ascii=False)
        want = {"sensor": doc["sensor"], "value": float(doc["value"]), "tags": doc.get("tags"),
                "meta": text}  # fmt: skip
        if want["meta"] is not None:
            assert json.loads(row["value"]["meta"]) == meta
            row["value"]["meta"] = want["meta"]
        assert row["value"] == want


def test_a_changed_field_type_fails_naming_offset_and_id(
    spark: SparkSession, world: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "changed"
    assert _export(world, "changed", out, "--value-format", "avro") == 1
    err = capsys.readouterr().err
    bad = int.from_bytes(world["written"]["changed"][2][1][1:5], "big")
    assert f"offset 2: value schema id {bad}" in err
    assert "a is int32 in one version, string in another" in err
    assert not (out / "_SUCCESS").exists()


def test_a_timestamp_finer_than_the_column_fails_naming_the_offset(
    spark: SparkSession, world: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ("--value-format", "protobuf", "--value-subject", "events-value")
    assert _export(world, "nanos", tmp_path / "nanos", *extra) == 1
    assert "offset 0: value schema id" in capsys.readouterr().err


def test_an_iceberg_table_of_typed_columns_grows_with_the_subject(
    spark: SparkSession, world: dict[str, Any], tmp_path: Path
) -> None:
    """The first run knows only version 1 (records 0-29); the second, version 2 too: the table
    gains ``note`` and the rest of the records, the first ones reading it as null."""
    warehouse = tmp_path / "wh"
    iceberg = ("--format", "iceberg", "--warehouse", str(warehouse), "--value-format", "avro")
    first = ["export", "--store", world["store"], "--topic", "orders", "--master", "local[2]",
             "--quiet", "--schema-registry-url", world["url"], *iceberg]  # fmt: skip
    assert cli_main([*first, "--value-subject", "orders-v1", "--to", str(N // 2)]) == 0
    table = ice.open_catalog(None, str(warehouse)).load_table(("kafka", "orders"))
    assert "value.note" not in table.schema().column_names
    assert table.schema().find_type("value.at_ms") == table.schema().find_type("timestamp")
    assert cli_main(first) == 0
    table = ice.open_catalog(None, str(warehouse)).load_table(("kafka", "orders"))
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == list(range(N))
    oracle = cp.Oracle(world["client"])
    for row, (_, data) in zip(rows, world["written"]["orders"], strict=True):
        if data is None:
            assert row["value"] is None
            continue
        read = oracle.avro(data, _ctx("orders"))
        assert row["value"]["note"] == read.get("note")
        assert row["value"]["price"] == read["price"] and row["value"]["at_us"] == read["at_us"]
        assert row["value"]["at_ms"] == read["at_ms"]  # milliseconds, held as microseconds
        assert row["value_schema_id"] == int.from_bytes(data[1:5], "big")
    got = spark.read.parquet(*[str(p) for p in warehouse.rglob("*.parquet")])
    assert got.count() == N


def test_the_spark_source_takes_the_same_options(
    spark: SparkSession, world: dict[str, Any]
) -> None:
    from gateway.spark.source import register  # noqa: PLC0415

    register(spark)
    df = (
        spark.read.format("tiered-kafka")
        .option("store", world["store"]).option("topic", "orders")
        .option("valueFormat", "avro").option("keyFormat", "avro")
        .option("schemaRegistryUrl", world["url"])
        .load()
    )  # fmt: skip
    assert df.schema["value"].dataType.simpleString().startswith("struct<id:bigint,")
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert len(rows) == N
    oracle = cp.Oracle(world["client"])
    for row, (key, data) in zip(rows, world["written"]["orders"], strict=True):
        if data is None:
            assert row.value is None
            continue
        read = oracle.avro(data, _ctx("orders"))
        v = row.value.asDict()
        assert (v["price"], v["rate"], v["day"], v["status"]) == (
            read["price"], read["rate"], read["day"], read["status"])  # fmt: skip
        assert v["at_us"].astimezone(dt.UTC) == read["at_us"]  # PySpark gives local time
        assert v["note"] == read.get("note") and v["digest"] == read["digest"]
        assert dict(v["attrs"]) == read["attrs"]
        assert row.value_schema_id == int.from_bytes(data[1:5], "big")
        assert row.key == oracle.avro(key, SerializationContext("orders", MessageField.KEY))


def test_the_spark_writer_writes_the_same_typed_columns(
    spark: SparkSession, world: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "json"
    extra = ("--writer", "spark", "--format", "json", "--compression", "none")
    assert _export(world, "orders", out, "--value-format", "avro", *extra) == 0
    lines = [json.loads(x) for p in out.rglob("*.json") for x in p.read_text().splitlines()]
    got = {x["offset"]: x for x in lines}
    assert len(got) == N
    oracle = cp.Oracle(world["client"])
    for offset, (_, data) in enumerate(world["written"]["orders"]):
        if data is not None:
            read = oracle.avro(data, _ctx("orders"))
            assert got[offset]["value"]["status"] == read["status"]
            assert got[offset]["value"].get("note") == read.get("note")
