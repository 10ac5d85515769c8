"""The HTTP adapter's one table from error type to status (the domain errors carry none)."""

from __future__ import annotations

import inspect

from gateway import errors
from gateway.api.statuses import HTTP_STATUS, http_status
from gateway.errors import GatewayError, ObjectNotFoundError, StorageError

DOMAIN = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, GatewayError) and cls.__module__ == errors.__name__
]


def test_the_domain_errors_carry_no_transport_status() -> None:
    assert DOMAIN and all("status" not in vars(cls) for cls in DOMAIN)


def test_the_table_names_domain_errors_from_the_root_down() -> None:
    assert GatewayError in HTTP_STATUS and set(HTTP_STATUS) <= set(DOMAIN)


def test_a_type_without_a_row_answers_its_nearest_ancestors_status() -> None:
    class GoneError(ObjectNotFoundError):
        pass

    class OddError(StorageError):
        pass

    assert http_status(GoneError("x")) == 404
    assert http_status(OddError("x")) == 502
    assert http_status(GatewayError("x")) == 500
