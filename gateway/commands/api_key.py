"""``tiered-gateway api-key PRINCIPAL``: a new API key for a script, and the line to add.

Prints the key (give it to the script, which sends it as ``X-API-Key``) and the line for
``api_keys_file`` (``<principal> sha256:<hex>``): the file holds only the hash, so the key is
shown this once. With ``--append FILE`` the line is added to the file (created mode 0600).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any, Final

from gateway.errors import ConfigurationError

_PRINCIPAL: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*:[^\s:][^\s]*")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "api-key",
        help="make an API key for a principal",
        description="Print a new API key and the line that admits it to the api_keys_file "
        "(only the key's SHA-256 is stored: the key itself is shown this once).",
    )
    p.add_argument("principal", help="who the key authenticates, e.g. User:ci-backfill")
    p.add_argument("--append", type=Path, metavar="FILE", help="add the line to this key file")


def run(args: argparse.Namespace) -> int:
    from gateway.security.apikeys import new_key  # noqa: PLC0415

    if _PRINCIPAL.fullmatch(args.principal) is None:
        raise ConfigurationError(
            f"principal {args.principal!r} is not of the form Type:name (e.g. User:ci)"
        )
    key, digest = new_key()
    line = f"{args.principal} {digest}\n"
    if args.append is not None:
        fd = os.open(args.append, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as out:
            out.write(line)
        print(f"added {args.principal} to {args.append}")
    else:
        print(f"line for the api_keys_file: {line}", end="")
    print(f"key (send as X-API-Key; shown once): {key}")
    return 0
