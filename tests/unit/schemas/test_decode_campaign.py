"""Corruption campaign over every payload kind Confluent's serializers write (Avro, Protobuf,
JSON Schema, and ``auto`` over all of them): every truncation, a byte flipped at every
position, a byte inserted. Each decode gives a JSON value orjson writes or a typed
``InvalidFormatError``; nothing else escapes, nothing loops. Then the two Avro schema shapes
fastavro's compiled reader cannot bound (zero-width array items, recursion)."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)

from gateway.api.decoded import _Side
from gateway.api.formats import RecordFormat
from gateway.errors import InvalidFormatError
from gateway.schemas.cache import Loaded, Schemas, build
from gateway.schemas.decoders import BodyDecodeError, SchemaUnusableError
from gateway.schemas.registry import Reference, Registered, SchemaType
from gateway.schemas.wire import schema_id
from tests.fixtures.confluent_payloads import Payloads


class _Mock:
    """Confluent's in-memory registry as a schema source."""

    def __init__(self, client: MockSchemaRegistryClient) -> None:
        self.client = client

    async def by_id(self, found: int) -> Registered | None:
        schema = self.client.get_schema(found)
        refs = tuple(Reference(r.name, r.subject, r.version) for r in schema.references or ())
        return Registered(SchemaType(schema.schema_type or "AVRO"), schema.schema_str, refs)

    async def version(self, subject: str, version: int) -> Registered | None:
        return None

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def payloads() -> tuple[dict[str, list[bytes]], dict[int, Loaded]]:
    client = MockSchemaRegistryClient({"url": "mock://campaign"})
    made = Payloads(client)
    kinds: dict[str, list[bytes]] = {}
    for kind in ("avro", "protobuf", "jsonschema"):
        pairs = made.records(f"c-{kind}", kind, 24, seed=5, v2_from=12)
        kinds[kind] = [v for _, v in pairs if v is not None]
    ids = {schema_id(v) for vs in kinds.values() for v in vs} - {None}

    async def load() -> dict[int, Loaded]:
        return await Schemas(_Mock(client)).decoders(i for i in ids if i is not None)

    return kinds, asyncio.run(load())


def _mutants(data: bytes) -> list[bytes]:
    out = [data[:n] for n in range(len(data))]
    out += [data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :] for i in range(len(data))]
    out += [data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :] for i in range(len(data))]
    out += [data[:i] + b"\x80" + data[i:] for i in range(0, len(data), 3)]
    return out


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "jsonschema", "auto"])
def test_every_mutant_decodes_or_is_a_typed_error(
    payloads: tuple[dict[str, list[bytes]], dict[int, Loaded]], fmt: str
) -> None:
    kinds, loaded = payloads
    side = _Side(RecordFormat(fmt), "value_format")
    sources = [v for vs in kinds.values() for v in vs] if fmt == "auto" else kinds[fmt]
    decoded = refused = 0
    for data in sources:
        value, _ = side.text(data, loaded)  # the unmutated payload decodes
        orjson.dumps(value)
        for mutant in _mutants(data):
            try:
                value, _ = side.text(mutant, loaded)
            except InvalidFormatError:
                refused += 1
                continue
            orjson.dumps(value)  # whatever decodes is writable JSON
            decoded += 1
    assert refused > 0 and decoded + refused > 1000


def _avro(schema: Any) -> Any:
    return build(Registered(SchemaType.AVRO, json.dumps(schema)), {})


def test_an_array_of_zero_width_items_is_refused_at_load() -> None:
    for items in (
        "null",
        {"type": "record", "name": "E", "fields": []},
        {"type": "fixed", "name": "Z", "size": 0},
    ):
        with pytest.raises(SchemaUnusableError, match="zero-width"):
            _avro(
                {
                    "type": "record",
                    "name": "R",
                    "fields": [
                        {"name": "a", "type": "int"},
                        {"name": "xs", "type": {"type": "array", "items": items}},
                    ],
                }
            )
    _avro({"type": "array", "items": {"type": "enum", "name": "One", "symbols": ["A"]}})  # 1 byte


def test_a_recursive_schema_is_read_within_the_recursion_limit() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
    }
    decoder = _avro(node)
    assert decoder.decode(memoryview(b"\x02\x02\x04\x00")) == {
        "v": 1,
        "next": {"v": 2, "next": None},
    }
    deep = io.BytesIO()
    for _ in range(200_000):
        deep.write(b"\x02\x02")  # v=1, the branch "Node": one level per two bytes
    with pytest.raises(BodyDecodeError) as caught:
        decoder.decode(memoryview(deep.getvalue() + b"\x02\x00"))
    assert "RecursionError" in str(caught.value)
