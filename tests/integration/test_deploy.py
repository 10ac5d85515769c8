"""deploy/ passes its offline checks (tests/deploy/check.py, `make deploy-check`): kustomize
renders, Kubernetes schemas, hadolint, checkov. The checkers live in `.venv-deploy`, which
`make test` and `make deploy-check` install."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from gateway.config import load_settings

ROOT = Path(__file__).parents[2]
DEPLOY_PYTHON = ROOT / ".venv-deploy" / "bin" / "python"


def test_deploy_check_passes() -> None:
    if not DEPLOY_PYTHON.exists():
        pytest.fail("the deploy checkers are not installed: run `make deploy-check` (or make test)")
    done = subprocess.run(
        [str(DEPLOY_PYTHON), str(ROOT / "tests/deploy/check.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "deploy-check: all passed" in done.stdout


@pytest.mark.parametrize(
    "path",
    sorted(str(p.relative_to(ROOT)) for p in (ROOT / "deploy").rglob("gateway.toml")),
)
def test_every_settings_file_of_deploy_loads(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each TOML the image or a kustomization ships is valid settings (no unknown key, no
    inconsistency): a typo there would only show when a pod starts."""
    for name in ("TIERED_GATEWAY_CONFIG", "TIERED_GATEWAY_STORE"):
        monkeypatch.delenv(name, raising=False)
    text = (ROOT / path).read_text()
    overrides = {} if "store" in tomllib.loads(text) else {"store": "s3://example"}
    settings = load_settings(overrides, ROOT / path)
    assert settings.store
