"""``tiered-gateway api-key``: the key it prints is the one its line admits."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.security.apikeys import ApiKeys


def test_the_printed_key_authenticates_with_the_appended_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys"
    assert main(["api-key", "User:ci", "--append", str(keys)]) == 0
    assert main(["api-key", "User:nightly", "--append", str(keys)]) == 0
    out = capsys.readouterr().out.splitlines()
    printed = [line.rsplit(" ", 1)[1] for line in out if line.startswith("key ")]
    loaded = ApiKeys.load(keys)
    assert [loaded.authenticate(k) for k in printed] == ["User:ci", "User:nightly"]
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert printed[0] not in keys.read_text()


def test_without_a_file_it_prints_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["api-key", "User:ci"]) == 0
    out = capsys.readouterr().out
    line = out.splitlines()[0].removeprefix("line for the api_keys_file: ")
    key = out.splitlines()[1].rsplit(" ", 1)[1]
    assert ApiKeys.parse(line + "\n").authenticate(key) == "User:ci"


def test_a_bad_principal_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["api-key", "ci"]) == 2
    assert "Type:name" in capsys.readouterr().err
