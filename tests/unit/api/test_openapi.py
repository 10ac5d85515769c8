"""``openapi.yaml`` at the repository root is the contract: it must equal the app's schema.

Regenerate it with ``.venv/bin/python -m gateway.api`` after changing a route. The file is
block-style YAML (:mod:`gateway.api.schema`).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from fastapi import FastAPI

from gateway.api.app import openapi_schema
from gateway.api.schema import export_openapi

OPENAPI = Path(__file__).resolve().parents[3] / "openapi.yaml"
REGENERATE = "openapi.yaml is stale: run .venv/bin/python -m gateway.api"


def test_openapi_yaml_equals_the_apps_schema(app: FastAPI) -> None:
    text = OPENAPI.read_text(encoding="utf-8")
    assert yaml.safe_load(text) == app.openapi() == openapi_schema(), REGENERATE
    assert text == export_openapi(), REGENERATE  # byte for byte, so diffs stay clean


def test_openapi_yaml_is_block_style_yaml_not_json() -> None:
    text = OPENAPI.read_text(encoding="utf-8")
    assert text.startswith("openapi: 3.1.0\n"), text[:40]
    assert "\npaths:\n  /healthz:\n" in text
    assert not text.lstrip().startswith("{")


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
    for name, path in paths.items():  # validation errors are 400s; 422 is invalid_format only
        responses = path["get"]["responses"]
        if name.endswith("/records"):
            assert "invalid_format" in responses["422"]["description"]
            ref = responses["422"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorBody")
        else:
            assert "422" not in responses
    params = {p["name"]: p for p in records["parameters"]}
    assert params["header_format"]["schema"]["$ref"].endswith("/EmbeddedFormat")
    formats = schema["components"]["schemas"]["EmbeddedFormat"]["enum"]
    assert formats == ["base64", "hex", "string", "json"]
    for name in ("key_format", "value_format"):
        assert params[name]["schema"]["$ref"].endswith("/RecordFormat")
    decoded = schema["components"]["schemas"]["RecordFormat"]["enum"]
    assert decoded == [*formats, "avro", "protobuf", "jsonschema", "auto"]
    assert params["decode_errors"]["schema"]["enum"] == ["fail", "raw"]
    ok = records["responses"]["200"]
    assert "X-End-Of-Remote-Log" in ok["headers"]
    assert "end_of_remote_log" in schema["components"]["schemas"]["RecordsResponse"]["required"]
    segment = schema["components"]["schemas"]["Segment"]["properties"]
    assert {"displaced", "displaced_by"} <= set(segment)
    topic = next(p for p in records["parameters"] if p["name"] == "topic")
    assert topic["schema"]["pattern"] == "^[a-zA-Z0-9._-]+$"
    assert topic["schema"]["maxLength"] == 249
    error = schema["components"]["schemas"]["ErrorBody"]
    assert {"error_code", "message", "retriable"} <= set(error["required"])
