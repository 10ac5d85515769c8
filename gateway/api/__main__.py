"""``python -m gateway.api [PATH]``: write the app's OpenAPI schema to PATH (openapi.yaml)."""

import sys
from pathlib import Path

from gateway.api.app import OPENAPI_FILE
from gateway.api.schema import export_openapi

target = Path(sys.argv[1] if len(sys.argv) > 1 else OPENAPI_FILE)
export_openapi(target)
print(f"wrote {target}", file=sys.stderr)
