"""``tiered-gateway schemas snapshot``: the schemas a topic's history needs, saved into a folder
that ``serve --schema-dir`` reads with no registry at all (a dead cluster's history is exactly
when its registry may be gone too).

The folder (:class:`~gateway.schemas.registry.SchemaDir` reads it)::

    ids/{id}.json                        {"schemaType", "schema", "references"} as the registry
                                         gives them (Protobuf: the serialized descriptor form)
    subjects/{quoted subject}/{v}.json   {"id": N}: a subject's version, as references name it
    snapshot.json                        what was asked, from where, and when

What is saved: every version of the chosen subjects, the chosen ids, every id the records of
the chosen topics reference (their keys' and values' Confluent framing), and, transitively,
every schema those import. Files are written whole (a temporary name, then a rename), so a
folder being written is never read half-written; a snapshot into an existing folder adds to it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.schemas.registry import RegistryClient, subject_file


def _write(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(json.dumps(document, indent=1, sort_keys=True).encode() + b"\n")
    os.replace(temporary, path)


@dataclass
class Snapshot:
    """What one snapshot saved."""

    ids: set[int] = field(default_factory=set)
    versions: int = 0
    missing: list[int] = field(default_factory=list)  # ids asked that the registry lacks


async def snapshot(
    client: RegistryClient,
    out: Path,
    *,
    subjects: Iterable[str] = (),
    ids: Iterable[int] = (),
    all_subjects: bool = False,
    topics: Iterable[str] = (),
) -> Snapshot:
    """Save the schemas asked (see the module docstring) from ``client`` into ``out``."""
    done = Snapshot()
    wanted = list(ids)
    chosen = list(subjects) + (await client.subjects() if all_subjects else [])
    for subject in dict.fromkeys(chosen):
        for version in await client.versions(subject):
            found = await client.version_id(subject, version)
            if found is not None:
                _write(subject_file(out, subject, version), {"id": found})
                done.versions += 1
                wanted.append(found)
    while wanted:
        schema_id = wanted.pop()
        if schema_id in done.ids:
            continue
        registered = await client.by_id(schema_id)
        if registered is None:
            done.missing.append(schema_id)
            continue
        _write(out / "ids" / f"{schema_id}.json", registered.as_json())
        done.ids.add(schema_id)
        for ref in registered.references:
            found = await client.version_id(ref.subject, ref.version)
            if found is None:
                done.missing.append(-1)
                continue
            _write(subject_file(out, ref.subject, ref.version), {"id": found})
            done.versions += 1
            wanted.append(found)
    (out / "ids").mkdir(parents=True, exist_ok=True)  # a folder SchemaDir takes, even empty
    _write(
        out / "snapshot.json",
        {
            "registry": client.url,
            "taken_ms": int(time.time() * 1000),
            "subjects": chosen,
            "topics": list(topics),
            "ids": sorted(done.ids),
            "missing_ids": sorted(i for i in done.missing if i >= 0),
        },
    )
    return done
