"""Kafka-style ACLs for topics, read from the text ``kafka-acls.sh --list`` prints and evaluated
the way Kafka's authorizer does, so operators copy their cluster's ACLs as they are.

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

Evaluation mirrors ``org.apache.kafka.metadata.authorizer.StandardAuthorizerData`` (and the
older ``AclAuthorizer``): a topic matches LITERAL equal names, the LITERAL ``*`` wildcard and
PREFIXED names it starts with; the principal matches itself or ``User:*``; the host matches
itself or ``*``; ``All`` matches any operation; a matching DENY wins; no matching ALLOW denies
(``allow.everyone.if.no.acl.found=false``). An ALLOW of Read, Write, Delete or Alter implies
Describe and an ALLOW of AlterConfigs implies DescribeConfigs (``IMPLIES_DESCRIBE``,
``IMPLIES_DESCRIBE_CONFIGS``); a DENY implies nothing, so DENY Read leaves Describe alone.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final, TypeAlias, TypeVar

from gateway.errors import ConfigurationError
from gateway.security.watched import WatchedFile

Principal: TypeAlias = str
"""``type:name`` as Kafka's ``KafkaPrincipal.toString`` prints it, e.g. ``User:alice``."""

ANONYMOUS: Final[Principal] = "User:ANONYMOUS"
WILDCARD_PRINCIPAL: Final[Principal] = "User:*"
WILDCARD_HOST: Final = "*"
WILDCARD_RESOURCE: Final = "*"


class Operation(StrEnum):
    """Kafka's ACL operations (``AclOperation`` without its filter-only ANY and UNKNOWN)."""

    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"
    CREATE_TOKENS = "CreateTokens"
    DESCRIBE_TOKENS = "DescribeTokens"


class Permission(StrEnum):
    """``AclPermissionType`` ALLOW or DENY."""

    ALLOW = "Allow"
    DENY = "Deny"


class PatternType(StrEnum):
    """The specific ``PatternType`` values an ACL can have (MATCH and ANY are filters only)."""

    LITERAL = "Literal"
    PREFIXED = "Prefixed"


