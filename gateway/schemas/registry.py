"""Where schemas come from: a Confluent-compatible Schema Registry over HTTP, or a snapshot
folder (``tiered-gateway schemas snapshot``) when the registry is gone.

Both answer two questions, as the registry's REST API does:

* ``GET /schemas/ids/{id}``: the schema of a global id (ids are immutable);
* ``GET /subjects/{subject}/versions/{version}``: a subject's version (how references name the
  schemas they import).

Protobuf schemas are asked again with ``?format=serialized``: the base64 of a
``FileDescriptorProto``, which needs no ``.proto`` parser (Confluent's registry and Karapace
serve it; Confluent's own deserializers ask for it the same way).

An unknown id or version is ``None``; a registry that cannot be reached or answers 5xx is
:class:`SchemaRegistryUnavailableError` (503, retriable); any other answer that is not what the
API promises is :class:`SchemaRegistryError` (502).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import quote

from gateway.errors import SchemaRegistryError, SchemaRegistryUnavailableError

if TYPE_CHECKING:  # loaded when a registry is used, not by every reader of this module
    import httpx

NOT_FOUND_CODES: Final = frozenset({40401, 40402, 40403})  # subject, version, schema not found


class SchemaType(StrEnum):
    AVRO = "AVRO"
    PROTOBUF = "PROTOBUF"
    JSON = "JSON"


@dataclass(frozen=True, slots=True)
class Reference:
    """An imported schema: its name in the importing schema, and where it is registered."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class Registered:
    """A schema as the registry holds it (``schema``: for Protobuf, the serialized form)."""

    schema_type: SchemaType
    schema: str
    references: tuple[Reference, ...] = ()

    @classmethod
    def of(cls, answer: Any, where: str) -> Registered:
        """From a registry answer (or a snapshot file) ``where`` names."""
        try:
            refs = tuple(
                Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                for r in answer.get("references") or ()
            )
            schema = answer["schema"]
            if not isinstance(schema, str):
                raise TypeError("schema is not a string")
            return cls(SchemaType(answer.get("schemaType") or "AVRO"), schema, refs)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise SchemaRegistryError(f"{where}: not a schema ({exc})") from None

    def as_json(self) -> dict[str, Any]:
        """The registry's own shape (what a snapshot file holds)."""
        return {
            "schemaType": self.schema_type.value,
            "schema": self.schema,
            "references": [
                {"name": r.name, "subject": r.subject, "version": r.version}
                for r in self.references
            ],
        }


class SchemaSource(Protocol):
    async def by_id(self, schema_id: int) -> Registered | None: ...

    async def version(self, subject: str, version: int) -> Registered | None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RegistryOptions:
    url: str
    username: str | None = None
    password: str | None = None
    bearer_token: str | None = None
    ca_file: Path | None = None
    timeout_s: float = 5.0


class RegistryClient:
    """A Confluent-compatible registry over one pooled HTTP client."""

    def __init__(self, options: RegistryOptions, transport: httpx.AsyncBaseTransport | None = None):
        import httpx  # noqa: PLC0415

        self._http_error = httpx.HTTPError
        headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if options.bearer_token:
            headers["Authorization"] = f"Bearer {options.bearer_token}"
        auth = None
        if options.username is not None:
            auth = httpx.BasicAuth(options.username, options.password or "")
        verify: ssl.SSLContext | bool = True
        if options.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(options.ca_file))
        self.url = options.url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            auth=auth,
            verify=verify,
            timeout=options.timeout_s,
            follow_redirects=False,
            transport=transport,
        )

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any | None:
        """The JSON answer of ``GET path``; None for the registry's not-found codes."""
        where = f"schema registry {self.url}{path}"
        try:
            response = await self._client.get(path, params=params)
        except self._http_error as exc:
            raise SchemaRegistryUnavailableError(f"{where}: {type(exc).__name__}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        code = body.get("error_code") if isinstance(body, dict) else None
        if response.status_code == 404 and (code in NOT_FOUND_CODES or code is None):
            return None
        if response.status_code >= 500 or response.status_code == 429:
            raise SchemaRegistryUnavailableError(f"{where}: HTTP {response.status_code}")
        if response.status_code != 200 or body is None:
            raise SchemaRegistryError(f"{where}: HTTP {response.status_code}, code {code}")
        return body

    async def _schema(self, path: str, where: str) -> Registered | None:
        answer = await self.get(path)
        if answer is None:
            return None
        found = Registered.of(answer, where)
        if found.schema_type is SchemaType.PROTOBUF:
            serialized = await self.get(path, {"format": "serialized"})
            if serialized is None:
                return None
            found = Registered.of({**serialized, "schemaType": "PROTOBUF"}, where)
        return found

    async def by_id(self, schema_id: int) -> Registered | None:
        return await self._schema(f"/schemas/ids/{schema_id}", f"schema id {schema_id}")

    async def version(self, subject: str, version: int) -> Registered | None:
        path = f"/subjects/{quote(subject, safe='')}/versions/{version}"
        return await self._schema(path, f"subject {subject} version {version}")

    async def subjects(self) -> list[str]:
        return [str(s) for s in await self.get("/subjects") or ()]

    async def versions(self, subject: str) -> list[int]:
        found = await self.get(f"/subjects/{quote(subject, safe='')}/versions")
        return [int(v) for v in found or ()]

    async def version_id(self, subject: str, version: int) -> int | None:
        found = await self.get(f"/subjects/{quote(subject, safe='')}/versions/{version}")
        return None if found is None else int(found["id"])

    async def aclose(self) -> None:
        await self._client.aclose()


class SchemaDir:
    """A snapshot folder: ``ids/{id}.json`` (a schema in the registry's shape) and
    ``subjects/{quoted subject}/{version}.json`` (``{"id": N}``)."""

    def __init__(self, root: Path) -> None:
        if not (root / "ids").is_dir():
            raise SchemaRegistryError(f"schema dir {root}: no ids/ folder (not a snapshot)")
        self.root = root

    @staticmethod
    def _read(path: Path) -> Any | None:
        try:
            return json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SchemaRegistryError(f"{path}: {exc}") from None

    async def by_id(self, schema_id: int) -> Registered | None:
        path = self.root / "ids" / f"{schema_id}.json"
        answer = await asyncio.to_thread(self._read, path)
        return None if answer is None else Registered.of(answer, str(path))

    async def version(self, subject: str, version: int) -> Registered | None:
        path = subject_file(self.root, subject, version)
        answer = await asyncio.to_thread(self._read, path)
        if answer is None:
            return None
        try:
            found = int(answer["id"])
        except (KeyError, TypeError, ValueError):
            raise SchemaRegistryError(f"{path}: no id") from None
        return await self.by_id(found)

    async def aclose(self) -> None:
        return None


def subject_file(root: Path, subject: str, version: int) -> Path:
    return root / "subjects" / quote(subject, safe="") / f"{version}.json"
