"""Request parameters and what the lifespan hands to each request (service, settings).

Topic names are checked against Kafka's rules (``org.apache.kafka.common.internals.Topic``:
1 to 249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``) here, before anything reaches the service,
so no path segment such as ``..`` ever becomes part of an object key.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, cast

from fastapi import Depends, Path, Query, Request

from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import InvalidRequestError
from gateway.service.protocol import Service

TOPIC_PATTERN: Final = r"^[a-zA-Z0-9._-]+$"
MAX_TOPIC_LENGTH: Final = 249
MAX_PARTITION: Final = 2**31 - 1
_TOPIC: Final = re.compile(TOPIC_PATTERN)


def check_topic(name: str) -> str:
    if not name or len(name) > MAX_TOPIC_LENGTH:
        raise InvalidRequestError(
            f"topic name of {len(name)} characters: Kafka allows 1 to {MAX_TOPIC_LENGTH}", "topic"
        )
    if name in (".", ".."):
        raise InvalidRequestError(f"topic name {name!r} is not allowed", "topic")
    if _TOPIC.match(name) is None:
        raise InvalidRequestError(
            f"topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' are legal",
            "topic",
        )
    return name


def _topic(
    topic: Annotated[
        str,
        Path(
            description="Kafka topic name: 1 to 249 of [a-zA-Z0-9._-], not '.' or '..'",
            json_schema_extra={
                "pattern": TOPIC_PATTERN,
                "minLength": 1,
                "maxLength": MAX_TOPIC_LENGTH,
            },
        ),
    ],
) -> str:
    return check_topic(topic)


def get_service(request: Request) -> Service:
    return cast(Service, request.state.service)


def get_settings(request: Request) -> Settings:
    return cast(Settings, request.state.settings)


def _deadline(
    request: Request,
    timeout_ms: Annotated[
        int | None,
        Query(
            ge=1,
            description="the request's deadline in ms (default and maximum: the "
            "request_timeout_ms and max_request_timeout_ms settings)",
        ),
    ] = None,
) -> Deadline:
    settings = get_settings(request)
    if timeout_ms is None:
        timeout_ms = settings.request_timeout_ms
    elif timeout_ms > settings.max_request_timeout_ms:
        raise InvalidRequestError(
            f"timeout_ms {timeout_ms} exceeds the maximum {settings.max_request_timeout_ms}",
            "timeout_ms",
        )
    return Deadline.after(timeout_ms / 1000)


TopicName = Annotated[str, Depends(_topic)]
PartitionNumber = Annotated[int, Path(ge=0, le=MAX_PARTITION, description="partition number, >= 0")]
ServiceDep = Annotated[Service, Depends(get_service)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
DeadlineDep = Annotated[Deadline, Depends(_deadline)]