class ResourceType(StrEnum):
    """Kafka's ``ResourceType``; only TOPIC entries grant anything here, the rest are kept."""

    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"
    DELEGATION_TOKEN = "DelegationToken"
    USER = "User"


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL binding: ``permission`` of ``operation`` for ``principal`` from ``host`` on the
    resources of ``resource_type`` that ``name`` matches under ``pattern``."""

    principal: Principal
    host: str
    operation: Operation
    permission: Permission
    resource_type: ResourceType
    name: str
    pattern: PatternType


# --- evaluation ----------------------------------------------------------------------------

_IMPLIES_DESCRIBE: Final = frozenset(
    {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)


def _implied(allowed: set[Operation]) -> frozenset[Operation]:
    """``allowed`` plus what an ALLOW of its operations implies (StandardAuthorizerData)."""
    out = set(allowed)
    if allowed & _IMPLIES_DESCRIBE:
        out.add(Operation.DESCRIBE)
    if Operation.ALTER_CONFIGS in allowed:
        out.add(Operation.DESCRIBE_CONFIGS)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class _Grants:
    """What one (principal, host) pair of one resource pattern allows and denies."""

    allow: frozenset[Operation]
    deny: frozenset[Operation]


_Rules: TypeAlias = dict[tuple[str, str], _Grants]


def _index(entries: Iterable[AclEntry]) -> dict[tuple[PatternType, str], _Rules]:
    """TOPIC entries grouped by (pattern, name), then by (principal, host)."""
    ops: dict[tuple[PatternType, str], dict[tuple[str, str], tuple[set[Operation], ...]]] = {}
    for e in entries:
        if e.resource_type is not ResourceType.TOPIC:
            continue
        by_who = ops.setdefault((e.pattern, e.name), {})
        allow, deny = by_who.setdefault((e.principal, e.host), (set(), set()))
        (allow if e.permission is Permission.ALLOW else deny).add(e.operation)
    return {
        resource: {who: _Grants(_implied(a), frozenset(d)) for who, (a, d) in by_who.items()}
        for resource, by_who in ops.items()
    }


class AclSet:
    """An immutable set of ACLs indexed for :meth:`authorize`: a dict lookup for the topic's
    literal name and the ``*`` wildcard, and one per distinct PREFIXED length, then four
    (principal, host) lookups per matching pattern; never a scan of every entry."""

    __slots__ = ("_entries", "_literal", "_prefix_lengths", "_prefixed", "_super_users")

    def __init__(
        self, entries: Iterable[AclEntry] = (), *, super_users: frozenset[Principal] = frozenset()
    ) -> None:
        self._entries = tuple(dict.fromkeys(entries))  # a set, as Kafka keeps them, in order
        self._super_users = super_users
        index = _index(self._entries)
        self._literal = {n: r for (p, n), r in index.items() if p is PatternType.LITERAL}
        self._prefixed = {n: r for (p, n), r in index.items() if p is PatternType.PREFIXED}
        self._prefix_lengths = tuple(sorted({len(n) for n in self._prefixed}))

    @classmethod
    def parse(
        cls, text: str, source: str, *, super_users: frozenset[Principal] = frozenset()
    ) -> AclSet:
        """The ACLs in ``kafka-acls.sh --list`` output ``text``; ``source`` names it in errors.

        Raises :class:`ConfigurationError` naming ``source``, the line and what is wrong."""
        return cls(_parse(text, source), super_users=super_users)

    @property
    def entries(self) -> tuple[AclEntry, ...]:
        """Every entry, duplicates dropped, in file order (other resource types included)."""
        return self._entries

    @property
    def super_users(self) -> frozenset[Principal]:
        """Principals allowed everything (compared exactly, as Kafka's ``super.users``)."""
        return self._super_users

    def __len__(self) -> int:
        return len(self._entries)

    def _matching(self, topic: str) -> Iterator[_Rules]:
        literal = self._literal
        if (rules := literal.get(topic)) is not None:
            yield rules
        if topic != WILDCARD_RESOURCE and (rules := literal.get(WILDCARD_RESOURCE)) is not None:
            yield rules
        for length in self._prefix_lengths:
            if length > len(topic):
                break
            if (rules := self._prefixed.get(topic[:length])) is not None:
                yield rules

    def authorize(self, principal: Principal, host: str, operation: Operation, topic: str) -> bool:
        """Whether ``principal`` connecting from ``host`` may do ``operation`` on ``topic``."""
        if principal in self._super_users:
            return True
        who = (
            (principal, host),
            (principal, WILDCARD_HOST),
            (WILDCARD_PRINCIPAL, host),
            (WILDCARD_PRINCIPAL, WILDCARD_HOST),
        )
        allowed = False
        for rules in self._matching(topic):
            for key in who:
                grants = rules.get(key)
                if grants is None:
                    continue
                if operation in grants.deny or Operation.ALL in grants.deny:
                    return False
                if operation in grants.allow or Operation.ALL in grants.allow:
                    allowed = True
        return allowed

    def authorize_resource(
        self,
        principal: Principal,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """:meth:`authorize` for a resource of any type (``Cluster:kafka-cluster`` for the
        metrics); a scan of the entries, for the few checks that are not a topic's."""
        if resource_type is ResourceType.TOPIC:
            return self.authorize(principal, host, operation, name)
        if principal in self._super_users:
            return True
        allow: set[Operation] = set()
        for e in self._entries:
            if e.resource_type is not resource_type:
                continue
            if e.principal not in (principal, WILDCARD_PRINCIPAL) or e.host not in (
                host,
                WILDCARD_HOST,
            ):
                continue
            literal = e.name in (name, WILDCARD_RESOURCE)
            if not (literal if e.pattern is PatternType.LITERAL else name.startswith(e.name)):
                continue
            if e.permission is Permission.DENY:
                if e.operation in (operation, Operation.ALL):
                    return False
            else:
                allow.add(e.operation)
        implied = _implied(allow)
        return operation in implied or Operation.ALL in implied

    def describable_topics(
        self, principal: Principal, host: str, topics: Iterable[str]
    ) -> list[str]:
        """The ``topics`` ``principal`` may describe from ``host``, in their given order."""
        return [t for t in topics if self.authorize(principal, host, Operation.DESCRIBE, t)]


# --- the kafka-acls.sh --list text ---------------------------------------------------------

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
    """What is wrong with one line; :func:`_parse` adds the source and line number."""


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


def _parse(text: str, source: str) -> list[AclEntry]:
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


# --- the file, reloaded on change ------------------------------------------------------------


class AclFile(WatchedFile[AclSet]):
    """An ACL file that is re-read when it changes, without a restart (a
    :class:`~gateway.security.watched.WatchedFile`: a bad edit or a removed file keeps the
    previous rules in force, logged, in :attr:`last_error` and :attr:`failed_reloads`).
    ``super_users`` apply to every version of the file."""

    def __init__(
        self,
        path: Path,
        *,
        super_users: frozenset[Principal] = frozenset(),
        clock: Callable[[], float] = time.monotonic,
        check_every_s: float = 1.0,
    ) -> None:
        def parse(text: str, source: str) -> AclSet:
            return AclSet.parse(text, source, super_users=super_users)

        super().__init__(
            path, parse, what="ACL file", noun="ACLs", clock=clock, check_every_s=check_every_s
        )
