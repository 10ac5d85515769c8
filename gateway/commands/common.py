"""Options and resources that several commands share: the store, the key ring, the RLMM.

The shared options are settings of :class:`gateway.config.Settings` under ``serve``'s names, so
every command reads them the same way: flag > ``TIERED_GATEWAY_*`` environment variable > the
TOML file of ``--config`` (or ``TIERED_GATEWAY_CONFIG``) > default. Their flags default to
``None`` (given or not is then visible) and :func:`apply_settings`, called once by
:func:`gateway.cli.main` after parsing, fills them from
:func:`~gateway.config.load_command_settings`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gateway.config import CONFIG_ENV, env_name, load_command_settings
from gateway.errors import ConfigurationError

if TYPE_CHECKING:
    from gateway.storage.base import ObjectStore

SHARED_SETTINGS: Final = {
    "store": "store",
    "key_prefix": "key_prefix",
    "s3_endpoint_url": "s3_endpoint_url",
    "s3_region": "s3_region",
    "s3_path_style": "s3_path_style",
    "key_pair": "key_pairs",
    "state_dir": "state_dir",
}
"""The argparse destination of each shared flag and the setting it is (``serve``'s name)."""
_STORE_REQUIRED: Final = "store_required"  # set by add_store_args: whether the command needs one


def add_store_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--store`` and its S3 options, plus ``--config``: the settings file every command reads.
    ``required``: the command fails (exit 2) when no flag, variable or file gives a store."""
    p.add_argument(
        "--store",
        metavar="URL",
        help=f"file:///abs/dir or s3://bucket (env {env_name('store')})"
        + ("" if required else "; optional"),
    )
    p.add_argument(
        "--key-prefix",
        help=f"object key prefix (e.g. 'tiered/'; env {env_name('key_prefix')}; default '')",
    )
    p.add_argument(
        "--s3-endpoint-url",
        metavar="URL",
        help=f"S3 endpoint (MinIO, moto, ...; env {env_name('s3_endpoint_url')})",
    )
    p.add_argument("--s3-region", metavar="REGION", help=f"env {env_name('s3_region')}")
    p.add_argument(
        "--s3-path-style",
        action=argparse.BooleanOptionalAction,
        help=f"path-style S3 addressing (env {env_name('s3_path_style')}; default off)",
    )
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"the TOML settings file serve reads (env {CONFIG_ENV}); precedence: flag > "
        "environment > file > default",
    )
    p.set_defaults(**{_STORE_REQUIRED: required})


def add_key_pair_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--key-pair",
        action="append",
        metavar="ID=PEM",
        help="an RSA key pair: the private key PEM (PKCS#8); repeat for rotated keys "
        f"(env {env_name('key_pairs')})",
    )


def add_state_dir_arg(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument(
        "--state-dir", type=Path, metavar="DIR", help=f"{help_text} (env {env_name('state_dir')})"
    )


def apply_settings(args: argparse.Namespace) -> None:
    """Fill the shared options of ``args`` (those of :data:`SHARED_SETTINGS` its command has)
    from the flags given, the environment and the ``--config`` file, as ``serve`` reads its
    settings. A command without :func:`add_store_args` (``serve`` reads its own) is left alone.

    Raises :class:`~gateway.errors.ConfigurationError` for an invalid setting (naming it in all
    three spellings) and when the command needs a store and none is given."""
    if not hasattr(args, _STORE_REQUIRED):
        return
    present = {dest: name for dest, name in SHARED_SETTINGS.items() if hasattr(args, dest)}
    given = {name: getattr(args, dest) for dest, name in present.items()}
    settings = load_command_settings(
        {name: value for name, value in given.items() if value is not None}, args.config
    )
    for dest, name in present.items():
        setattr(args, dest, getattr(settings, name))
    if getattr(args, _STORE_REQUIRED) and args.store is None:
        raise ConfigurationError(
            "the following arguments are required: --store (or the environment variable "
            f"{env_name('store')}, or store in the --config file)"
        )


async def open_store_from(args: argparse.Namespace) -> ObjectStore:
    from gateway.storage.factory import open_store  # noqa: PLC0415

    return await open_store(
        args.store,
        endpoint_url=args.s3_endpoint_url,
        region=args.s3_region,
        path_style=args.s3_path_style,
    )
