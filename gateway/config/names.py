"""The three spellings of a setting: flag, environment variable, TOML key."""

from __future__ import annotations

from typing import Final

ENV_PREFIX: Final = "TIERED_GATEWAY_"
CONFIG_ENV: Final = ENV_PREFIX + "CONFIG"  # the TOML file, when --config is not given
_FLAG_NAMES: Final = {  # repeatable: one value per flag
    "key_pairs": "--key-pair",
    "allowed_hosts": "--allowed-host",
    "forwarded_allow_ips": "--forwarded-allow-ip",
    "cors_origins": "--cors-origin",
    "super_users": "--super-user",
    "jwt_algorithms": "--jwt-algorithm",
    "metadata_topics": "--metadata-topic-filter",
}
LIST_FIELDS: Final = tuple(_FLAG_NAMES)
"""The list settings: a repeatable flag each; in the environment a JSON list or comma-separated."""


def flag_name(field: str) -> str:
    """The command-line flag of a setting."""
    return _FLAG_NAMES.get(field, "--" + field.replace("_", "-"))


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def describe(field: str) -> str:
    """A setting in its three spellings, for messages."""
    return f"{field!r} ({flag_name(field)}, {env_name(field)}, {field} in the TOML file)"
