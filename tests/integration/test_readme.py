"""The README's shell examples run as written: a demo server for the ``curl`` lines, the
tiering walk-through and the ``dump`` examples in a scratch folder.

Only what a reader's machine differs in is substituted: the port (a free one instead of 8080),
the scratch folders instead of ``/tmp/...``, a generated key instead of ``/path/to/...pem``,
and this interpreter for ``.venv/bin/tiered-gateway``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fixtures.ports import LOCALHOST, listening_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLI = f"{shlex.quote(sys.executable)} -m gateway.cli"


def sh_blocks() -> list[str]:
    """The README's ```sh blocks, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
    return [block.replace("\\\n", " ") for block in blocks]


def commands(block: str) -> list[str]:
    return [
        line.split("  #", 1)[0].strip()
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_GATEWAY_")}
    out["PYTHONPATH"] = str(ROOT)
    return out


@pytest.fixture
def demo_url(tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    """``tiered-gateway demo`` as ``make run`` starts it, on a port it picks (``--port 0``)."""
    log = (tmp_path / "demo.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "demo", "--root", str(tmp_path / "demo"),
         "--port", "0"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        try:
            url = f"http://{LOCALHOST}:{listening_port(proc, timeout_s=120)}"
        except RuntimeError as e:
            raise AssertionError(f"{e}:\n{(tmp_path / 'demo.log').read_text()}") from None
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "demo.log").read_text()
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "demo.log").read_text()
            time.sleep(0.1)  # polling a separate process; no verdict rests on this
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_readme_opens_with_the_two_commands() -> None:
    first = commands(sh_blocks()[0])
    assert [c.split()[:2] for c in first] == [["make", "run"], ["make", "test"]]


def test_readme_curl_examples_answer_records(demo_url: str, env: dict[str, str]) -> None:
    curls = [c for block in sh_blocks() for c in commands(block) if c.startswith("curl ")]
    assert len(curls) >= 3
    for example in curls:
        command = example.replace("http://127.0.0.1:8080", demo_url)
        done = run(command.replace("curl ", "curl -sSf ", 1), ROOT, env)
        assert done.returncode == 0, (command, done.stderr)
        assert '"offset"' in done.stdout, (command, done.stdout[:500])


def _key_pem(path: Path) -> Path:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def test_readme_tiering_and_dump_examples_run(tmp_path: Path, env: dict[str, str]) -> None:
    pem = _key_pem(tmp_path / "k1.pem")
    partition, bucket = tmp_path / "partition", tmp_path / "bucket"
    shell = [c for block in sh_blocks()[1:] for c in commands(block) if "tiered-gateway" in c]
    tiering = [c for c in shell if "demo-segment" in c or " tier " in c]
    dumps = [c for c in shell if " dump " in c]
    assert tiering and dumps
    for example in tiering:
        command = (
            example.replace(".venv/bin/tiered-gateway", CLI)
            .replace("/tmp/partition", str(partition))
            .replace("/tmp/bucket", str(bucket))
            .replace("/path/to/private-pkcs8.pem", str(pem))
        )
        done = run(command, tmp_path, env)
        assert done.returncode == 0, (command, done.stderr)
    manifests = list(bucket.rglob("*.rsm-manifest"))
    assert manifests, "the tiering example uploaded nothing"
    for example in dumps:
        # a broker's __consumer_offsets folder: the demo segment's own .log stands in for it
        command = example.replace(".venv/bin/tiered-gateway", CLI).replace(
            "/var/kafka/__consumer_offsets-7/", ""
        )
        done = run(command, partition, env)
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.strip(), command
