"""Kafka-style topic ACLs: the ``kafka-acls.sh --list`` text in its current and older forms,
every parse error, Kafka's matching rules (StandardAuthorizerData), the reloading file, and a
property against a plainly written brute-force evaluator."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ConfigurationError
from gateway.security.acl import (
    ANONYMOUS,
    AclEntry,
    AclFile,
    AclSet,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

NL = "\n"
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
R, W, D, ALL = Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL


def java_list(resource: str, acls: list[str]) -> str:
    """tools' AclCommand.printResourceAcls: println(header + NL + tab-joined acls + NL)."""
    return (
        f"Current ACLs for resource `{resource}`:" + NL + NL.join("\t" + a for a in acls) + NL + NL
    )


def scala_list(resource: str, acls: list[str]) -> str:
    """core's AclCommand.scala: println(s"Current ACLs for resource `$resource`: $Newline
    ${acls.map("\\t" + _).mkString(Newline)} $Newline")."""
    return (
        f"Current ACLs for resource `{resource}`: {NL} {NL.join(chr(9) + a for a in acls)} {NL}"
        + NL
    )


def entry(
    principal: str = "User:alice",
    host: str = "*",
    op: Operation = R,
    perm: Permission = ALLOW,
    name: str = "orders",
    pattern: PatternType = LITERAL,
    kind: ResourceType = TOPIC,
) -> AclEntry:
    return AclEntry(principal, host, op, perm, kind, name, pattern)


def pattern(kind: str, name: str, pattern_type: str) -> str:
    """ResourcePattern.toString."""
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern_type})"


def header(resource: str) -> str:
    return f"Current ACLs for resource `{resource}`:"


def current_acl(principal: str, host: str, op: str, perm: str) -> str:
    """AccessControlEntryData.toString."""
    return f"(principal={principal}, host={host}, operation={op}, permissionType={perm})"


def old_acl(principal: str, perm: str, op: str, host: str) -> str:
    """kafka.security.auth.Acl.toString."""
    return f"{principal} has {perm} permission for operations: {op} from hosts: {host}"


# --- the text ------------------------------------------------------------------------------


def test_current_form_as_the_java_tool_prints_it() -> None:
    text = java_list(
        "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)",
        [
            "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
            "(principal=User:bob, host=10.0.0.7, operation=CLUSTER_ACTION, permissionType=DENY)",
        ],
    ) + java_list(
        "ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx-, patternType=PREFIXED)",
        ["(principal=User:carol, host=*, operation=IDEMPOTENT_WRITE, permissionType=ALLOW)"],
    )
    assert AclSet.parse(text, "acls.txt").entries == (
        entry(),
        entry("User:bob", "10.0.0.7", Operation.CLUSTER_ACTION, DENY),
        entry(
            "User:carol",
            op=Operation.IDEMPOTENT_WRITE,
            name="tx-",
            pattern=PREFIXED,
            kind=ResourceType.TRANSACTIONAL_ID,
        ),
    )


def test_current_form_as_the_scala_tool_prints_it_with_its_stray_spaces() -> None:
    text = "ACLs for principal `User:alice`\n" + scala_list(
        "ResourcePattern(resourceType=TOPIC, name=hellossl, patternType=LITERAL)",
        [
            "(principal=User:alice, host=127.0.0.1, operation=WRITE, permissionType=ALLOW)",
            "(principal=User:alice, host=127.0.0.1, operation=READ, permissionType=ALLOW)",
        ],
    )
    assert text.splitlines()[1:4] == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=hellossl, "
        "patternType=LITERAL)`: ",
        " \t(principal=User:alice, host=127.0.0.1, operation=WRITE, permissionType=ALLOW)",
        "\t(principal=User:alice, host=127.0.0.1, operation=READ, permissionType=ALLOW) ",
    ]
    acls = AclSet.parse(text, "acls.txt")
    assert [(e.operation, e.host, e.name) for e in acls.entries] == [
        (W, "127.0.0.1", "hellossl"),
        (R, "127.0.0.1", "hellossl"),
    ]


