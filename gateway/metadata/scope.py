"""Why a bucket scan found nothing: the diagnosis of an empty key-prefix scope.

A wrong ``--key-prefix`` or a missing folder is the most common first mistake, and it looks
like an empty bucket. When a complete pass finds no ``.rsm-manifest`` in its scope, the scanner
looks one level around it (:func:`look_around`: one listing of the prefix's folder, at most
:data:`LOOK_AROUND_LIMIT` objects) and :func:`diagnose_empty_scope` (pure) says what is wrong:

* the prefix lacks its trailing ``/`` and the manifests are under ``prefix + "/"``;
* a ``file://`` store's folder for the prefix does not exist;
* manifests exist under other key prefixes (did you mean the nearest ones?);
* else what the folder holds at its top level, or that it is empty.
"""

from __future__ import annotations

import contextlib
import difflib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.errors import GatewayError, InvalidKeyError
from gateway.metadata.manifests import MANIFEST_SUFFIX
from gateway.remote.keys import parse_object_key
from gateway.storage.base import ObjectStore
from gateway.storage.filesystem import FilesystemStore

LOOK_AROUND_LIMIT = 10_000
"""Objects listed at most to diagnose an empty scope."""

_SHOWN = 5


@dataclass(frozen=True, slots=True)
class Surroundings:
    """What lies around an empty scope: the folder of the prefix (the prefix up to its last
    ``/`` before the end), the key prefixes its manifests have (with counts), its top-level
    entries (``name/`` for a folder), and for a filesystem store the prefix's folder when it
    does not exist. ``truncated``: the listing stopped at :data:`LOOK_AROUND_LIMIT`."""

    folder: str = ""
    manifest_prefixes: Mapping[str, int] = field(default_factory=dict)
    entries: tuple[str, ...] = ()
    missing_folder: str | None = None
    truncated: bool = False
    error: str | None = None  # the listing failed: what is known is partial


def parent_folder(prefix: str) -> str:
    """The folder a prefix names or lies in, as a key prefix: ``a/b/`` and ``a/b`` are in
    ``a/``, ``tiered/`` and ``tiered`` in the bucket's top (``""``)."""
    return prefix[: prefix.rstrip("/").rfind("/") + 1]


def _scope(prefix: str) -> str:
    return f"the key prefix {prefix!r}" if prefix else "the bucket"


def _nearest(prefix: str, candidates: list[str]) -> list[str]:
    close = difflib.get_close_matches(prefix, candidates, n=3, cutoff=0.8)
    return close or candidates[:3]


def _manifests(count: int) -> str:
    return f"{count} manifest" + ("s" if count != 1 else "")


def misprefixed_note(prefix: str, count: int) -> str:
    """``count`` manifests lie under ``prefix + "/"`` while the prefix lacks its ``/``."""
    fixed = prefix + "/"
    return (
        f"{_manifests(count)} {'are' if count != 1 else 'is'} under {fixed!r}, outside the key "
        f"prefix {prefix!r} (it lacks its trailing '/'); did you mean the key prefix {fixed!r}?"
    )


def diagnose_empty_scope(prefix: str, *, misprefixed: int, around: Surroundings | None) -> str:
    """One message for a pass that found no manifest under ``prefix``, with a did-you-mean
    when one can be given (pure: ``around`` comes from :func:`look_around`)."""
    base = f"no remote segment found under {_scope(prefix)}"
    if misprefixed:
        return f"{base}: {misprefixed_note(prefix, misprefixed)}"
    if around is None:
        return base
    notes: list[str] = []
    if around.missing_folder is not None:
        notes.append(f"the folder {around.missing_folder} does not exist")
    prefixes = sorted(around.manifest_prefixes, key=lambda p: (-around.manifest_prefixes[p], p))
    where = repr(around.folder) if around.folder else "the bucket"
    if prefixes:
        shown = " or ".join(
            f"{p!r} ({_manifests(around.manifest_prefixes[p])})" for p in _nearest(prefix, prefixes)
        )
        notes.append(f"did you mean the key prefix {shown}?")
    elif around.entries:
        names = _nearest(prefix[len(around.folder) :], sorted(around.entries))
        more = len(around.entries) - len(names)
        notes.append(
            f"no .rsm-manifest in {where}, which holds {', '.join(repr(n) for n in names)}"
            + (f" and {more} more" if more else "")
        )
    elif around.error is None and around.missing_folder is None:
        notes.append(f"{where} is empty")
    if around.truncated:
        notes.append(f"(looked at the first {LOOK_AROUND_LIMIT} objects of {where} only)")
    if around.error is not None:
        notes.append(f"(listing {where} failed: {around.error})")
    return f"{base}: " + "; ".join(notes) if notes else base


async def look_around(store: ObjectStore, prefix: str) -> Surroundings:
    """One listing of ``prefix``'s folder (:func:`parent_folder`), bounded; never raises for
    a store fault (it is noted in :attr:`Surroundings.error`)."""
    folder = parent_folder(prefix)
    missing = None
    if isinstance(store, FilesystemStore):
        path = store.root.joinpath(*prefix.split("/")[:-1])  # "a/b/" -> a/b, "a/b" -> a
        if not path.is_dir():
            missing = str(path)
    counts: Counter[str] = Counter()
    entries: set[str] = set()
    seen, truncated, error = 0, False, None
    try:
        async for info in store.list(folder):
            seen += 1
            if seen > LOOK_AROUND_LIMIT:
                truncated = True
                break
            head, slash, _ = info.key[len(folder) :].partition("/")
            entries.add(head + slash)
            if info.key.endswith(MANIFEST_SUFFIX):
                with contextlib.suppress(InvalidKeyError):
                    counts[parse_object_key(info.key).prefix] += 1
    except (GatewayError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return Surroundings(folder, dict(counts), tuple(sorted(entries)), missing, truncated, error)
