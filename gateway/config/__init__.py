"""One typed settings object for ``tiered-gateway serve``, validated at start.

The settings come in groups, one module each: :mod:`~gateway.config.store` (the bucket, the
catalog, S3), :mod:`~gateway.config.follow` (the metadata topic), :mod:`~gateway.config.serving`
(HTTP: address, workers, request budgets, the console), :mod:`~gateway.config.kafka` (the Kafka
listener), :mod:`~gateway.config.logs`, :mod:`~gateway.config.reads` (caches, GETs, retries,
threads), :mod:`~gateway.config.security` and :mod:`~gateway.config.schemas`. :class:`Settings`
holds them all; code that needs one group takes that group's type.

The other commands that open the bucket (``tier``, ``catalog``, ``scrub``, ``export``) read their
shared settings (``store``, ``key_prefix``, ``key_pairs``, ``state_dir``, ``s3_*``) from the same
sources with :func:`load_command_settings`, where ``store`` may be absent.

Every setting has three spellings: a command-line flag (``--index-cache-bytes``), an environment
variable (``TIERED_GATEWAY_INDEX_CACHE_BYTES``) and a key of the optional TOML file given with
``--config`` (``index_cache_bytes = "256MiB"``). Precedence: flag > environment > TOML file >
default. A bad value stops the start with a :class:`~gateway.errors.ConfigurationError` whose
message names the setting in all three spellings. ``docs/configuration.md`` documents each one.

Byte sizes take an integer or a number with a unit (``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB``;
``KB``, ``MB``, ``GB`` are decimal). A list setting (:data:`LIST_FIELDS`: ``key_pairs``,
``allowed_hosts``, ...) is a repeatable flag, and in the environment a JSON list or
comma-separated entries.
"""

from gateway.config.follow import FollowSettings
from gateway.config.kafka import KafkaListenerSettings, parse_listener
from gateway.config.load import (
    load_command_settings,
    load_settings,
    read_toml,
    settings_for,
)
from gateway.config.logs import LoggingSettings
from gateway.config.names import CONFIG_ENV, ENV_PREFIX, LIST_FIELDS, describe, env_name, flag_name
from gateway.config.reads import ReadSettings
from gateway.config.schemas import SchemaSettings
from gateway.config.security import SecuritySettings
from gateway.config.serving import ServingSettings, is_loopback
from gateway.config.settings import GROUPS, CommandSettings, Settings
from gateway.config.store import StoreSettings
from gateway.config.units import ByteSize, GiB, KiB, LogLevel, MiB, parse_byte_size, usable_cpus

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "GROUPS",
    "LIST_FIELDS",
    "ByteSize",
    "CommandSettings",
    "FollowSettings",
    "GiB",
    "KafkaListenerSettings",
    "KiB",
    "LogLevel",
    "LoggingSettings",
    "MiB",
    "ReadSettings",
    "SchemaSettings",
    "SecuritySettings",
    "ServingSettings",
    "Settings",
    "StoreSettings",
    "describe",
    "env_name",
    "flag_name",
    "is_loopback",
    "load_command_settings",
    "load_settings",
    "parse_byte_size",
    "parse_listener",
    "read_toml",
    "settings_for",
    "usable_cpus",
]
