"""The text ``kafka-acls.sh --list`` prints, read into :class:`~gateway.security.acl_types.AclEntry`
values, so operators copy their cluster's ACLs as they are.

Two printed forms are accepted (``AclCommand``'s ``printResourceAcls``/``listAcls``):

* current, ``ResourcePattern.toString`` then ``AccessControlEntryData.toString`` lines, each
  after a tab (and, from the Scala tool, a space before the first)::

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

* older (kafka.security.auth ``Resource.toString`` ``Topic:LITERAL:orders``, before 2.0
  ``Topic:orders``, and ``Acl.toString``)::

    Current ACLs for resource `Topic:LITERAL:orders`:
        User:alice has Allow permission for operations: Read from hosts: *

plus blank lines, ``#`` comments and the ``ACLs for principal `User:alice``` line of
``--list --principal``. Enum names match case-insensitively and without underscores
(``CLUSTER_ACTION``, ``ClusterAction``). A line that cannot be parsed is an error, never skipped.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Final, TypeVar

from gateway.errors import ConfigurationError
from gateway.security.acl_types import AclEntry, Operation, PatternType, Permission, ResourceType

_HEADER: Final = re.compile(r"Current ACLs for resource `(?P<resource>.*)`:")
_PATTERN: Final = re.compile(
    r"ResourcePattern\(resourceType=(?P<type>[^,]*), name=(?P<name>.*), "
    r"patternType=(?P<pattern>[^,]*)\)"
)
_ENTRY: Final = re.compile(
    r"\(principal=(?P<principal>.*), host=(?P<host>[^,]*), "
    r"operation=(?P<op>[^,]*), permissionType=(?P<perm>[^,]*)\)"
)
_OLD_ENTRY: Final = re.compile(
    r"(?P<principal>.+) has (?P<perm>\S+) permission for operations: (?P<op>\S+) "
    r"from hosts: (?P<host>\S+)"
)
_PRINCIPAL_LINE: Final = re.compile(r"ACLs for principal `[^`]*`")

_S = TypeVar("_S", bound=StrEnum)


def _key(name: str) -> str:
    return name.replace("_", "").casefold()


def _lookup(enum: type[_S]) -> dict[str, _S]:
    return {_key(member.value): member for member in enum}


_OPERATIONS: Final = _lookup(Operation)
_PERMISSIONS: Final = _lookup(Permission)
_PATTERNS: Final = _lookup(PatternType)
_RESOURCES: Final = _lookup(ResourceType)
_FILTER_ONLY: Final = frozenset({"any", "match", "unknown"})


class _LineError(ValueError):
    """What is wrong with one line; :func:`parse_acls` adds the source and line number."""


def _enum(table: dict[str, _S], what: str, text: str) -> _S:
    member = table.get(_key(text))
    if member is None:
        if _key(text) in _FILTER_ONLY:
            raise _LineError(f"{what} {text!r} is a filter value, not valid in an ACL")
        choices = ", ".join(m.value for m in table.values())
        raise _LineError(f"unknown {what} {text!r} (one of {choices})")
    return member


def _resource(text: str) -> tuple[ResourceType, str, PatternType]:
    """A header's resource: ``ResourcePattern(...)``, ``Topic:LITERAL:x`` or ``Topic:x``."""
    if (m := _PATTERN.fullmatch(text)) is not None:
        kind, name = _enum(_RESOURCES, "resource type", m["type"]), m["name"]
        pattern = _enum(_PATTERNS, "pattern type", m["pattern"])
    else:
        kind_text, sep, rest = text.partition(":")
        if not sep:
            raise _LineError(f"resource {text!r} is neither ResourcePattern(...) nor Type:name")
        kind, pattern, name = (
            _enum(_RESOURCES, "resource type", kind_text),
            PatternType.LITERAL,
            rest,
        )
        head, sep, tail = rest.partition(":")
        if sep and _key(head) in _PATTERNS.keys() | _FILTER_ONLY:  # Resource.fromString
            pattern, name = _enum(_PATTERNS, "pattern type", head), tail
    if not name:
        raise _LineError("resource name should not be empty")
    return kind, name, pattern


def _entry(m: re.Match[str], resource: tuple[ResourceType, str, PatternType]) -> AclEntry:
    principal, host = m["principal"], m["host"]
    kind, _, name = principal.partition(":")
    if not kind or not name:
        raise _LineError(f"principal {principal!r} is not in the form principalType:name")
    if not host or host != host.strip():
        raise _LineError(f"host {host!r} is empty or has spaces")
    return AclEntry(
        principal=principal,
        host=host,
        operation=_enum(_OPERATIONS, "operation", m["op"]),
        permission=_enum(_PERMISSIONS, "permission type", m["perm"]),
        resource_type=resource[0],
        name=resource[1],
        pattern=resource[2],
    )


def parse_acls(text: str, source: str) -> list[AclEntry]:
    """The ACL entries in ``text``; ``source`` names it in errors.

    Raises :class:`ConfigurationError` naming ``source``, the line and what is wrong."""
    entries: list[AclEntry] = []
    resource: tuple[ResourceType, str, PatternType] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        try:
            if not line or line.startswith("#") or _PRINCIPAL_LINE.fullmatch(line):
                continue
            if (m := _HEADER.fullmatch(line)) is not None:
                resource = _resource(m["resource"])
                continue
            m = _ENTRY.fullmatch(line) or _OLD_ENTRY.fullmatch(line)
            if m is None:
                raise _LineError(
                    "expected a 'Current ACLs for resource `...`:' header, an ACL entry, "
                    "a '#' comment or a blank line"
                )
            if resource is None:
                raise _LineError("an ACL entry before any 'Current ACLs for resource' header")
            entries.append(_entry(m, resource))
        except _LineError as exc:
            shown = line if len(line) <= 120 else line[:117] + "..."
            raise ConfigurationError(f"{source}, line {number}: {exc}: {shown!r}") from None
    return entries