def test_older_forms_with_pattern_and_without() -> None:
    text = (
        scala_list(
            "Topic:LITERAL:orders",
            ["User:alice has Allow permission for operations: Read from hosts: *"],
        )
        + scala_list(
            "Topic:PREFIXED:ord",
            ["User:* has Deny permission for operations: Describe from hosts: 10.1.1.1"],
        )
        + scala_list(
            "Topic:payments", ["User:bob has Allow permission for operations: All from hosts: *"]
        )
        + scala_list(
            "Group:LITERAL:a:b",
            ["User:bob has ALLOW permission for operations: READ from hosts: *"],
        )
        + scala_list(
            "Group:c:d", ["User:bob has Allow permission for operations: Read from hosts: *"]
        )
        + scala_list(
            "Cluster:kafka-cluster",
            ["User:bob has Allow permission for operations: ClusterAction from hosts: *"],
        )
    )
    assert AclSet.parse(text, "old.txt").entries == (
        entry(),
        entry("User:*", "10.1.1.1", D, DENY, "ord", PREFIXED),
        entry("User:bob", op=ALL, name="payments"),
        entry("User:bob", name="a:b", kind=GROUP),
        entry("User:bob", name="c:d", kind=GROUP),
        entry(
            "User:bob", op=Operation.CLUSTER_ACTION, name="kafka-cluster", kind=ResourceType.CLUSTER
        ),
    )


def test_comments_blank_lines_case_and_duplicates() -> None:
    text = """
        # copied from prod on Monday
Current ACLs for resource `ResourcePattern(resourceType=topic, name=orders, patternType=literal)`:
            (principal=User:alice, host=*, operation=read, permissionType=allow)

        # the same line again is the same ACL (Kafka keeps a set)
            (principal=User:alice, host=*, operation=Read, permissionType=Allow)
        Current ACLs for resource `DelegationToken:LITERAL:tok`:
            User:alice has allow permission for operations: DESCRIBE_TOKENS from hosts: *
        """
    acls = AclSet.parse(text, "acls.txt")
    assert acls.entries == (
        entry(),
        entry(op=Operation.DESCRIBE_TOKENS, name="tok", kind=ResourceType.DELEGATION_TOKEN),
    )
    assert len(acls) == 2 and len(AclSet.parse("", "empty")) == 0


def test_principals_with_commas_and_spaces_parse_whole() -> None:
    dn = "User:CN=alice, OU=eng, O=Example has Corp"
    text = java_list(
        "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)",
        [f"(principal={dn}, host=*, operation=READ, permissionType=ALLOW)"],
    ) + scala_list(
        "Topic:orders", [f"{dn} has Deny permission for operations: Write from hosts: *"]
    )
    assert [e.principal for e in AclSet.parse(text, "x").entries] == [dn, dn]


HEADER = (
    "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:"
)
GOOD = "\t(principal=User:a, host=*, operation=READ, permissionType=ALLOW)"


@pytest.mark.parametrize(
    ("lines", "wrong"),
    [
        (["what is this"], "expected a 'Current ACLs for resource"),
        ([GOOD], "an ACL entry before any"),
        (
            [header(pattern("TOPIK", "t", "LITERAL"))],
            "unknown resource type 'TOPIK'",
        ),
        (
            [header(pattern("ANY", "t", "LITERAL"))],
            "resource type 'ANY' is a filter value",
        ),
        (
            [header(pattern("TOPIC", "t", "MATCH"))],
            "pattern type 'MATCH' is a filter value",
        ),
        (
            [header(pattern("TOPIC", "t", "SUFFIXED"))],
            "unknown pattern type 'SUFFIXED'",
        ),
        (
            [header(pattern("TOPIC", "", "LITERAL"))],
            "resource name should not be empty",
        ),
        (["Current ACLs for resource `Topic:ANY:t`:"], "pattern type 'ANY' is a filter value"),
        (["Current ACLs for resource `Topic:`:"], "resource name should not be empty"),
        (["Current ACLs for resource `orders`:"], "neither ResourcePattern(...) nor Type:name"),
        (["Current ACLs for resource `Topics:orders`:"], "unknown resource type 'Topics'"),
        (
            [header(pattern("TOPIC", "t", "LITERAL"))[:-2]],
            "expected a 'Current ACLs",
        ),
        (
            [HEADER, "\t(principal=User:a, host=*, operation=ANY, permissionType=ALLOW)"],
            "operation 'ANY' is a filter value",
        ),
        (
            [HEADER, "\t(principal=User:a, host=*, operation=UNKNOWN, permissionType=ALLOW)"],
            "operation 'UNKNOWN' is a filter value",
        ),
        (
            [HEADER, "\t(principal=User:a, host=*, operation=REED, permissionType=ALLOW)"],
            "unknown operation 'REED'",
        ),
        (
            [HEADER, "\t(principal=User:a, host=*, operation=READ, permissionType=MAYBE)"],
            "unknown permission type 'MAYBE'",
        ),
        (
            [HEADER, "\t(principal=alice, host=*, operation=READ, permissionType=ALLOW)"],
            "principal 'alice' is not in the form",
        ),
        (
            [HEADER, "\t(principal=User:, host=*, operation=READ, permissionType=ALLOW)"],
            "principal 'User:' is not in the form",
        ),
        (
            [HEADER, "\t(principal=:alice, host=*, operation=READ, permissionType=ALLOW)"],
            "principal ':alice' is not in the form",
        ),
        (
            [HEADER, "\t(principal=User:a, host=, operation=READ, permissionType=ALLOW)"],
            "host '' is empty",
        ),
        ([HEADER, "\t(principal=User:a, host=*, operation=READ)"], "expected a 'Current ACLs"),
        (
            [HEADER, "\tUser:a has Allow permission for operations: Reed from hosts: *"],
            "unknown operation 'Reed'",
        ),
        (
            [HEADER, "\tUser:a has Allow permission for operations: Read from hosts:"],
            "expected a 'Current ACLs",
        ),
        (
            [HEADER, "\tUser:a has Allow permission for operation: Read from hosts: *"],
            "expected a 'Current ACLs",
        ),
    ],
)
def test_every_bad_line_is_an_error_naming_source_line_and_problem(
    lines: list[str], wrong: str
) -> None:
    text = "# header\n\n" + "\n".join(lines) + "\n" + GOOD + "\n"
    with pytest.raises(ConfigurationError) as info:
        AclSet.parse(text, "/etc/gw/acls.txt")
    message = str(info.value)
    assert message.startswith(f"/etc/gw/acls.txt, line {2 + len(lines)}: "), message
    assert wrong in message
    assert lines[-1].strip()[:40] in message  # the offending text is shown


