"""What build is running: the version, and the git commit when it is cheaply known.

The commit comes from the installed distribution's ``direct_url.json`` (``pip install
git+…`` records it), else from a ``build-commit`` file in the environment's prefix (the
container image writes its ``REVISION`` there: ``/opt/tiered-gateway/build-commit``), else from
the ``.git`` folder of a source checkout the package runs from (``HEAD`` and the ref it names;
no ``git`` process), else it is ``unknown``.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Final

import gateway

DISTRIBUTION: Final = "tiered-gateway"
UNKNOWN: Final = "unknown"
_SHA: Final = re.compile(r"[0-9a-f]{40}")
COMMIT_FILE: Final = "build-commit"


def _from_metadata() -> str | None:
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        return None
    return commit if isinstance(commit, str) and _SHA.fullmatch(commit) else None


def _from_prefix(prefix: Path) -> str | None:
    try:
        commit = (prefix / COMMIT_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit if _SHA.fullmatch(commit) else None


def _from_checkout(package_dir: Path) -> str | None:
    git = package_dir.parent / ".git"
    try:
        head = (git / "HEAD").read_text(encoding="ascii").strip()
        if head.startswith("ref: "):
            ref = head.removeprefix("ref: ")
            ref_file = git / ref
            if ref_file.is_file():
                head = ref_file.read_text(encoding="ascii").strip()
            else:  # packed: "<sha> <ref>" lines
                packed = (git / "packed-refs").read_text(encoding="ascii").splitlines()
                head = next((ln.split()[0] for ln in packed if ln.endswith(" " + ref)), "")
    except (OSError, UnicodeDecodeError):
        return None
    return head if _SHA.fullmatch(head) else None


def build_commit() -> str:
    return (
        _from_metadata()
        or _from_prefix(Path(sys.prefix))
        or _from_checkout(Path(gateway.__file__).resolve().parent)
        or UNKNOWN
    )
