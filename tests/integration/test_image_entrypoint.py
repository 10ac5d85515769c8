"""The container image's exact command, outside a container (issue 17): no engine runs here, so
the test reads deploy/Dockerfile's gateway stage (its ENV, its default settings file, its
ENTRYPOINT + CMD, its HEALTHCHECK and USER), lays the image's file system out under a folder
(the app in ``/opt/tiered-gateway`` installed from the project as the image installs its wheel,
``/etc/tiered-gateway/gateway.toml``, the key of an encrypted topic mounted read-only, the one
writable volume ``/var/lib/tiered-gateway``) and runs that command as the image's user (uid
10001, via setpriv when the test runs as root) against the demo bucket: ``/readyz`` answers,
records come back, the HEALTHCHECK command passes, and nothing is written outside the volume.

Deviations, all forced by running outside a container: every absolute path of the layout gets
the folder in front of it; the port is a free one instead of 8080; the interpreter is Debian's
``/usr/bin/python3`` (3.11, as the image's base) since the test's own lives in root's home.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gateway.demo import DemoBucket
from tests.fixtures.ports import LOCALHOST, listening_port
from tests.integration.serve import stop

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
STAGE = "gateway"
UID = 10001
LAYOUT = ("/opt/tiered-gateway", "/etc/tiered-gateway", "/var/lib/tiered-gateway")
SYSTEM_PYTHON = Path("/usr/bin/python3")


@dataclass
class Stage:
    base: str
    env: dict[str, str] = field(default_factory=dict)
    copies: list[tuple[str, str]] = field(default_factory=list)  # (source, destination)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    user: str = ""


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        logical += stripped
        word, _, rest = logical.partition(" ")
        yield word.upper(), rest.strip()
        logical = ""


def parse_stages(text: str) -> dict[str, Stage]:
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for word, rest in _instructions(text):
        if word == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m is not None, rest
            current = Stage(base=m.group(1))
            stages[m.group(2) or str(len(stages))] = current
        elif current is None:
            continue
        elif word == "ENV":
            for token in shlex.split(rest):
                key, _, value = token.partition("=")
                current.env[key] = value
        elif word == "COPY" and not rest.startswith("--"):
            *sources, destination = rest.split()
            current.copies += [(source, destination) for source in sources]
        elif word in ("ENTRYPOINT", "CMD"):
            setattr(current, word.lower(), json.loads(rest))
        elif word == "HEALTHCHECK" and " CMD " in f" {rest} ":
            current.healthcheck = json.loads(rest.split("CMD", 1)[1])
        elif word == "USER":
            current.user = rest
    return stages


def resolved(stages: dict[str, Stage], name: str) -> Stage:
    """``name``'s stage with what it inherits (ENV and COPY from its bases, first)."""
    chain = []
    while name in stages:
        chain.append(stages[name])
        name = stages[name].base
    out = Stage(base=name)
    for stage in reversed(chain):
        out.env.update(stage.env)
        out.copies += stage.copies
        for attr in ("entrypoint", "cmd", "healthcheck", "user"):
            if getattr(stage, attr):
                setattr(out, attr, getattr(stage, attr))
    return out


def _moved(value: str, root: Path) -> str:
    for path in LAYOUT:
        value = value.replace(path, f"{root}{path}")
    return value