# --- matching ------------------------------------------------------------------------------


def acl_set(*entries: AclEntry, super_users: frozenset[str] = frozenset()) -> AclSet:
    return AclSet(entries, super_users=super_users)


def test_no_matching_allow_denies() -> None:
    assert not acl_set().authorize("User:alice", "h", R, "orders")
    acls = acl_set(entry(name="orders"))
    assert not acls.authorize("User:bob", "h", R, "orders")
    assert not acls.authorize("User:alice", "h", W, "orders")
    assert not acls.authorize("User:alice", "h", R, "payments")
    assert not acls.authorize(ANONYMOUS, "h", R, "orders")


def test_topic_matches_literal_wildcard_and_prefix() -> None:
    literal = acl_set(entry(name="orders"))
    assert literal.authorize("User:alice", "h", R, "orders")
    assert not literal.authorize("User:alice", "h", R, "orders2")  # literal is not a prefix
    assert not literal.authorize("User:alice", "h", R, "order")
    wildcard = acl_set(entry(name="*"))
    assert all(wildcard.authorize("User:alice", "h", R, t) for t in ("orders", "x", "*"))
    prefix = acl_set(entry(name="ord", pattern=PREFIXED))
    assert prefix.authorize("User:alice", "h", R, "ord")
    assert prefix.authorize("User:alice", "h", R, "orders")
    assert not prefix.authorize("User:alice", "h", R, "or")
    assert not prefix.authorize("User:alice", "h", R, "xord")
    star_prefix = acl_set(entry(name="*", pattern=PREFIXED))  # a prefix "*", not a wildcard
    assert not star_prefix.authorize("User:alice", "h", R, "orders")


def test_other_resource_types_never_grant_on_a_topic() -> None:
    acls = acl_set(
        *(
            entry(op=ALL, name=n, kind=k)
            for k in ResourceType
            if k is not TOPIC
            for n in ("orders", "*")
        )
    )
    assert len(acls.entries) == 10
    assert not acls.authorize("User:alice", "h", R, "orders")
    assert not acls.authorize("User:alice", "h", D, "orders")


def test_principal_matches_itself_or_user_wildcard() -> None:
    acls = acl_set(entry("User:*", name="public"), entry("User:alice", name="private"))
    assert acls.authorize("User:bob", "h", R, "public")
    assert acls.authorize(ANONYMOUS, "h", R, "public")
    assert acls.authorize("Group:eng", "h", R, "public")  # Kafka: User:* matches any type
    assert acls.authorize("User:alice", "h", R, "private")
    assert not acls.authorize("User:Alice", "h", R, "private")  # exact, case-sensitive
    assert not acls.authorize("Group:alice", "h", R, "private")
    assert not acl_set(entry("Group:*")).authorize("Group:eng", "h", R, "orders")


