"""Decoders by schema id for the process's life (registry ids are immutable), at most
``max_entries`` of them (least recently used first out), loaded once however many requests miss
the same id at the same time.

A request first asks :meth:`Schemas.decoders` for every id its records reference (the I/O, on
the event loop), then decodes its records with that answer in a worker thread: an answer is
the request's own, so nothing it holds is evicted under it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Final

from cachetools import LRUCache

from gateway.config import Settings
from gateway.flights import Flights
from gateway.schemas.decoders import AvroDecoder, Decoder, JsonSchemaDecoder, SchemaUnusableError
from gateway.schemas.protobuf import ProtobufDecoder
from gateway.schemas.registry import (
    Reference,
    Registered,
    RegistryClient,
    RegistryOptions,
    SchemaDir,
    SchemaSource,
    SchemaType,
)

UNKNOWN_FOR_S: Final = 30.0  # an id the registry lacks is not asked again for this long
MAX_REFERENCES: Final = 256  # imports, transitively: a bound on a cyclic or hostile registry
Loaded = Decoder | SchemaUnusableError | None  # None: no schema has this id


def build(registered: Registered, references: dict[str, Registered]) -> Decoder:
    """The decoder of a schema (its imports by name, each after its own imports)."""
    if registered.schema_type is SchemaType.PROTOBUF:
        return ProtobufDecoder(registered, references)
    if registered.schema_type is SchemaType.JSON:
        return JsonSchemaDecoder(registered, references)
    return AvroDecoder(registered, references)


async def imports(source: SchemaSource, registered: Registered) -> dict[str, Registered]:
    """Every schema ``registered`` imports, transitively, each after what it imports."""
    found: dict[str, Registered] = {}
    seen: set[Reference] = set()

    async def visit(refs: tuple[Reference, ...]) -> None:
        for ref in refs:
            if ref in seen or ref.name in found:
                continue
            seen.add(ref)
            if len(seen) > MAX_REFERENCES:
                raise SchemaUnusableError(f"more than {MAX_REFERENCES} schema references")
            schema = await source.version(ref.subject, ref.version)
            if schema is None:
                raise SchemaUnusableError(
                    f"reference {ref.name}: {ref.subject} v{ref.version} not found"
                )
            await visit(schema.references)
            found[ref.name] = schema

    await visit(registered.references)
    return found


class Schemas:
    def __init__(self, source: SchemaSource, max_entries: int = 1000) -> None:
        self.source = source
        self._cache: LRUCache[int, Decoder | SchemaUnusableError] = LRUCache(maxsize=max_entries)
        self._flights: Flights[int, Loaded] = Flights()
        self._unknown: dict[int, float] = {}  # id -> when the registry last said it lacks it
        self._max = max_entries

    async def _load(self, schema_id: int) -> Loaded:
        registered = await self.source.by_id(schema_id)
        if registered is None:  # an id may be registered later: asked again after a while
            if len(self._unknown) >= self._max:
                self._unknown.clear()
            self._unknown[schema_id] = time.monotonic()
            return None
        try:
            references = await imports(self.source, registered)
            loaded: Decoder | SchemaUnusableError = await asyncio.to_thread(
                build, registered, references
            )
        except SchemaUnusableError as exc:
            loaded = SchemaUnusableError(f"schema id {schema_id}: {exc}")
        self._cache[schema_id] = loaded
        return loaded

    async def decoders(self, ids: Iterable[int]) -> dict[int, Loaded]:
        """Each id's decoder, or its :class:`SchemaUnusableError`, or None (no such id); raises
        :class:`~gateway.errors.SchemaRegistryUnavailableError` (retriable) when the registry
        cannot answer."""
        answer: dict[int, Loaded] = {}
        missing = []
        now = time.monotonic()
        for schema_id in set(ids):
            cached = self._cache.get(schema_id)
            if cached is not None:
                answer[schema_id] = cached
            elif now - self._unknown.get(schema_id, -UNKNOWN_FOR_S) < UNKNOWN_FOR_S:
                answer[schema_id] = None  # a payload of garbage under auto: no registry storm
            else:
                missing.append(schema_id)
        if missing:
            tasks = [self._flights.join(i, lambda i=i: self._load(i)) for i in missing]  # type: ignore[misc]
            results = await asyncio.gather(*(asyncio.shield(t) for t in tasks))
            answer.update(zip(missing, results, strict=True))
        return answer

    async def aclose(self) -> None:
        for task in self._flights.tasks():
            task.cancel()
        await self.source.aclose()


def registry_options(settings: Settings, url: str) -> RegistryOptions:
    """How ``settings`` reach the registry at ``url``."""
    return RegistryOptions(
        url,
        settings.schema_registry_username,
        settings.schema_registry_password,
        settings.schema_registry_token,
        settings.schema_registry_ca,
        settings.schema_registry_timeout_s,
    )


def schemas_for(settings: Settings) -> Schemas | None:
    """The schemas ``settings`` configure: a registry, a snapshot folder, or none."""
    source: SchemaSource
    if settings.schema_dir is not None:
        source = SchemaDir(settings.schema_dir)
    elif settings.schema_registry_url is not None:
        source = RegistryClient(registry_options(settings, settings.schema_registry_url))
    else:
        return None
    return Schemas(source, settings.schema_cache_entries)
