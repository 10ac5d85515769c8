"""The vocabulary of Kafka's ACLs: principals, the enums ``kafka-acls.sh`` prints (``AclOperation``,
``AclPermissionType``, ``PatternType``, ``ResourceType``) and one binding, :class:`AclEntry`.
Read by :mod:`gateway.security.acl_text` and evaluated by :mod:`gateway.security.acl`, which
re-exports every name here."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final, TypeAlias

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