def test_host_matches_itself_or_star() -> None:
    acls = acl_set(entry(host="10.0.0.1", name="a"), entry(host="*", name="b"))
    assert acls.authorize("User:alice", "10.0.0.1", R, "a")
    assert not acls.authorize("User:alice", "10.0.0.2", R, "a")
    assert acls.authorize("User:alice", "10.0.0.2", R, "b")


def test_all_matches_every_operation() -> None:
    acls = acl_set(entry(op=ALL))
    assert all(acls.authorize("User:alice", "h", op, "orders") for op in Operation)
    only_read = acl_set(entry(op=R))
    assert not only_read.authorize("User:alice", "h", ALL, "orders")


def test_deny_wins_over_allow_from_any_matching_pattern() -> None:
    allow = entry(op=ALL, name="orders")
    for deny in (
        entry(op=R, perm=DENY, name="orders"),
        entry("User:*", op=R, perm=DENY, name="orders"),
        entry(host="10.0.0.1", op=R, perm=DENY, name="*"),
        entry(op=ALL, perm=DENY, name="ord", pattern=PREFIXED),
    ):
        acls = acl_set(allow, deny)
        assert not acls.authorize("User:alice", "10.0.0.1", R, "orders"), deny
        assert acls.authorize("User:alice", "10.0.0.1", W, "orders") is (deny.operation is R)
    elsewhere = acl_set(allow, entry(op=R, perm=DENY, host="10.0.0.9"))
    assert elsewhere.authorize("User:alice", "10.0.0.1", R, "orders")


def test_describe_is_implied_by_allow_read_write_delete_alter_only() -> None:
    implying = {R, W, Operation.DELETE, Operation.ALTER, D, ALL}
    for op in Operation:
        acls = acl_set(entry(op=op))
        assert acls.authorize("User:alice", "h", D, "orders") is (op in implying), op
    assert not acl_set(entry(op=D)).authorize("User:alice", "h", R, "orders")
    alter_configs = acl_set(entry(op=Operation.ALTER_CONFIGS))
    assert alter_configs.authorize("User:alice", "h", Operation.DESCRIBE_CONFIGS, "orders")
    assert not alter_configs.authorize("User:alice", "h", D, "orders")


def test_deny_read_does_not_deny_describe() -> None:
    acls = acl_set(entry(op=W), entry(op=R, perm=DENY))
    assert not acls.authorize("User:alice", "h", R, "orders")
    assert acls.authorize("User:alice", "h", D, "orders")  # implied by ALLOW Write
    assert not acl_set(entry(op=W), entry(op=D, perm=DENY)).authorize(
        "User:alice", "h", D, "orders"
    )
    assert not acl_set(entry(op=W), entry(op=ALL, perm=DENY)).authorize(
        "User:alice", "h", D, "orders"
    )


def test_super_users_may_do_everything_and_match_exactly() -> None:
    acls = acl_set(entry("User:admin", op=ALL, perm=DENY), super_users=frozenset({"User:admin"}))
    assert all(acls.authorize("User:admin", "h", op, "anything") for op in Operation)
    assert not acls.authorize("User:root", "h", R, "anything")
    star = acl_set(super_users=frozenset({"User:*"}))
    assert not star.authorize("User:bob", "h", R, "orders")
    parsed = AclSet.parse("", "x", super_users=frozenset({"User:admin"}))
    assert parsed.super_users == {"User:admin"}
    assert parsed.authorize("User:admin", "h", Operation.ALTER, "orders")


def test_describable_topics_keeps_the_given_order() -> None:
    acls = acl_set(entry(op=R, name="o", pattern=PREFIXED), entry(op=R, perm=DENY, name="orders"))
    assert acls.describable_topics("User:alice", "h", ["x", "ob", "orders", "oa"]) == [
        "ob",
        "orders",
        "oa",
    ]
    assert acls.describable_topics("User:bob", "h", iter(["ob"])) == []


def test_thousands_of_literal_and_prefixed_rules() -> None:
    entries = [entry(f"User:u{i}", name=f"topic-{i}") for i in range(5000)]
    entries += [entry(f"User:u{i}", op=W, name=f"t{i}-", pattern=PREFIXED) for i in range(5000)]
    acls = AclSet(entries)
    assert acls.authorize("User:u4321", "h", R, "topic-4321")
    assert not acls.authorize("User:u4321", "h", R, "topic-4322")
    assert acls.authorize("User:u77", "h", W, "t77-x")
    assert acls.authorize("User:u77", "h", D, "t77-x")
    assert not acls.authorize("User:u77", "h", W, "t7-x")


