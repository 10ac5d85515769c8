"""The schema registry of the avro, protobuf, jsonschema and auto formats."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class SchemaSettings(BaseModel):
    """A Confluent-compatible registry, or a snapshot folder, and the decoded-schema cache."""

    # --- schema registry (avro, protobuf, jsonschema and auto formats) -------------------
    schema_registry_url: str | None = Field(
        default=None, description="a Confluent-compatible schema registry (http[s]://host:port)"
    )
    schema_registry_username: str | None = Field(
        default=None, description="its basic-auth user (the password: schema_registry_password)"
    )
    schema_registry_password: str | None = Field(
        default=None, description="its basic-auth password (give it by environment variable)"
    )
    schema_registry_token: str | None = Field(
        default=None, description="a bearer token for it (give it by environment variable)"
    )
    schema_registry_ca: Path | None = Field(
        default=None, description="CA bundle of its TLS certificate (default: the system's)"
    )
    schema_registry_timeout_s: float = Field(
        default=5.0, gt=0, description="seconds one registry request may take"
    )
    schema_dir: Path | None = Field(
        default=None,
        description="serve schemas from this snapshot folder (tiered-gateway schemas snapshot) "
        "instead of a registry",
    )
    schema_cache_entries: int = Field(
        default=1000, ge=1, description="schemas kept decoded, by id (least recently used out)"
    )
