"""Loading the settings: flags given > environment > TOML file > defaults, one loader for every
command, and messages that name a bad setting in its three spellings."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource

from gateway.config.names import CONFIG_ENV, describe
from gateway.config.settings import CommandSettings, Settings
from gateway.errors import ConfigurationError

_MAX_SHOWN_INPUT: Final = 80


def _message(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        loc = error.get("loc", ())
        field = str(loc[0]) if loc else ""
        message = error["msg"].removeprefix("Value error, ")
        if field in Settings.model_fields:
            shown = error.get("input")
            shown_ok = isinstance(shown, str | int | float) and len(repr(shown)) <= _MAX_SHOWN_INPUT
            if field != "key_pairs" and shown_ok:
                message += f" (got {shown!r})"
            problems.append(f"setting {describe(field)}: {message}")
        elif field:  # a key that is no setting (TOML file or keyword)
            problems.append(f"unknown setting {field!r}")
        else:
            problems.append(message)  # a check across settings, which names them
    return "invalid configuration: " + "; ".join(problems)


def read_toml(path: Path) -> dict[str, Any]:
    """The settings of a TOML file (flat keys, or under a ``[tiered_gateway]`` table)."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigurationError(
            f"config file {path}: cannot read it: {exc.strerror or type(exc).__name__}"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path}: not valid TOML: {exc}") from exc
    table = data.get("tiered_gateway", data)
    if not isinstance(table, dict):
        raise ConfigurationError(f"config file {path}: [tiered_gateway] must be a table")
    return table


_S = TypeVar("_S", bound=Settings)


def _load(model: type[_S], overrides: Mapping[str, Any] | None, config_file: Path | None) -> _S:
    """``model`` from the flags given (``overrides``), the environment, the TOML file and the
    defaults, in that precedence: the one loader of every command."""
    if config_file is None and os.environ.get(CONFIG_ENV):
        config_file = Path(os.environ[CONFIG_ENV])
    file_values = read_toml(config_file) if config_file is not None else {}

    class _WithFile(model):  # type: ignore[valid-type,misc]
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, InitSettingsSource(settings_cls, file_values)

    try:
        loaded = _WithFile(**dict(overrides or {}))
    except ValidationError as exc:
        where = f" (config file {config_file})" if config_file is not None else ""
        raise ConfigurationError(_message(exc) + where) from None
    return model.model_construct(_fields_set=loaded.model_fields_set, **loaded.model_dump())


def load_settings(
    overrides: Mapping[str, Any] | None = None, config_file: Path | None = None
) -> Settings:
    """Settings from ``overrides`` (the command-line flags that were given), the environment,
    the TOML ``config_file`` (or the file named by ``TIERED_GATEWAY_CONFIG``), the defaults."""
    return _load(Settings, overrides, config_file)


def load_command_settings(
    overrides: Mapping[str, Any] | None = None, config_file: Path | None = None
) -> CommandSettings:
    """:func:`load_settings` for the commands other than ``serve``: the same sources,
    precedence and checks (a file ``serve`` rejects is rejected here too), ``store`` optional."""
    return _load(CommandSettings, overrides, config_file)


def settings_for(**values: Any) -> Settings:
    """Settings from keyword values, the environment and the defaults (no TOML file); the
    error names the setting like :func:`load_settings` does."""
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigurationError(_message(exc)) from None
