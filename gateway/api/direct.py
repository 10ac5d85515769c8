"""The records route without FastAPI's per-request dependency solving (issue 30).

FastAPI solves a route's dependencies and parameters per request with general machinery: for
the records route that was ~20 % of a warm raw answer's server CPU (py-spy, one worker), of
which the route's own checks were ~3 %. :func:`direct_route` makes a route class whose
requests make the same checks by calling the same functions, in the order FastAPI calls them
for the records route's signature:

1. the service is ready (:func:`~gateway.api.params.ready_context`, the ``ReadyContext``);
2. the topic's name (:func:`~gateway.api.params.check_topic`, the ``TopicName``);
3. the principal (:func:`~gateway.api.auth.authenticate`, the ``PrincipalDep``: credentials,
   then the rate limit);
4. Read on the topic (:func:`~gateway.api.auth.authorise_read`, the ``ReadableTopic``);
5. the partition, then the query, validated by the same pydantic types and reported with the
   same locations (``path``/``query``), so a bad request gets the same 400 body.

The OpenAPI document still comes from the endpoint's signature (the contract is unchanged);
``tests/unit/api/test_direct.py`` holds that signature to the checks made here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, Final, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from starlette.responses import Response

from gateway.api.auth import authenticate, authorise_read
from gateway.api.params import MAX_PARTITION, Context, check_topic, ready_context

M = TypeVar("M", bound=BaseModel)
Serve = Callable[[Request, Context, str, int, M], Awaitable[Response]]
Handler = Callable[[Request], Coroutine[Any, Any, Response]]

PARTITION: Final = TypeAdapter(Annotated[int, Field(ge=0, le=MAX_PARTITION)])
"""The ``PartitionNumber`` path parameter's type."""


def parameters(request: Request, query_model: type[M]) -> tuple[int, M]:
    """The partition and the query, or :class:`RequestValidationError` with every error at
    FastAPI's locations (the path's first)."""
    errors: list[Any] = []
    partition = query = None
    try:
        partition = PARTITION.validate_python(request.path_params["partition"])
    except ValidationError as e:
        errors += [{**err, "loc": ("path", "partition", *err["loc"])} for err in e.errors()]
    try:
        query = query_model.model_validate(dict(request.query_params))
    except ValidationError as e:
        errors += [{**err, "loc": ("query", *err["loc"])} for err in e.errors()]
    if errors or partition is None or query is None:
        raise RequestValidationError(errors)
    return partition, query


def direct_route(query_model: type[M], serve: Serve[M]) -> type[APIRoute]:
    """A route class whose requests are checked as the module docstring says, then answered
    by ``serve(request, context, topic, partition, query)``."""

    async def handle(request: Request) -> Response:
        ctx = await ready_context(request)
        name = check_topic(request.path_params["topic"])
        principal = await authenticate(request)
        topic = await authorise_read(request, name, principal)
        partition, query = parameters(request, query_model)
        return await serve(request, ctx, topic, partition, query)

    class DirectRoute(APIRoute):
        def get_route_handler(self) -> Handler:
            return handle

    return DirectRoute
