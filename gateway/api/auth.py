"""The HTTP side of :mod:`gateway.security.access`: who a request is, and the topic checks.

:data:`PrincipalDep` authenticates a request once (FastAPI caches a dependency per request)
and keeps the principal in the request state, where the audit log finds it.
:data:`DescribableTopic` and :data:`ReadableTopic` are the topic path parameter, checked by
name (:func:`gateway.api.params.check_topic`) and then authorised (``Describe`` or ``Read``)
before the route runs: a route that takes a topic cannot forget the check.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import Depends, Request

from gateway.api.params import TopicName
from gateway.errors import GatewayError
from gateway.security.access import Access, Credentials
from gateway.security.acl import Operation


def access_of(request: Request) -> Access:
    return cast(Access, request.state.access)


def client_host(request: Request) -> str:
    return request.client.host if request.client is not None else ""


def credentials(request: Request) -> Credentials:
    headers = request.headers
    tls: dict[str, Any] = request.scope.get("extensions", {}).get("tls") or {}
    return Credentials(
        host=client_host(request),
        authorization=headers.get("authorization"),
        api_key=headers.get("x-api-key"),
        peer_cert=tls.get("client_cert_dict"),
    )


async def authenticate(request: Request) -> str:
    access = access_of(request)
    principal = await access.authenticate(credentials(request))
    request.state.principal = principal  # for the audit line, a rate-limited one's included
    access.limit(principal)
    return principal


async def is_operator(request: Request) -> bool:
    """Whether the request may see operational details (which partitions are degraded, the
    metrics): always on an open gateway; else when its credentials authenticate a principal
    allowed ``Describe`` on the Cluster. Never raises: for the probes, which answer anyway."""
    access = access_of(request)
    if access.open:
        return True
    try:
        principal = await access.authenticate(credentials(request))
        access.check_cluster(principal, client_host(request), "see operational details")
    except GatewayError:
        return False
    return True


PrincipalDep = Annotated[str, Depends(authenticate)]


async def _describable(request: Request, topic: TopicName, principal: PrincipalDep) -> str:
    access_of(request).check_topic(principal, client_host(request), Operation.DESCRIBE, topic)
    return topic


async def authorise_read(request: Request, topic: TopicName, principal: PrincipalDep) -> str:
    access_of(request).check_topic(principal, client_host(request), Operation.READ, topic)
    return topic


DescribableTopic = Annotated[str, Depends(_describable)]
ReadableTopic = Annotated[str, Depends(authorise_read)]
