"""``openapi.yaml``: the app's OpenAPI schema as block-style YAML.

``python -m gateway.api`` rewrites the file after a route or model changes (PyYAML, a dev
dependency, is imported only here); ``tests/unit/api/test_openapi.py`` holds the file equal to
the app's schema, byte for byte. Keys keep the schema's order, text stays UTF-8, multi-line
descriptions are literal blocks and lines wrap at 100 columns, so diffs stay readable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gateway.api.app import openapi_schema


class _Dumper(yaml.SafeDumper):
    """Multi-line text (the descriptions) as literal blocks (``|``), as written."""


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _text)


def openapi_yaml(schema: dict[str, Any]) -> str:
    return yaml.dump(
        schema,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


def export_openapi(path: Path | None = None) -> str:
    """The app's schema as ``openapi.yaml`` text; written to ``path`` when given."""
    text = openapi_yaml(openapi_schema())
    if path is not None:
        path.write_text(text, encoding="utf-8")
    return text
