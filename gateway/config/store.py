"""The bucket, its layout, the catalog kept beside it, and the S3 client's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from gateway.errors import ConfigurationError
from gateway.storage.url import parse_store_url


class StoreSettings(BaseModel):
    """What every command that opens the bucket reads."""

    # --- the bucket and the catalog ---------------------------------------------------------
    store: str = Field(description="the bucket: file:///abs/dir or s3://bucket")
    key_prefix: str = Field(default="", description="object key prefix (e.g. 'tiered/')")
    key_pairs: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="RSA key pairs ID=PATH (PKCS#8 private key PEM) opening encrypted segments",
    )
    state_dir: Path | None = Field(
        default=None,
        description="keep the catalog in DIR (SQLite) so restarts rescan incrementally",
    )
    rescan_interval_s: float = Field(
        default=60.0, ge=0, description="seconds between incremental bucket rescans (0: never)"
    )
    layout: Literal["aiven", "local-tiered-storage"] = Field(
        default="aiven",
        description="the bucket's layout: aiven (the plugin's objects) or local-tiered-storage "
        "(Kafka's own LocalTieredStorage folder, its raw segment files; read-only)",
    )
    # --- S3 -----------------------------------------------------------------------------------
    s3_endpoint_url: str | None = Field(default=None, description="S3 endpoint (MinIO, moto, ...)")
    s3_region: str | None = Field(default=None, description="S3 region")
    s3_path_style: bool = Field(default=False, description="path-style S3 addressing")
    s3_data_plane: Literal["aiohttp", "aioboto3", "httpx"] = Field(
        default="aiohttp",
        description="client of the ranged GETs: aiohttp with SigV4 (measured fastest), "
        "aioboto3's get_object, or httpx",
    )

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str | None) -> str | None:
        """The one check of every store kind (:func:`~gateway.storage.url.parse_store_url`);
        ``None`` only reaches here from :class:`~gateway.config.CommandSettings`."""
        if value is not None:
            try:
                parse_store_url(value)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("key_pairs")
    @classmethod
    def _key_pair_specs(cls, value: list[str]) -> list[str]:
        from gateway.remote.keyring import parse_spec  # noqa: PLC0415

        ids: set[str] = set()
        for spec in value:
            try:
                key_id, _ = parse_spec(spec)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
            if key_id in ids:
                raise ValueError(f"key pair id {key_id!r} is given twice")
            ids.add(key_id)
        return value