# --- the brute force, as the older AclAuthorizer states it ---------------------------------


def brute_force(
    entries: list[AclEntry],
    supers: frozenset[str],
    principal: str,
    host: str,
    op: Operation,
    topic: str,
) -> bool:
    """Every entry looked at; allowOps widened on the requested side (AclAuthorizer)."""
    if principal in supers:
        return True

    def applies(e: AclEntry) -> bool:
        if e.resource_type != ResourceType.TOPIC:
            return False
        if e.pattern == PatternType.LITERAL:
            name_ok = e.name in {topic, "*"}
        else:
            name_ok = topic.startswith(e.name)
        return name_ok and e.principal in (principal, "User:*") and e.host in (host, "*")

    for e in entries:
        if applies(e) and e.permission == Permission.DENY and e.operation in (op, Operation.ALL):
            return False
    allow_ops = {op, Operation.ALL}
    if op == Operation.DESCRIBE:
        allow_ops |= {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    if op == Operation.DESCRIBE_CONFIGS:
        allow_ops |= {Operation.ALTER_CONFIGS}
    return any(
        applies(e) and e.permission == Permission.ALLOW and e.operation in allow_ops
        for e in entries
    )


def render(entries: list[AclEntry], old: bool) -> str:
    """kafka-acls.sh --list text for ``entries``, one header per entry."""

    def upper(value: str) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", value).upper()

    out = []
    for e in entries:
        if old:
            resource = f"{e.resource_type.value}:{e.pattern.value.upper()}:{e.name}"
            line = old_acl(e.principal, e.permission.value, e.operation.value, e.host)
            out.append(scala_list(resource, [line]))
        else:
            resource = pattern(upper(e.resource_type.value), e.name, e.pattern.value.upper())
            op, perm = upper(e.operation.value), e.permission.value.upper()
            line = current_acl(e.principal, e.host, op, perm)
            out.append(java_list(resource, [line]))
    return "".join(out)


NAMES = st.text(alphabet="ab", min_size=1, max_size=3)
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*", "Group:alice"])
HOSTS = st.sampled_from(["10.0.0.1", "10.0.0.2", "*"])
ENTRIES = st.builds(
    AclEntry,
    principal=PRINCIPALS,
    host=HOSTS,
    operation=st.sampled_from(Operation),
    permission=st.sampled_from(Permission),
    resource_type=st.sampled_from([TOPIC, TOPIC, TOPIC, GROUP, ResourceType.CLUSTER]),
    name=NAMES | st.just("*"),
    pattern=st.sampled_from(PatternType),
)


@settings(deadline=None, max_examples=300)
@given(
    entries=st.lists(ENTRIES, max_size=12),
    supers=st.frozensets(PRINCIPALS, max_size=1),
    old=st.booleans(),
    requests=st.lists(
        st.tuples(PRINCIPALS, HOSTS, st.sampled_from(Operation), NAMES | st.just("*")),
        min_size=1,
        max_size=20,
    ),
)
def test_authorize_agrees_with_brute_force(
    entries: list[AclEntry],
    supers: frozenset[str],
    old: bool,
    requests: list[tuple[str, str, Operation, str]],
) -> None:
    acls = AclSet.parse(render(entries, old), "generated", super_users=supers)
    assert acls.entries == tuple(dict.fromkeys(entries))
    for principal, host, op, topic in requests:
        expected = brute_force(entries, supers, principal, host, op, topic)
        assert acls.authorize(principal, host, op, topic) is expected, (principal, host, op, topic)
    principal, host, _, _ = requests[0]
    topics = [t for _, _, _, t in requests]
    assert acls.describable_topics(principal, host, topics) == [
        t for t in topics if brute_force(entries, supers, principal, host, D, t)
    ]


# --- the file ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str, mtime_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))  # distinct mtimes whatever the fs's granularity


def acls_for(topic: str) -> str:
    return java_list(
        f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)",
        ["(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"],
    )


def reads(f: AclFile, topic: str) -> bool:
    return f.current().authorize("User:alice", "h", R, topic)


