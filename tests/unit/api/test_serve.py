"""The serving path: a real uvicorn server over real HTTP; the serve and demo commands."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.api import create_app
from gateway.cli import main
from gateway.commands import serve as serve_command
from gateway.commands.serve import DEMO_MARKER, clear_demo_root, write_demo
from gateway.config import Settings
from gateway.demo import DemoBucket
from gateway.errors import ConfigurationError
from tests.fakes.orders import LOG_END
from tests.fakes.service import FakeService
from tests.fixtures.ports import LOCALHOST, listening_port
from tests.integration.serve import spawn_serve, stop, wait_ready
from tests.unit.api.server import running


def test_real_uvicorn_serves_the_app(settings: Settings, fake: FakeService) -> None:
    with running(create_app(settings, fake.factory())) as base, httpx.Client(base_url=base) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        r = c.get("/v1/topics/orders/partitions/0/records", params={"offset": 90})
        assert r.status_code == 200
        assert r.json()["next_offset"] == LOG_END
        lines = []
        with c.stream(
            "GET",
            "/v1/topics/orders/partitions/0/records",
            params={"offset": 0},
            headers={"Accept": "application/x-ndjson"},
        ) as stream:
            assert stream.headers["content-type"] == "application/x-ndjson"
            lines = [json.loads(line) for line in stream.read().split(b"\n") if line]
        assert lines[-1]["next_offset"] == len(lines) - 1
        r = c.get("/v1/topics/..%2F..%2Fetc/partitions/0")
        assert r.status_code in (400, 404)
    assert fake.closed == 1
    assert all(call[1].get("topic", "orders") == "orders" for call in fake.calls)


def _recorder(seen: list[Settings]) -> Any:
    def serve(settings: Settings) -> int:
        seen.append(settings)
        return 0

    return serve


def _fake_run(started: bool) -> Any:
    def run(self: uvicorn.Server, sockets: object = None) -> None:
        self.started = started

    return run


def test_serve_refuses_anonymous_reads_off_loopback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fake: FakeService
) -> None:
    monkeypatch.setattr(uvicorn.Server, "run", _fake_run(True))
    wide = {"store": "file:///x", "host": "0.0.0.0"}
    with pytest.raises(ConfigurationError, match="--allow-anonymous"):
        serve_command.serve(Settings(**wide), fake.factory())
    with pytest.raises(ConfigurationError, match="--allowed-host"):
        serve_command.serve(Settings(**wide, allow_anonymous=True), fake.factory())
    with caplog.at_level(logging.WARNING):
        meant = Settings(**wide, allow_anonymous=True, allowed_hosts=["gw.example"])
        assert serve_command.serve(meant, fake.factory()) == 0
    assert "anonymous access allowed" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        serve_command.serve(Settings(store="file:///x"), fake.factory())
    assert "loopback" not in caplog.text


def test_serve_reports_a_failed_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fake: FakeService
) -> None:
    monkeypatch.setattr(uvicorn.Server, "run", _fake_run(False))
    assert serve_command.serve(Settings(store="file:///x"), fake.factory()) == 3
    assert "did not start" in capsys.readouterr().err


def test_serve_command_names_a_bad_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--store", "file:///x", "--port", "99999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid configuration: setting 'port' (--port")


def test_serve_command_needs_a_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve"]) == 2
    assert "'store'" in capsys.readouterr().err


def test_serve_command_passes_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Settings] = []
    monkeypatch.setattr(serve_command, "serve", _recorder(seen))
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PREFIX", "env/")
    assert main(["serve", "--store", "s3://b", "--port", "0", "--s3-path-style"]) == 0
    (settings,) = seen
    assert (settings.store, settings.port, settings.key_prefix) == ("s3://b", 0, "env/")
    assert settings.s3_path_style


# --- demo ---------------------------------------------------------------------------------------


def test_clear_demo_root(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    clear_demo_root(root)  # absent: fine
    root.mkdir()
    clear_demo_root(root)  # empty: fine, kept
    assert root.is_dir()
    (root / "precious.txt").write_text("mine")
    with pytest.raises(ConfigurationError, match="not deleting it"):
        clear_demo_root(root)
    assert (root / "precious.txt").read_text() == "mine"
    (root / DEMO_MARKER).write_text("")
    clear_demo_root(root)
    assert not root.exists()


def test_clear_demo_root_refuses_files_and_links(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / DEMO_MARKER).write_text("")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ConfigurationError, match="symbolic link"):
        clear_demo_root(link)
    assert (target / DEMO_MARKER).exists()
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ConfigurationError, match="not a folder"):
        clear_demo_root(file)


def test_demo_writes_the_bucket_prints_requests_and_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "demo-bucket"
    seen: list[Settings] = []
    monkeypatch.setattr(serve_command, "serve", _recorder(seen))
    assert main(["demo", "--root", str(root), "--port", "18123"]) == 0
    (settings,) = seen
    assert (settings.host, settings.port) == ("127.0.0.1", 18123)
    assert settings.store == (root / "bucket").resolve().as_uri()
    assert settings.key_prefix == "demo/"
    assert len(settings.key_pairs) == 1
    assert (root / DEMO_MARKER).is_file()
    out = capsys.readouterr().out
    assert "curl 'http://127.0.0.1:18123/v1/topics/orders/partitions/0/records?offset=0" in out
    assert "isolation_level=read_committed" in out
    # a second run recreates it
    first_key = (root / "keys" / "demo.pem").read_bytes()
    write_demo(root)
    assert (root / "keys" / "demo.pem").read_bytes() != first_key
    assert (root / DEMO_MARKER).is_file()


def test_demo_refuses_a_foreign_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    assert main(["demo", "--root", str(tmp_path)]) == 2
    assert "not deleting it" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_serve_preflight_names_bad_key_files_and_missing_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--store", (tmp_path / "missing").as_uri()]) == 2
    assert "no such folder" in capsys.readouterr().err
    spec = f"k={tmp_path / 'none.pem'}"
    assert main(["serve", "--store", tmp_path.as_uri(), "--key-pair", spec]) == 2
    assert "cannot read" in capsys.readouterr().err


TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [A-Z]+ [\w.]+: .*")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_serve_logs_in_one_format_with_the_request_id(
    demo: DemoBucket, tmp_path: Path, log_format: str
) -> None:
    """A real ``serve`` process: every line on stderr, uvicorn's included, is in the chosen
    format; the access line of a request names its ``X-Request-ID``; the start warns about the
    demo's encrypted topic when its key pair is not configured."""
    log_path = tmp_path / "serve.log"
    proc = spawn_serve(
        ["--store", demo.store_url, "--key-prefix", demo.key_prefix, "--port", "0",
         "--rescan-interval-s", "0", "--log-format", log_format],
        log_path,
    )  # fmt: skip
    try:
        base = f"http://{LOCALHOST}:{listening_port(proc)}"
        wait_ready(base, proc, log_path)
        r = httpx.get(f"{base}/v1/topics", headers={"X-Request-ID": "req-42"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "req-42"
    finally:
        stop(proc)
    lines = [line for line in log_path.read_text().splitlines() if line]
    assert len(lines) >= 3, lines
    if log_format == "json":
        entries = [json.loads(line) for line in lines]
        assert all({"ts", "level", "logger", "message"} <= e.keys() for e in entries), lines
        access = [
            e for e in entries if e["logger"] == "uvicorn.access" and "/v1/topics" in e["message"]
        ]
        assert [e.get("request_id") for e in access] == ["req-42"]
        messages = [e["message"] for e in entries if e["level"] == "WARNING"]
    else:
        assert all(TEXT_LINE.fullmatch(line) for line in lines), lines
        access = [line for line in lines if "uvicorn.access" in line and "/v1/topics" in line]
        assert len(access) == 1 and access[0].endswith("[request_id=req-42]")
        messages = [line for line in lines if " WARNING " in line]
    assert any("key pair id 'demo'" in m and "--key-pair demo=PATH" in m for m in messages)
