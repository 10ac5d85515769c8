"""One request frame in, its reply out (:func:`answer`): the API keys and versions advertised
(:data:`VERSIONS`, and ApiVersions, which answers them), and the one table from API key to
handler (:data:`HANDLERS`). The SASL exchange (SaslHandshake, SaslAuthenticate, a bare v0
token) is answered by :mod:`gateway.listener.sasl` with the connection's session, which no
handler is given; every other request reaches its handler with the session's principal and
address, once the session allows it (:func:`gateway.listener.sasl.check_allowed`).

* ApiVersions (0-3): the version table; a client asking a newer ApiVersions version gets the
  v0 answer with ``UNSUPPORTED_VERSION`` and the table, then asks again at a version listed
  (KIP-511);
* Metadata (1-12) and Produce (3-9, refused: a read-only listener):
  :mod:`gateway.listener.handlers`;
* Fetch (4-18): :mod:`gateway.listener.fetch`;
* ListOffsets (1-11): :mod:`gateway.listener.offsets`;
* FindCoordinator (0-4), OffsetFetch (1-9), OffsetCommit (2-9), JoinGroup (0-9), SyncGroup
  (0-5), Heartbeat (0-4), LeaveGroup (0-5), DescribeConfigs (1-4):
  :mod:`gateway.listener.groups` (the gateway is the group coordinator of a group with no
  committed offsets; membership, commits and configs are refused with typed errors);
* SaslHandshake (0-1), SaslAuthenticate (0-2): :mod:`gateway.listener.sasl`.

ACLs, as the HTTP API's (:meth:`Context.allows`): Metadata and ListOffsets need ``Describe``
on the topic, Fetch ``Read``; a topic refused is ``TOPIC_AUTHORIZATION_FAILED`` whether or not
it exists (asked by id: ``UNKNOWN_TOPIC_ID``, as for an id not known).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Final

from gateway.listener import codes, framing, groups, sasl
from gateway.listener.context import Context
from gateway.listener.fetch import fetch
from gateway.listener.framing import (
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    MESSAGES,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    Reply,
    Request,
    frame,
    response_for,
)
from gateway.listener.handlers import metadata, produce
from gateway.listener.offsets import list_offsets
from gateway.security.access import Access
from gateway.security.acl import ANONYMOUS

VERSIONS: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 9),
    FETCH: (4, 18),
    LIST_OFFSETS: (1, 11),
    METADATA: (1, 12),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 4),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    API_VERSIONS: (0, 3),
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_CONFIGS: (1, 4),
}
"""API key -> the versions served. Fetch from 4 (isolation levels, aborted transactions), to 18
(v13+ names topics by id); ListOffsets to 11 (every special timestamp); OffsetFetch and
OffsetCommit to 9 (v10 names topics by id); FindCoordinator to 4 (v5+ adds share groups). Every
version listed is one kafka-python's schemas decode and ``tests/unit/listener`` asks."""

Handler = Callable[[Context, Request], Awaitable[Reply | None]]


def api_versions_table(response_class: Any) -> list[Any]:
    return [
        response_class.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(VERSIONS.items())
    ]


def unsupported_api_versions(correlation_id: int) -> Reply:
    """The v0 ApiVersions answer to a version newer than 3: ``UNSUPPORTED_VERSION`` and the
    table, from which the client picks the version to ask again with."""
    response_class = MESSAGES[API_VERSIONS][1][0]
    body = response_class(
        error_code=codes.UNSUPPORTED_VERSION, api_keys=api_versions_table(response_class)
    )
    return Reply([frame(body, correlation_id)])


async def api_versions(ctx: Context, request: Request) -> Reply:
    response_class = response_for(request)
    body = response_class(
        error_code=codes.NONE,
        api_keys=api_versions_table(response_class),
        throttle_time_ms=0,
        supported_features=[],
        finalized_features_epoch=-1,
        finalized_features=[],
        zk_migration_ready=False,
    )
    return Reply([frame(body, request.correlation_id)])


HANDLERS: Final[dict[int, Handler]] = {
    API_VERSIONS: api_versions,
    METADATA: metadata,
    LIST_OFFSETS: list_offsets,
    FETCH: fetch,
    FIND_COORDINATOR: groups.find_coordinator,
    OFFSET_FETCH: groups.offset_fetch,
    OFFSET_COMMIT: groups.offset_commit,
    JOIN_GROUP: groups.join_group,
    SYNC_GROUP: groups.sync_group,
    HEARTBEAT: groups.heartbeat,
    LEAVE_GROUP: groups.leave_group,
    DESCRIBE_CONFIGS: groups.describe_configs,
    PRODUCE: produce,
}


def open_session(access: Access) -> sasl.Session:
    """A session as a connection with no certificate has it at first (unit tests)."""
    return sasl.Session("", None if access.authenticating else ANONYMOUS)


async def answer(ctx: Context, payload: bytes, session: sasl.Session | None = None) -> Reply | None:
    """The response frame to one request frame (without its size prefix) on a connection in
    ``session`` (default: a new one from no address, with no certificate); ``None`` when the
    request wants none. Raises :class:`~gateway.listener.framing.MalformedRequestError`
    (the connection closes), :class:`~gateway.listener.sasl.SaslFailedError` for a failed bare
    SASL token, :class:`~gateway.listener.sasl.SessionExpiredError` for a request past the
    end of the SASL session."""
    if session is None:
        session = open_session(ctx.access)
    reauth_ms = ctx.settings.kafka_reauth_ms
    if session.raw_token_next:
        return await sasl.raw_token(ctx.access, session, payload, reauth_ms)
    key, version, correlation = framing.peek(payload)
    sasl.check_allowed(session, key)
    if key == API_VERSIONS and version > VERSIONS[key][1]:
        return unsupported_api_versions(correlation)
    request = framing.decode(payload, VERSIONS)
    if key == SASL_HANDSHAKE:
        return sasl.handshake(ctx.settings, session, request)
    if key == SASL_AUTHENTICATE:
        return await sasl.authenticate(ctx.access, session, request, reauth_ms)
    if session.principal is not None:  # else ApiVersions, which needs no principal
        request = dataclasses.replace(request, principal=session.principal, host=session.host)
    return await HANDLERS[request.api_key](ctx, request)
