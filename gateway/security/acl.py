"""Kafka-style ACLs for topics: :class:`AclSet` evaluates them the way Kafka's authorizer does,
:class:`AclFile` keeps them in step with their file. They are read from the text
``kafka-acls.sh --list`` prints (:mod:`gateway.security.acl_text`), so operators copy their
cluster's ACLs as they are; the names of :mod:`gateway.security.acl_types` (principals,
operations, :class:`AclEntry`) are importable from here too.

Evaluation mirrors ``org.apache.kafka.metadata.authorizer.StandardAuthorizerData`` (and the
older ``AclAuthorizer``): a topic matches LITERAL equal names, the LITERAL ``*`` wildcard and
PREFIXED names it starts with; the principal matches itself or ``User:*``; the host matches
itself or ``*``; ``All`` matches any operation; a matching DENY wins; no matching ALLOW denies
(``allow.everyone.if.no.acl.found=false``). An ALLOW of Read, Write, Delete or Alter implies
Describe and an ALLOW of AlterConfigs implies DescribeConfigs (``IMPLIES_DESCRIBE``,
``IMPLIES_DESCRIBE_CONFIGS``); a DENY implies nothing, so DENY Read leaves Describe alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeAlias

from gateway.security.acl_text import parse_acls
from gateway.security.acl_types import (
    ANONYMOUS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from gateway.security.watched import WatchedFile

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
        return cls(parse_acls(text, source), super_users=super_users)

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


__all__ = [
    "ANONYMOUS",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AclEntry",
    "AclFile",
    "AclSet",
    "Operation",
    "PatternType",
    "Permission",
    "Principal",
    "ResourceType",
]
