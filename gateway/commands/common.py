"""Options and resources that several commands share: the store, the key ring, the RLMM."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.storage.base import ObjectStore


def add_store_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--store", required=required, help="file:///abs/dir or s3://bucket")
    p.add_argument("--key-prefix", default="", help="object key prefix (e.g. 'tiered/')")
    p.add_argument("--s3-endpoint-url", help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--s3-region")
    p.add_argument("--s3-path-style", action="store_true")


def add_key_pair_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--key-pair",
        action="append",
        default=[],
        metavar="ID=PEM",
        help="an RSA key pair: the private key PEM (PKCS#8); repeat for rotated keys",
    )


def add_state_dir_arg(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--state-dir", type=Path, help=help_text)


async def open_store_from(args: argparse.Namespace) -> ObjectStore:
    from gateway.storage.factory import open_store  # noqa: PLC0415

    return await open_store(
        args.store,
        endpoint_url=args.s3_endpoint_url,
        region=args.s3_region,
        path_style=args.s3_path_style,
    )
