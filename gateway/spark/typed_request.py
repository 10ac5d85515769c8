"""The typed key and value columns a read or an export asks for (``keyFormat`` /
``--key-format`` and the rest), as values: pure, so the command builds them without the
``spark`` extra; :mod:`gateway.spark.typed_plan` resolves them on the driver."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SideRequest:
    """One side's typed column asked for: ``keyFormat`` (avro, protobuf, jsonschema), the
    subject whose versions type it (default ``<topic>-key``), protobuf's message name."""

    side: str  # "key" or "value"
    format: str
    subject: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class TypedRequest:
    """The typed columns a read asks for, and where their schemas come from (none asked: a
    binary read). ``config``: the ``--config`` settings file, for the registry's settings."""

    sides: tuple[SideRequest, ...] = ()
    schema_registry_url: str | None = None
    schema_dir: Path | None = None
    config: Path | None = None
