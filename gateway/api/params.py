"""Request parameters and what the lifespan hands to each request (service, settings).

Topic names are checked against Kafka's rules (:mod:`gateway.kafka.topic`: 1 to 249 of
``[a-zA-Z0-9._-]``, not ``.`` or ``..``) here, before anything reaches the service, so no path
segment such as ``..`` ever becomes part of an object key.

:data:`READY` guards the data routes: 503 ``not_ready`` until the service has loaded its
catalog (the first bucket scan), as ``/readyz`` says, whatever the service would answer.

Every dependency is ``async def``: FastAPI runs a plain ``def`` dependency in a worker thread,
one hand-off each per request, for work of a microsecond (issue 15).
"""

from __future__ import annotations

from typing import Annotated, Final, NamedTuple, cast

from fastapi import Depends, Path, Query, Request

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import InvalidRequestError, NotReadyError
from gateway.kafka.ints import INT32_MAX
from gateway.kafka.topic import TOPIC_MAX_LENGTH as MAX_TOPIC_LENGTH
from gateway.kafka.topic import TOPIC_PATTERN, validate_topic_name
from gateway.security.access import Access
from gateway.service.admission import ByteBudget, RequestGate
from gateway.service.protocol import Service

MAX_PARTITION: Final = INT32_MAX


def check_topic(name: str) -> str:
    return validate_topic_name(name, lambda message: InvalidRequestError(message, "topic"))


async def _topic(
    topic: Annotated[
        str,
        Path(
            description="Kafka topic name: 1 to 249 of [a-zA-Z0-9._-], not '.' or '..'",
            examples=["orders"],
            json_schema_extra={
                "pattern": TOPIC_PATTERN,
                "minLength": 1,
                "maxLength": MAX_TOPIC_LENGTH,
            },
        ),
    ],
) -> str:
    return check_topic(topic)


def service_of(request: Request) -> Service:
    return cast(Service, request.state.service)


def settings_of(request: Request) -> Settings:
    return cast(Settings, request.state.settings)


async def get_service(request: Request) -> Service:
    return service_of(request)


TIMEOUT_MS: Final = (
    "the request's deadline in ms (default and maximum: the request_timeout_ms and "
    "max_request_timeout_ms settings; the maximum here is that setting's default)"
)
# The contract's maxima: the defaults of the settings that bound them (a server may set others).
TIMEOUT_MS_MAX: Final = {"maximum": Settings.model_fields["max_request_timeout_ms"].default}
MAX_BYTES_MAX: Final = {"maximum": Settings.model_fields["max_response_bytes"].default}


async def _deadline(
    request: Request,
    timeout_ms: Annotated[
        int | None, Query(ge=1, description=TIMEOUT_MS, json_schema_extra=TIMEOUT_MS_MAX)
    ] = None,
) -> Deadline:
    return deadline_after(settings_of(request), timeout_ms)


def deadline_after(settings: Settings, timeout_ms: int | None) -> Deadline:
    """The deadline ``timeout_ms`` asks for (None: the default), within the settings' bound."""
    if timeout_ms is None:
        timeout_ms = settings.request_timeout_ms
    elif timeout_ms > settings.max_request_timeout_ms:
        raise InvalidRequestError(
            f"timeout_ms {timeout_ms} exceeds the maximum {settings.max_request_timeout_ms}",
            "timeout_ms",
        )
    return Deadline.after(timeout_ms / 1000)


async def _require_ready(request: Request) -> None:
    _check_ready(service_of(request), _open(request))


def _open(request: Request) -> bool:
    """No ACLs and no authentication: a caller may see why the catalog is not loaded (the
    reason names the store); otherwise that is for ``/readyz``'s operators."""
    return cast(Access, request.state.access).open


def _check_ready(service: Service, detailed: bool) -> None:
    if not service.ready():
        reason = service.readiness().reason or "the first bucket scan has not finished"
        shown = f": {reason}" if detailed else " (see /readyz)"
        raise NotReadyError(f"the catalog of remote segments is not loaded yet{shown}")


def admit(request: Request) -> None:
    """503 ``overloaded`` while the worker's event loop stays late
    (:meth:`~gateway.service.admission.RequestGate.admit`): for data requests that take no
    page turn (ListOffsets)."""
    cast(RequestGate, request.state.gate).admit()


class Context(NamedTuple):
    """What a data route needs from the lifespan, in one dependency (each dependency costs
    FastAPI's machinery tens of µs per request: issue 15)."""

    service: Service
    settings: Settings
    budget: ByteBudget
    gate: RequestGate


async def ready_context(request: Request) -> Context:
    """The lifespan's service, settings and byte budget; 503 ``not_ready`` as :data:`READY`."""
    state = request.state
    service = cast(Service, state.service)
    _check_ready(service, cast(Access, state.access).open)
    return Context(
        service,
        cast(Settings, state.settings),
        cast(ByteBudget, state.budget),
        cast(RequestGate, state.gate),
    )


READY: Final = Depends(_require_ready)
TopicName = Annotated[str, Depends(_topic)]
PartitionNumber = Annotated[
    int, Path(ge=0, le=MAX_PARTITION, description="partition number, >= 0", examples=[0])
]
ServiceDep = Annotated[Service, Depends(get_service)]
DeadlineDep = Annotated[Deadline, Depends(_deadline)]
ReadyContext = Annotated[Context, Depends(ready_context)]
