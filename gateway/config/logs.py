"""How the gateway logs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from gateway.config.units import LogLevel


class LoggingSettings(BaseModel):
    """The log level and line format."""

    log_level: LogLevel = Field(
        default="info", description="debug, info, warning, error or critical"
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text lines, or json: one object per line (ts, level, logger, message, "
        "request_id)",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value