def test_file_missing_or_bad_at_start_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"acls\.txt cannot be read"):
        AclFile(tmp_path / "acls.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text(acls_for("a") + "nonsense\n")
    with pytest.raises(ConfigurationError, match=r"bad\.txt, line 4: expected"):
        AclFile(bad)
    bad.write_bytes(b"# \xff\n")
    with pytest.raises(ConfigurationError, match="not UTF-8"):
        AclFile(bad)


def test_a_change_is_picked_up_at_the_next_check(tmp_path: Path) -> None:
    path, clock = tmp_path / "acls.txt", Clock()
    write(path, acls_for("a"), 1_000_000_000)
    f = AclFile(path, clock=clock, check_every_s=5.0, super_users=frozenset({"User:root"}))
    assert reads(f, "a") and not reads(f, "b")
    write(path, acls_for("b"), 2_000_000_000)
    clock.now += 4.9
    assert reads(f, "a") and f.reloads == 0  # not due yet
    clock.now += 0.1
    assert reads(f, "b") and not reads(f, "a")
    assert f.reloads == 1 and f.failed_reloads == 0 and f.last_error is None
    assert f.current().authorize("User:root", "h", Operation.ALTER, "z")  # super users kept
    clock.now += 5
    f.current()
    assert f.reloads == 1  # unchanged: not read again


def test_same_size_new_mtime_and_a_renamed_in_file_reload(tmp_path: Path) -> None:
    path, clock = tmp_path / "acls.txt", Clock()
    write(path, acls_for("a"), 1_000_000_000)
    f = AclFile(path, clock=clock, check_every_s=1.0)
    write(path, acls_for("b"), 1_000_000_001)  # same size, 1 ns later
    clock.now += 1
    assert reads(f, "b") and f.reloads == 1
    staged = tmp_path / "acls.txt.new"
    write(staged, acls_for("c"), 1_000_000_001)  # same size and mtime: only the inode differs
    staged.replace(path)
    clock.now += 1
    assert reads(f, "c") and f.reloads == 2


def test_a_bad_change_keeps_the_previous_set(tmp_path: Path) -> None:
    path, clock = tmp_path / "acls.txt", Clock()
    write(path, acls_for("a"), 1_000_000_000)
    f = AclFile(path, clock=clock)
    write(
        path,
        acls_for("b") + "\t(principal=User:x, host=*, operation=REED, permissionType=ALLOW)\n",
        2_000_000_000,
    )
    clock.now += 1
    assert reads(f, "a") and not reads(f, "b")
    assert f.failed_reloads == 1 and f.reloads == 0
    assert f.last_error is not None and "line 4" in f.last_error and "REED" in f.last_error
    clock.now += 1
    assert reads(f, "a") and f.failed_reloads == 1  # the same bad file is not counted again
    write(path, acls_for("b"), 3_000_000_000)
    clock.now += 1
    assert reads(f, "b") and f.reloads == 1 and f.last_error is None


def test_a_removed_file_keeps_the_previous_set_and_says_so(tmp_path: Path) -> None:
    path, clock = tmp_path / "acls.txt", Clock()
    write(path, acls_for("a"), 1_000_000_000)
    f = AclFile(path, clock=clock)
    path.unlink()
    clock.now += 1
    assert reads(f, "a")
    assert f.failed_reloads == 1 and f.last_error is not None and "cannot be read" in f.last_error
    clock.now += 1
    assert reads(f, "a") and f.failed_reloads == 1
    write(path, acls_for("b"), 2_000_000_000)
    clock.now += 1
    assert reads(f, "b") and f.reloads == 1 and f.last_error is None


def test_authorize_resource_for_the_cluster() -> None:
    text = (
        "Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, "
        "patternType=LITERAL)`:\n"
        " \t(principal=User:prom, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
        " \t(principal=User:ops, host=*, operation=ALTER, permissionType=ALLOW)\n"
        " \t(principal=User:*, host=10.0.0.9, operation=ALL, permissionType=DENY)\n"
    )
    acls = AclSet.parse(text, "acl", super_users=frozenset({"User:root"}))
    cluster = ResourceType.CLUSTER

    def ok(principal: str, host: str = "10.0.0.1") -> bool:
        return acls.authorize_resource(
            principal, host, Operation.DESCRIBE, cluster, "kafka-cluster"
        )

    assert ok("User:prom")
    assert ok("User:ops")  # Alter implies Describe
    assert not ok("User:prom", "10.0.0.9")  # the deny wins
    assert not ok("User:alice")
    assert ok("User:root")
    assert not acls.authorize("User:prom", "10.0.0.1", Operation.DESCRIBE, "kafka-cluster")