@dataclass(frozen=True)
class Image:
    root: Path
    stage: Stage


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    """The gateway stage's file system under a world-readable folder (the image's user must
    be able to read it), the app installed as the image installs it."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3 to install the image's virtualenv with")
    stage = resolved(parse_stages(DOCKERFILE.read_text()), STAGE)
    root = Path(tempfile.mkdtemp(prefix="image-", dir="/tmp"))
    try:
        root.chmod(0o755)
        app = root / "opt/tiered-gateway"
        subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(app)], check=True)
        # the image installs with pip (deploy/Dockerfile); uv installs the same packages here
        # for a fifth of the CPU (25 -> 7 CPU-s), bytecode compiled as pip does
        uv = Path(sys.executable).with_name("uv")  # the dev extra's
        subprocess.run(
            [str(uv), "pip", "install", "--quiet", "--compile-bytecode", "--python",
             str(app / "bin/python"), str(ROOT)],
            check=True, capture_output=True,
        )  # fmt: skip
        for source, destination in stage.copies:  # the image's default settings file
            target = Path(_moved(destination, root))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_moved((ROOT / source).read_text(), root))
        volume = root / "var/lib/tiered-gateway"
        volume.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(volume, UID, UID)
        yield Image(root, stage)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _as_image_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command  # already not root
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot become the image's user")
    return [setpriv, f"--reuid={UID}", f"--regid={UID}", "--clear-groups", *command]


def _snapshot(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in folder.rglob("*")}


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        try:
            if httpx.get(f"{url}/readyz", timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            pass  # the workers have not taken the listening socket's connections yet
        time.sleep(0.1)


def test_the_image_command_serves_the_demo_bucket_as_its_user(
    image: Image, demo: DemoBucket
) -> None:
    root, stage = image.root, image.stage
    assert stage.entrypoint + stage.cmd == ["tiered-gateway", "serve"]
    assert stage.user.split(":")[0] == str(UID)
    bucket = root / "bucket"
    shutil.copytree(demo.root / "bucket", bucket)
    keys = root / "etc/tiered-gateway/keys"
    keys.mkdir(parents=True)
    key = keys / "demo.pem"
    shutil.copyfile(demo.key_pair_spec.split("=", 1)[1], key)
    key.chmod(0o400)  # a Secret volume with defaultMode 0400, owned by the pod's user
    if os.geteuid() == 0:
        os.chown(key, UID, UID)
    env = {k: _moved(v.replace("${PATH}", os.environ["PATH"]), root) for k, v in stage.env.items()}
    env |= {  # what a deployment adds (docs/deploy.md), and the test's free port
        "TIERED_GATEWAY_STORE": bucket.as_uri(),
        "TIERED_GATEWAY_KEY_PREFIX": demo.key_prefix,
        "TIERED_GATEWAY_KEY_PAIRS": f"demo={key}",
        "TIERED_GATEWAY_ALLOW_ANONYMOUS": "true",
        "TIERED_GATEWAY_ALLOWED_HOSTS": "localhost",
        "TIERED_GATEWAY_PORT": "0",
        "TIERED_GATEWAY_WORKERS": "2",
        "HOME": str(root / "var/lib/tiered-gateway"),
        "LANG": "C.UTF-8",
    }
    before = _snapshot(root / "opt") | _snapshot(root / "etc")
    log = root / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            _as_image_user(stage.entrypoint + stage.cmd), env=env, stdout=out,
            stderr=subprocess.STDOUT, cwd=root / "var/lib/tiered-gateway",
        )  # fmt: skip
    try:
        port = listening_port(proc, timeout_s=120, wildcard=True)
        url = f"http://{LOCALHOST}:{port}"
        _wait_ready(url, proc, log)  # a first start compiles numba's loops into the volume
        r = httpx.get(
            f"{url}/v1/topics/payments/partitions/0/records", params={"offset": 0}, timeout=60
        )
        assert r.status_code == 200, r.text
        assert r.json()["records"], "the encrypted topic decrypted with the mounted key"
        uids = (Path(f"/proc/{proc.pid}/status").read_text().split("\nUid:")[1]).split()[:2]
        assert uids == [str(UID)] * 2 or os.geteuid() != 0
        health = subprocess.run(
            _as_image_user([*stage.healthcheck, "--port", str(port)]),
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert health.returncode == 0, health.stdout + health.stderr
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        assert lines, "TIERED_GATEWAY_LOG_FORMAT=json: one JSON object per line"
    finally:
        stop(proc)
    after = _snapshot(root / "opt") | _snapshot(root / "etc")
    assert after == before, "written outside the volume (the root file system is read-only)"
    assert (root / "var/lib/tiered-gateway/state").is_dir()


def test_the_dockerfile_parses_as_the_test_reads_it() -> None:
    stage = resolved(parse_stages(DOCKERFILE.read_text()), STAGE)
    assert stage.env["TIERED_GATEWAY_CONFIG"] == "/etc/tiered-gateway/gateway.toml"
    assert stage.env["NUMBA_CACHE_DIR"].startswith("/var/lib/tiered-gateway/")
    assert ("deploy/image/gateway.toml", "/etc/tiered-gateway/gateway.toml") in stage.copies
    assert stage.healthcheck[:2] == ["tiered-gateway", "probe"]
    assert sys.version_info[:2] == (3, 11)
