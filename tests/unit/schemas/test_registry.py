"""The registry client's answers: found, not found, unavailable (retriable), refused."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import httpx
import pytest
import respx
from google.protobuf import descriptor_pb2

from gateway.errors import SchemaRegistryError, SchemaRegistryUnavailableError
from gateway.schemas.cache import Schemas, build
from gateway.schemas.decoders import SchemaUnusableError
from gateway.schemas.registry import (
    Reference,
    Registered,
    RegistryClient,
    RegistryOptions,
    SchemaDir,
    SchemaType,
)

URL = "http://registry.test"
AVRO = {"schema": json.dumps({"type": "string"})}


def _client() -> RegistryClient:
    return RegistryClient(RegistryOptions(URL, username="u", password="p"))


@respx.mock
def test_found_not_found_and_auth() -> None:
    route = respx.get(f"{URL}/schemas/ids/1").mock(return_value=httpx.Response(200, json=AVRO))
    respx.get(f"{URL}/schemas/ids/2").mock(
        return_value=httpx.Response(404, json={"error_code": 40403, "message": "Schema not found"})
    )

    async def main() -> None:
        client = _client()
        found = await client.by_id(1)
        assert found is not None and found.schema_type is SchemaType.AVRO
        assert await client.by_id(2) is None
        await client.aclose()

    asyncio.run(main())
    sent = route.calls.last.request.headers["authorization"]
    assert base64.b64decode(sent.split()[1]) == b"u:p"


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(503), SchemaRegistryUnavailableError),
        (httpx.Response(500, json={"error_code": 50001}), SchemaRegistryUnavailableError),
        (httpx.Response(429), SchemaRegistryUnavailableError),
        (httpx.ConnectError("refused"), SchemaRegistryUnavailableError),
        (httpx.ReadTimeout("slow"), SchemaRegistryUnavailableError),
        (httpx.Response(401, json={"error_code": 40101}), SchemaRegistryError),
        (httpx.Response(200, text="<html>"), SchemaRegistryError),
        (httpx.Response(200, json={"schema": 7}), SchemaRegistryError),
        (httpx.Response(200, json={"schema": "x", "schemaType": "XML"}), SchemaRegistryError),
        (httpx.Response(404, text="no such route"), type(None)),
    ],
)
@respx.mock
def test_faults_are_typed(response: httpx.Response | Exception, error: type) -> None:
    respx.get(f"{URL}/schemas/ids/3").mock(
        side_effect=response if isinstance(response, Exception) else None,
        return_value=None if isinstance(response, Exception) else response,
    )

    async def main() -> object:
        client = _client()
        try:
            return await client.by_id(3)
        finally:
            await client.aclose()

    if error is type(None):
        assert asyncio.run(main()) is None
        return
    with pytest.raises(error) as caught:
        asyncio.run(main())
    assert caught.value.retriable is (error is SchemaRegistryUnavailableError)


@respx.mock
def test_protobuf_is_asked_in_its_serialized_form_and_references_resolved() -> None:
    dep = descriptor_pb2.FileDescriptorProto(name="x", package="p", syntax="proto3")
    dep.message_type.add(name="Dep").field.add(name="n", number=1, type=9, label=1)
    main = descriptor_pb2.FileDescriptorProto(name="y", package="p", syntax="proto3")
    main.dependency.append("dep.proto")
    msg = main.message_type.add(name="Main")
    msg.field.add(name="d", number=1, type=11, label=1, type_name=".p.Dep")

    def b64(proto: descriptor_pb2.FileDescriptorProto) -> str:
        return base64.b64encode(proto.SerializeToString()).decode()

    refs = [{"name": "dep.proto", "subject": "dep", "version": 1}]
    text = {"schema": "syntax = ...", "schemaType": "PROTOBUF", "references": refs}
    respx.get(f"{URL}/schemas/ids/5", params={"format": "serialized"}).mock(
        return_value=httpx.Response(200, json={**text, "schema": b64(main)})
    )
    respx.get(f"{URL}/schemas/ids/5").mock(return_value=httpx.Response(200, json=text))
    version = {"subject": "dep", "version": 1, "id": 4, "schemaType": "PROTOBUF"}
    respx.get(f"{URL}/subjects/dep/versions/1", params={"format": "serialized"}).mock(
        return_value=httpx.Response(200, json={**version, "schema": b64(dep)})
    )
    respx.get(f"{URL}/subjects/dep/versions/1").mock(
        return_value=httpx.Response(200, json={**version, "schema": "text"})
    )

    async def run() -> object:
        schemas = Schemas(_client())
        found = await schemas.decoders([5])
        await schemas.aclose()
        return found[5]

    decoder = asyncio.run(run())
    assert not isinstance(decoder, SchemaUnusableError | None)
    body = b"\x00" + bytes([0x0A, 0x03, 0x0A, 0x01, 0x41])  # [0] shortcut; d { n: "A" }
    assert decoder.decode(memoryview(body)) == {"d": {"n": "A"}}


def test_a_schema_dir_answers_as_the_registry(tmp_path: Path) -> None:
    (tmp_path / "ids").mkdir()
    (tmp_path / "ids" / "1.json").write_text(json.dumps(AVRO))
    sub = tmp_path / "subjects" / "a%2Fb"
    sub.mkdir(parents=True)
    (sub / "1.json").write_text(json.dumps({"id": 1}))

    async def main() -> None:
        source = SchemaDir(tmp_path)
        assert (await source.by_id(1)) == (await source.version("a/b", 1))
        assert await source.by_id(2) is None
        (tmp_path / "ids" / "3.json").write_text("{not json")
        with pytest.raises(SchemaRegistryError):
            await source.by_id(3)

    asyncio.run(main())
    with pytest.raises(SchemaRegistryError, match="not a snapshot"):
        SchemaDir(tmp_path / "subjects")


@respx.mock
def test_an_unknown_id_is_not_asked_again_at_once() -> None:
    route = respx.get(f"{URL}/schemas/ids/9").mock(
        return_value=httpx.Response(404, json={"error_code": 40403})
    )

    async def main() -> None:
        schemas = Schemas(_client())
        for _ in range(5):
            assert await schemas.decoders([9]) == {9: None}
        await schemas.aclose()

    asyncio.run(main())
    assert route.call_count == 1


def test_proto_text_is_compiled_when_the_registry_has_no_serialized_form() -> None:
    """A registry that keeps ``.proto`` text only (``format=serialized`` ignored): the text is
    compiled, its import (text too) resolved by name, a well-known import built in."""
    dep = 'syntax = "proto3";\npackage d;\nmessage Dep { string n = 1; }\n'
    main = (
        'syntax = "proto3";\npackage m;\nimport "dep.proto";\n'
        'import "google/protobuf/timestamp.proto";\n'
        "message A { int32 x = 1; }\n"
        "message B { d.Dep dep = 1; google.protobuf.Timestamp at = 2; message C { bool c = 1; } }\n"
    )
    registered = Registered(SchemaType.PROTOBUF, main, (Reference("dep.proto", "dep", 1),))
    decoder = build(registered, {"dep.proto": Registered(SchemaType.PROTOBUF, dep)})
    # indexes [1]: B { dep { n: "z" }, at { seconds: 1 } }
    body = bytes([0x02, 0x02, 0x0A, 0x03, 0x0A, 0x01, 0x7A, 0x12, 0x02, 0x08, 0x01])
    assert decoder.decode(memoryview(body)) == {"dep": {"n": "z"}, "at": "1970-01-01T00:00:01Z"}
    assert decoder.decode(memoryview(bytes([0x04, 0x02, 0x00, 0x08, 0x01]))) == {"c": True}
    with pytest.raises(SchemaUnusableError, match="protoc refused"):
        build(Registered(SchemaType.PROTOBUF, "syntax = nonsense"), {})
