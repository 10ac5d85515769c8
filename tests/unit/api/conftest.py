"""Fixtures: settings with small byte limits, the fake service, an app and a client."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gateway.api import create_app
from gateway.config import ENV_PREFIX, Settings
from tests.fakes.orders import orders
from tests.fakes.service import FakeService

PAGE_BYTES = 300  # three fake batches per NDJSON page
MAX_RESPONSE_BYTES = 1000
DEFAULT_MAX_BYTES = 500


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


@pytest.fixture
def settings() -> Settings:
    return Settings(
        store="file:///nonexistent",
        stream_page_bytes=PAGE_BYTES,
        max_response_bytes=MAX_RESPONSE_BYTES,
        default_max_bytes=DEFAULT_MAX_BYTES,
        request_timeout_ms=30_000,
        max_request_timeout_ms=60_000,
    )


@pytest.fixture
def fake() -> FakeService:
    return orders()


@pytest.fixture
def app(settings: Settings, fake: FakeService) -> FastAPI:
    return create_app(settings, fake.factory())


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, base_url="http://localhost") as c:  # runs the lifespan
        yield c
