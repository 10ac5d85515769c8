"""Issue 31: keys and values written by Confluent's own serializers, read through ``serve`` with
``--schema-registry-url`` (the test registry as its own process) or ``--schema-dir`` (a
``schemas snapshot`` of it), compared record by record with Confluent's own deserializers.

The bucket here is tiered by ``tiered-gateway tier`` from segment files kafka-python's builder
wrote (the payload bytes are Confluent's; the real broker and plugin path is
``tests/realkafka/schema_checks.py``)."""

from __future__ import annotations

import base64
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.fixtures.browser import RECORD_ROWS, Watch, chromium
from tests.fixtures.confluent_payloads import Oracle, Payloads
from tests.fixtures.registry import registry_process
from tests.fixtures.schema_bucket import tier_records
from tests.integration.serve import serve_process

pytestmark = pytest.mark.integration

TOPICS = {"avro": "avro", "protobuf": "protobuf", "jsonschema": "jsonschema", "mixed": "mixed"}
FORMATS = {  # topic -> (key_format, value_format)
    "avro": ("avro", "avro"),
    "protobuf": ("string", "protobuf"),
    "jsonschema": ("string", "jsonschema"),
    "mixed": ("auto", "auto"),
}
N = 90


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The registry process, the bucket and the records written into it."""
    work = tmp_path_factory.mktemp("schemas")
    with registry_process(work / "registry.log") as (_, url):
        client = SchemaRegistryClient({"url": url})
        payloads = Payloads(client)
        written: dict[str, list[tuple[bytes | None, bytes | None]]] = {}
        for topic, kind in TOPICS.items():
            written[topic] = list(payloads.records(topic, kind, N, seed=31, v2_from=N // 2))
            tier_records(work, topic, written[topic])
        good = written["avro"][0][1]
        assert good is not None
        written["odd"] = [
            (None, None),  # a tombstone
            (None, good),
            (None, b"\x00\x00\x00\x03\xe7" + good[5:]),  # id 999: not in the registry
            (None, b"\x00\x00\x01"),  # a truncated header
            (None, b"\x01" + good[1:]),  # a wrong magic byte
        ]
        tier_records(work, "odd", written["odd"], per_batch=1)
        yield {
            "work": work,
            "url": url,
            "client": client,
            "written": written,
            "store": (work / "bucket").as_uri(),
        }


def _expected(world: dict[str, Any], topic: str) -> list[dict[str, Any]]:
    oracle = Oracle(world["client"])
    key_fmt, value_fmt = FORMATS[topic]
    rows = []
    for offset, (key, value) in enumerate(world["written"][topic]):
        row: dict[str, Any] = {"offset": offset}
        for what, fmt, data in (("key", key_fmt, key), ("value", value_fmt, value)):
            row[what], found = oracle.read(topic, what, fmt, data)
            if fmt in ("avro", "protobuf", "jsonschema", "auto"):
                row[f"{what}_schema_id"] = found
        rows.append(row)
    return rows


def _walk(
    client: httpx.Client, topic: str, max_bytes: int = 1 << 20, **params: Any
) -> list[dict[str, Any]]:
    key_fmt, value_fmt = FORMATS[topic]
    offset, rows = 0, []
    while True:
        r = client.get(
            f"/v1/topics/{topic}/partitions/0/records",
            params={
                "offset": offset,
                "key_format": key_fmt,
                "value_format": value_fmt,
                "max_bytes": max_bytes,
                **params,
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        rows += body["records"]
        if body["end_of_remote_log"]:
            return rows
        offset = body["next_offset"]


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("offset", "key", "value", "key_schema_id", "value_schema_id")
    return {k: row[k] for k in keep if k in row}


@contextlib.contextmanager
def _served(world: dict[str, Any], *args: str, name: str = "serve") -> Iterator[httpx.Client]:
    log = world["work"] / f"{name}.log"
    with (
        serve_process(["--store", world["store"], *args], log) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield client


@pytest.mark.parametrize("max_bytes", [1, 1 << 20])
def test_every_record_decodes_as_confluents_deserializers_read_it(
    world: dict[str, Any], max_bytes: int
) -> None:
    with _served(world, "--schema-registry-url", world["url"], name=f"serve-{max_bytes}") as client:
        for topic in TOPICS:
            got = [_fields(r) for r in _walk(client, topic, max_bytes)]
            assert got == _expected(world, topic), topic


def test_ndjson_decodes_the_same_and_headers_keep_their_format(world: dict[str, Any]) -> None:
    with _served(world, "--schema-registry-url", world["url"], name="serve-ndjson") as client:
        for topic in ("avro", "mixed"):
            key_fmt, value_fmt = FORMATS[topic]
            r = client.get(
                f"/v1/topics/{topic}/partitions/0/records",
                params={
                    "offset": 0,
                    "key_format": key_fmt,
                    "value_format": value_fmt,
                    "header_format": "string",
                },
                headers={"accept": "application/x-ndjson"},
            )
            lines = [orjson.loads(line) for line in r.content.splitlines()]
            assert lines[-1]["end_of_remote_log"] is True
            assert [_fields(x) for x in lines[:-1]] == _expected(world, topic)
            assert {h["value"] for x in lines[:-1] for h in x["headers"]} == {"x"}


def test_decode_errors_raw_keeps_the_page_and_fail_names_the_offset(world: dict[str, Any]) -> None:
    with _served(world, "--schema-registry-url", world["url"], name="serve-raw") as client:
        path = "/v1/topics/protobuf/partitions/0/records"
        failed = client.get(path, params={"offset": 0, "value_format": "avro"})
        assert failed.status_code == 422
        assert failed.json()["error_code"] == "invalid_format"
        assert failed.json()["offset"] == 0
        assert "PROTOBUF" in failed.json()["message"]
        r = client.get(
            path,
            params={
                "offset": 0,
                "value_format": "avro",
                "decode_errors": "raw",
                "max_bytes": 1 << 20,
            },
        )
        assert r.status_code == 200
        records = r.json()["records"]
        written = world["written"]["protobuf"]
        assert [x["offset"] for x in records] == list(range(len(written)))
        for x in records:
            assert x["value"] is None
            assert base64.b64decode(x["value_error"]["raw"]) == written[x["offset"]][1]


def test_a_schema_format_without_a_registry_names_the_record(world: dict[str, Any]) -> None:
    """Still a valid request (the contract's): each framed value is a record that does not
    decode, saying why; raw errors let the page go on."""
    with _served(world, name="serve-none") as client:
        path = "/v1/topics/avro/partitions/0/records"
        r = client.get(path, params={"offset": 0, "value_format": "avro"})
        assert r.status_code == 422
        assert r.json()["parameter"] == "value_format" and r.json()["offset"] == 0
        assert "no schema registry is configured" in r.json()["message"]
        r = client.get(path, params={"offset": 0, "value_format": "avro", "decode_errors": "raw"})
        assert r.status_code == 200
        assert all(x["value"] is None for x in r.json()["records"])
        r = client.get(
            "/v1/topics/mixed/partitions/0/records",
            params={"offset": 0, "value_format": "auto", "max_bytes": 1 << 20},
        )
        assert r.status_code == 200  # auto without a registry: string or base64
        assert all(
            x["value_schema_id"] is None or x["value"] is not None for x in r.json()["records"]
        )


def test_a_snapshot_serves_without_the_registry(world: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "snap"
    command = [
        sys.executable,
        "-m",
        "gateway.cli",
        "schemas",
        "snapshot",
        "--schema-registry-url",
        world["url"],
        "--out",
        str(out),
        "--store",
        world["store"],
        "--topic",
        "avro",
        "--topic",
        "protobuf",
        "--topic",
        "jsonschema",
        "--topic",
        "mixed",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    summary = orjson.loads(done.stdout)
    framed = {
        int.from_bytes(data[1:5], "big")
        for topic, records in world["written"].items()
        for pair in records
        for data in pair
        if topic in TOPICS and data and data[0] == 0 and len(data) >= 5
    }
    assert summary["missing"] == []
    assert summary["ids"] == sorted(framed)
    with _served(world, "--schema-dir", str(out), name="serve-dir") as client:
        for topic in TOPICS:
            assert [_fields(r) for r in _walk(client, topic)] == _expected(world, topic), topic


def test_registry_down_is_a_retriable_503_and_known_ids_still_decode(
    world: dict[str, Any], tmp_path: Path
) -> None:
    load = tmp_path / "load.json"
    load.write_bytes(httpx.get(world["url"] + "/_registrations").content)
    auth = ["--schema-registry-username", "u", "--schema-registry-password", "p"]
    with (
        registry_process(tmp_path / "registry.log", basic="u:p", load=load) as (proc, url),
        _served(world, "--schema-registry-url", url, *auth, name="serve-down") as client,
    ):
        path = "/v1/topics/avro/partitions/0/records"
        params = {"offset": 0, "value_format": "avro", "max_bytes": 1}
        assert client.get(path, params=params).status_code == 200
        proc.terminate()
        proc.wait(timeout=15)
        assert client.get(path, params=params).status_code == 200  # cached by id
        r = client.get(
            "/v1/topics/jsonschema/partitions/0/records",
            params={"offset": 0, "value_format": "jsonschema"},
        )
        assert r.status_code == 503
        assert r.json()["error_code"] == "schema_registry_unavailable"
        assert r.json()["retriable"] is True
        assert "retry-after" in r.headers


def test_wrong_registry_credentials_are_a_502_not_a_decoded_page(
    world: dict[str, Any], tmp_path: Path
) -> None:
    with (
        registry_process(tmp_path / "registry.log", basic="u:p") as (_, url),
        _served(
            world,
            "--schema-registry-url",
            url,
            "--schema-registry-username",
            "u",
            name="serve-auth",
        ) as client,
    ):
        r = client.get(
            "/v1/topics/avro/partitions/0/records", params={"offset": 0, "value_format": "avro"}
        )
        assert r.status_code == 502
        assert r.json()["error_code"] == "schema_registry_error"


@pytest.mark.parametrize(
    ("offset", "avro", "auto"),
    [
        (0, (200, None), (200, None)),
        (1, (200, "decoded"), (200, "decoded")),
        (2, (422, "value_format=avro: no schema has id 999"), (200, "as is")),
        (3, (422, "value_format=avro: 3 bytes: shorter than the 5-byte header"), (200, "as is")),
        (4, (422, "value_format=avro: magic byte 1, not 0"), (200, "as is")),
    ],
)
def test_each_odd_payload_gives_its_documented_answer(
    world: dict[str, Any], offset: int, avro: tuple[int, str | None], auto: tuple[int, str | None]
) -> None:
    """A tombstone, an unknown id, a truncated header, a wrong magic byte: avro names the
    record; auto shows what is not a known framed payload as it is (string or base64)."""
    data = world["written"]["odd"][offset][1]
    with _served(world, "--schema-registry-url", world["url"], name=f"serve-odd-{offset}") as c:
        for fmt, (status, what) in (("avro", avro), ("auto", auto)):
            r = c.get("/v1/topics/odd/partitions/0/records",
                      params={"offset": offset, "value_format": fmt, "max_bytes": 1})  # fmt: skip
            assert r.status_code == status, r.text
            body = r.json()
            if status == 422:
                assert body["error_code"] == "invalid_format" and body["offset"] == offset
                assert what is not None and what in body["message"]
                continue
            record = body["records"][0]
            assert record["offset"] == offset
            if what is None:
                assert record["value"] is None and record["value_schema_id"] is None
            elif what == "decoded":
                assert record["value"]["status"] in ("NEW", "PAID", "SHIPPED")
                assert record["value_schema_id"] == int.from_bytes(data[1:5], "big")
            else:  # as it is: string when UTF-8, else base64
                assert data is not None
                try:
                    assert record["value"] == data.decode("utf-8")
                except UnicodeDecodeError:
                    assert base64.b64decode(record["value"]) == data


def test_an_avro_reader_schema_resolves_every_version(world: dict[str, Any]) -> None:
    """value_reader_schema_id: the first version's records read with the second (its ``note``
    takes the default), and the second's with the first (``note`` dropped)."""
    written = world["written"]["avro"]
    ids = sorted({int.from_bytes(v[1:5], "big") for _, v in written if v is not None})
    v1, v2 = ids[-2:]  # the key's schema was registered first
    with _served(world, "--schema-registry-url", world["url"], name="serve-reader") as client:
        for reader, has_note in ((v2, True), (v1, False)):
            rows = _walk(client, "avro", value_reader_schema_id=reader)
            plain = {r["offset"]: r for r in _walk(client, "avro")}
            for row in rows:
                if row["value"] is None:
                    continue
                assert ("note" in row["value"]) is has_note
                want = {k: v for k, v in plain[row["offset"]]["value"].items() if k != "note"}
                assert {k: v for k, v in row["value"].items() if k != "note"} == want
                if has_note and "note" not in plain[row["offset"]]["value"]:
                    assert row["value"]["note"] is None  # the default
        params = {"offset": 0, "value_format": "avro", "value_reader_schema_id": 999}
        r = client.get("/v1/topics/avro/partitions/0/records", params=params)
        assert r.status_code == 422 and "reader schema id 999" in r.json()["message"]


def test_the_console_shows_each_record_as_confluents_deserializers_read_it(
    world: dict[str, Any],
) -> None:
    """Issue 32: the history console's record pages in every schema format, in Debian's
    Chromium, against Confluent's own deserializers."""
    with _served(world, "--schema-registry-url", world["url"], name="serve-console") as client:
        base = str(client.base_url).rstrip("/")
        with chromium() as browser:
            tab = browser.new_page()
            watch = Watch(base)
            watch.attach(tab)
            for topic in TOPICS:
                key_fmt, value_fmt = FORMATS[topic]
                tab.goto(
                    f"{base}/ui/topics/{topic}/0?offset=0&count=500"
                    f"&key_format={key_fmt}&value_format={value_fmt}"
                )
                rows = tab.evaluate(RECORD_ROWS)
                expected = _expected(world, topic)
                assert [r["offset"] for r in rows] == [e["offset"] for e in expected], topic
                for row, want in zip(rows, expected, strict=True):
                    for what in ("key", "value"):
                        text = row[what]
                        if want[what] is None or isinstance(want[what], str):
                            assert text == want[what], (topic, row["offset"], what)
                        else:
                            assert orjson.loads(text) == want[what], (topic, row["offset"], what)
            watch.clean()
