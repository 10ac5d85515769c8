"""``openapi.yaml`` at the repository root is the contract: it must equal the app's schema.

Regenerate it with ``.venv/bin/python -m gateway.api`` after changing a route. The file is
JSON, which is valid YAML; a YAML parser reads it when one is installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from gateway.api.app import export_openapi, openapi_schema

OPENAPI = Path(__file__).resolve().parents[3] / "openapi.yaml"
REGENERATE = "openapi.yaml is stale: run .venv/bin/python -m gateway.api"


def _load(text: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped]  # noqa: PLC0415 - via uvicorn[standard]
    except ImportError:
        return json.loads(text)
    return yaml.safe_load(text)


def test_openapi_yaml_equals_the_apps_schema(app: FastAPI) -> None:
    text = OPENAPI.read_text(encoding="utf-8")
    assert _load(text) == app.openapi(), REGENERATE
    assert json.loads(text) == openapi_schema(), REGENERATE
    assert text == export_openapi(), REGENERATE  # byte for byte, so diffs stay clean


def test_the_schema_documents_the_contract() -> None:
    schema = openapi_schema()
    paths = schema["paths"]
    assert set(paths) == {
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/topics",
        "/v1/topics/{topic}/partitions",
        "/v1/topics/{topic}/partitions/{partition}",
        "/v1/topics/{topic}/partitions/{partition}/segments",
        "/v1/topics/{topic}/partitions/{partition}/offsets",
        "/v1/topics/{topic}/partitions/{partition}/records",
    }
    records = paths["/v1/topics/{topic}/partitions/{partition}/records"]["get"]
    content = records["responses"]["200"]["content"]
    assert set(content) == {"application/json", "application/x-ndjson", "application/octet-stream"}
    assert "X-Aborted-Transactions" in records["responses"]["200"]["headers"]
    assert {"400", "404", "406", "416", "502", "503", "504", "default"} <= set(records["responses"])
    for path in paths.values():
        assert "422" not in path["get"]["responses"]  # validation errors are 400s
    topic = next(p for p in records["parameters"] if p["name"] == "topic")
    assert topic["schema"]["pattern"] == "^[a-zA-Z0-9._-]+$"
    assert topic["schema"]["maxLength"] == 249
    error = schema["components"]["schemas"]["ErrorBody"]
    assert {"error_code", "message", "retriable"} <= set(error["required"])
