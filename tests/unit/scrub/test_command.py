"""``tiered-gateway scrub`` usage errors exit 2 before any Spark starts (no Spark here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gateway.cli import main


def test_a_bad_store_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scrub", "--store", "foo://bucket"]) == 2
    assert "unsupported scheme" in capsys.readouterr().err


def test_an_existing_report_path_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["scrub", "--store", tmp_path.as_uri(), "--report", str(tmp_path)]
    assert main(args) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_missing_key_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["scrub", "--store", tmp_path.as_uri(), "--key-pair", f"k={tmp_path / 'none.pem'}"]
    assert main(args) == 2
    assert "none.pem" in capsys.readouterr().err


def test_without_pyspark_it_says_which_extra_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # import pyspark.sql fails
    assert main(["scrub", "--store", tmp_path.as_uri()]) == 2
    assert "tiered-gateway[spark]" in capsys.readouterr().err


def test_the_cli_imports_without_pyspark() -> None:
    import subprocess  # noqa: PLC0415

    code = "import sys, gateway.cli; assert 'pyspark' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
