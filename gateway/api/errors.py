"""The one mapping from an exception to an HTTP error: status, body, headers.

Every error body is ``{"error_code", "message", "retriable"}`` plus what helps the client:
``parameter`` for a bad request, ``log_start_offset``/``log_end_offset`` for an offset outside
the remote tier, those and ``last_stable_offset`` for a read_committed fetch at a transaction
not decided in the remote tier (``transaction_pending``: where the client stands, so an
on-call engineer sees how far the open transaction is from the log end), ``offset`` for a
record not valid in the asked format. Code and retriability come from the
:class:`~gateway.errors.GatewayError` class attributes, the status from the adapter's table
(:data:`~gateway.api.statuses.HTTP_STATUS`).
FastAPI's validation errors and Starlette's routing errors are first turned into a
:class:`GatewayError`, so they render the same way; an unexpected exception becomes a generic
500 (the traceback goes to the log, not the client). NDJSON streams end with the same body
as their last line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from gateway.api.statuses import http_status
from gateway.errors import (
    AuthenticationError,
    GatewayError,
    InvalidFormatError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RateLimitedError,
    TransactionPendingError,
)

RETRY_AFTER_S: Final = 1
INTERNAL_MESSAGE: Final = "internal error; the gateway logged the details"


class HttpRoutingError(GatewayError):
    """No route for the path (404) or not for the method (405)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None) -> None:
        super().__init__(message)
        self.status = status
        self.code = {404: "not_found", 405: "method_not_allowed"}.get(status, f"http_{status}")
        self.headers = dict(headers or {})


def error_body(exc: BaseException) -> dict[str, Any]:
    """The JSON body of an error response (or of an NDJSON stream's error line)."""
    if not isinstance(exc, GatewayError):
        return {"error_code": "internal_error", "message": INTERNAL_MESSAGE, "retriable": False}
    body: dict[str, Any] = {
        "error_code": exc.code,
        "message": str(exc) or exc.code,
        "retriable": exc.retriable,
    }
    if isinstance(exc, InvalidRequestError) and exc.parameter is not None:
        body["parameter"] = exc.parameter
    if isinstance(exc, InvalidFormatError) and exc.offset is not None:
        body["offset"] = exc.offset
    if isinstance(exc, OffsetOutOfRangeError | TransactionPendingError):
        body["log_start_offset"] = exc.log_start_offset
        body["log_end_offset"] = exc.log_end_offset
    if isinstance(exc, TransactionPendingError):
        body["last_stable_offset"] = exc.last_stable_offset
    return body


def error_response(exc: BaseException) -> Response:
    if isinstance(exc, HttpRoutingError):
        status = exc.status
    else:
        status = http_status(exc) if isinstance(exc, GatewayError) else 500
    headers: dict[str, str] = {}
    if isinstance(exc, HttpRoutingError):
        headers.update(exc.headers)
    if isinstance(exc, RateLimitedError):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    elif isinstance(exc, GatewayError) and exc.retriable:
        headers["Retry-After"] = str(RETRY_AFTER_S)
    if isinstance(exc, AuthenticationError):
        headers["WWW-Authenticate"] = exc.challenge
    return Response(
        orjson.dumps(error_body(exc)),
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


def from_validation(errors: Sequence[Any]) -> InvalidRequestError:
    """FastAPI's validation errors as one :class:`InvalidRequestError` naming the parameter
    (the first one; the message lists them all)."""
    parts: list[str] = []
    first: str | None = None
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        name = loc[-1] if len(loc) > 1 else ".".join(loc) or "request"
        first = first or name
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{name}: {'required' if error.get('type') == 'missing' else message}")
    return InvalidRequestError("; ".join(parts) or "invalid request", parameter=first)


async def _gateway_error(request: Request, exc: Exception) -> Response:
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return error_response(from_validation(exc.errors()))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(HttpRoutingError(exc.status_code, str(exc.detail), exc.headers))


def install_error_handlers(app: FastAPI) -> None:
    """Route every handled exception to :func:`error_response`; unexpected ones are caught by
    :class:`gateway.api.observe.ObserveMiddleware`, which logs them and answers 500."""
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
