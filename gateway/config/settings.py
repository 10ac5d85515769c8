"""The settings of ``serve``: every group of :mod:`gateway.config` in one validated object."""

from __future__ import annotations

import json
from typing import Final

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.config.follow import FollowSettings
from gateway.config.kafka import KafkaListenerSettings
from gateway.config.logs import LoggingSettings
from gateway.config.names import ENV_PREFIX, LIST_FIELDS
from gateway.config.reads import ReadSettings
from gateway.config.schemas import SchemaSettings
from gateway.config.security import SecuritySettings
from gateway.config.serving import ServingSettings
from gateway.config.store import StoreSettings

GROUPS: Final = (
    StoreSettings,
    FollowSettings,
    ServingSettings,
    KafkaListenerSettings,
    LoggingSettings,
    ReadSettings,
    SecuritySettings,
    SchemaSettings,
)
"""The groups of settings, in the order ``serve --help`` and the docs list them."""


class Settings(  # the groups in reverse: pydantic lists the fields of the last base first
    SchemaSettings,
    SecuritySettings,
    ReadSettings,
    LoggingSettings,
    KafkaListenerSettings,
    ServingSettings,
    FollowSettings,
    StoreSettings,
    BaseSettings,
):
    """Everything ``serve`` can be told; see ``docs/configuration.md``. A function that needs
    only part of it takes its group (:class:`StoreSettings`, :class:`ReadSettings`, ...)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings  # no .env file, no secrets directory

    @field_validator(*LIST_FIELDS, mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):  # from the environment
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        """The checks across groups (each group checks its own)."""
        if self.request_timeout_ms > self.max_request_timeout_ms:
            raise ValueError(
                f"request_timeout_ms ({self.request_timeout_ms}) exceeds "
                f"max_request_timeout_ms ({self.max_request_timeout_ms})"
            )
        if self.default_max_bytes > self.max_response_bytes:
            raise ValueError(
                f"default_max_bytes ({self.default_max_bytes}) exceeds "
                f"max_response_bytes ({self.max_response_bytes})"
            )
        if self.schema_registry_url is not None and self.schema_dir is not None:
            raise ValueError("give schema_registry_url or schema_dir, not both")
        if self.layout == "local-tiered-storage" and self.key_prefix:
            raise ValueError("layout local-tiered-storage has no key_prefix (its own folders)")
        if self.metadata_source != "bucket" and not self.metadata_bootstrap:
            raise ValueError(
                f"metadata_source {self.metadata_source} needs metadata_bootstrap (the "
                "cluster to follow)"
            )
        return self

    @property
    def console_on(self) -> bool:
        """Whether ``/ui`` is served: as ``console`` says, else on loopback or with
        authentication (a console open to the network needs it, as the API does)."""
        if self.console is not None:
            return self.console
        return self.loopback or bool(self.authentication)


class CommandSettings(Settings):
    """The settings as the commands other than ``serve`` read them: the same fields, sources and
    checks, but ``store`` may be absent (``catalog ls`` reads a catalog without one; a command
    that needs a store says so itself, naming the three spellings)."""

    store: str | None = Field(  # type: ignore[assignment]
        default=None, description="the bucket: file:///abs/dir or s3://bucket"
    )
