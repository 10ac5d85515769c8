"""The HTTP layer (FastAPI): parse, validate, call one :class:`~gateway.service.protocol.Service`
method, render. Nothing outside this package imports FastAPI."""

from gateway.api.app import ServiceFactory, create_app

__all__ = ["ServiceFactory", "create_app"]
