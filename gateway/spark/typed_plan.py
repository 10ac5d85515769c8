"""The driver's half of a typed export: the subject's versions from the registry (or a snapshot
folder), merged into one typed column per side (:mod:`gateway.spark.typed`), before any task
runs; the tasks then need no registry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import unquote

from gateway.config import load_command_settings
from gateway.errors import ConfigurationError
from gateway.schemas.cache import imports, schemas_for
from gateway.schemas.registry import RegistryClient, SchemaDir, SchemaSource
from gateway.spark.typed import TypedSide, resolve
from gateway.spark.typed_arrow import Schema
from gateway.spark.typed_request import TypedRequest


def typed_sides(request: TypedRequest, topic: str) -> tuple[TypedSide, ...]:
    """The typed sides ``--key-format`` / ``--value-format`` ask for (none: a binary export)."""
    if not request.sides:
        return ()
    given = {n: v for n, v in (("schema_registry_url", request.schema_registry_url),
             ("schema_dir", request.schema_dir)) if v is not None}  # fmt: skip
    settings = load_command_settings(given, request.config)
    schemas = schemas_for(settings)
    if schemas is None:
        raise ConfigurationError(
            "--key-format / --value-format need a schema registry: --schema-registry-url or "
            "--schema-dir (or their TIERED_GATEWAY_ variables)"
        )

    async def plan() -> tuple[TypedSide, ...]:
        try:
            sides = []
            for asked in request.sides:
                subject = asked.subject or f"{topic}-{asked.side}"
                versions = await subject_versions(schemas.source, subject)
                if not versions:
                    raise ConfigurationError(f"subject {subject} has no version in the registry")
                sides.append(resolve(asked.side, asked.format, subject, asked.message, versions))
            return tuple(sides)
        finally:
            await schemas.aclose()

    return asyncio.run(plan())


async def subject_versions(source: SchemaSource, subject: str) -> dict[int, Schema]:
    """id -> (schema, its imports) of every version of ``subject``, oldest first."""
    ids: list[int] = []
    if isinstance(source, RegistryClient):
        for version in await source.versions(subject):
            found = await source.version_id(subject, version)
            if found is not None:
                ids.append(found)
    elif isinstance(source, SchemaDir):
        ids = await asyncio.to_thread(_dir_ids, source.root, subject)
    out: dict[int, Schema] = {}
    for schema_id in ids:
        registered = await source.by_id(schema_id)
        if registered is not None:
            out[schema_id] = (registered, await imports(source, registered))
    return out


def _dir_ids(root: Path, subject: str) -> list[int]:
    folder = next((p for p in (root / "subjects").glob("*") if unquote(p.name) == subject), None)
    if folder is None:
        return []
    versions = sorted((int(p.stem), p) for p in folder.glob("*.json") if p.stem.isdigit())
    return [int(json.loads(p.read_bytes())["id"]) for _, p in versions]
