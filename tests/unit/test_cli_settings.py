"""Every command reads the settings ``serve`` reads: flag > ``TIERED_GATEWAY_*`` > ``--config``
file > default, through :func:`gateway.cli.main` on filesystem buckets in ``tmp_path``."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.cli import _parser, main
from gateway.commands.catalog import EXIT_EMPTY
from gateway.commands.common import apply_settings
from gateway.commands.export import add_arguments, reader_options
from gateway.errors import ConfigurationError
from gateway.kafka.demo import write_demo_segment

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
PREFIX = "t/"


@pytest.fixture(autouse=True)
def _no_outside_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tests' own environment only: no TIERED_GATEWAY_* of the shell running them."""
    for name in list(os.environ):
        if name.upper().startswith("TIERED_GATEWAY_"):
            monkeypatch.delenv(name)
    yield


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _config(path: Path, **values: str) -> Path:
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    return path


def _bucket(root: Path) -> str:
    root.mkdir(parents=True, exist_ok=True)
    return root.as_uri()


def _objects(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.fixture
def segment_dir(tmp_path: Path) -> Path:
    write_demo_segment(tmp_path / "seg")
    return tmp_path / "seg"


@pytest.fixture
def tiered(tmp_path: Path, segment_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A bucket with partition 0 of ``orders`` tiered under ``t/`` (all by flags)."""
    bucket = _bucket(tmp_path / "tiered")
    code, _, err = _run(
        capsys, "tier", str(segment_dir), "--store", bucket, "--key-prefix", PREFIX,
        "--topic", "orders", "--topic-id", TOPIC_ID, "--partition", "0", "--include-active",
    )  # fmt: skip
    assert code == 0, err
    return bucket


# --- tier ---------------------------------------------------------------------------------------


def _tier(capsys: pytest.CaptureFixture[str], segment_dir: Path, *extra: str) -> tuple[int, str]:
    code, out, err = _run(
        capsys, "tier", str(segment_dir), "--topic", "orders", "--topic-id", TOPIC_ID,
        "--partition", "0", "--include-active", *extra,
    )  # fmt: skip
    return code, out + err


def test_tier_takes_the_store_and_prefix_from_the_environment(
    tmp_path: Path, segment_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("TIERED_GATEWAY_STORE", _bucket(tmp_path / "env"))
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PREFIX", "from-env/")
    code, text = _tier(capsys, segment_dir)
    assert code == 0, text
    stored = _objects(tmp_path / "env")
    assert len(stored) == 3 and all(key.startswith("from-env/orders-") for key in stored)


def test_tier_takes_the_store_from_the_config_file(
    tmp_path: Path, segment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path / "gw.toml", store=_bucket(tmp_path / "file"), key_prefix="f/")
    code, text = _tier(capsys, segment_dir, "--config", str(config))
    assert code == 0, text
    stored = _objects(tmp_path / "file")
    assert len(stored) == 3 and all(key.startswith("f/orders-") for key in stored)


def test_tier_reads_the_file_named_by_tiered_gateway_config(
    tmp_path: Path, segment_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    config = _config(tmp_path / "gw.toml", store=_bucket(tmp_path / "file"))
    monkeypatch.setenv("TIERED_GATEWAY_CONFIG", str(config))
    code, text = _tier(capsys, segment_dir)
    assert code == 0, text
    assert len(_objects(tmp_path / "file")) == 3


def test_tier_flag_beats_environment_beats_file(
    tmp_path: Path, segment_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    flag, env, file = (tmp_path / name for name in ("flag", "env", "file"))
    config = _config(tmp_path / "gw.toml", store=_bucket(file), key_prefix="file/")
    monkeypatch.setenv("TIERED_GATEWAY_STORE", _bucket(env))
    # the environment's store beats the file's; the file's prefix stays (no flag, no variable)
    code, text = _tier(capsys, segment_dir, "--config", str(config))
    assert code == 0, text
    assert _objects(file) == []
    assert [key.split("/")[0] for key in _objects(env)] == ["file"] * 3
    # the flags beat both
    code, text = _tier(
        capsys, segment_dir, "--config", str(config), "--store", _bucket(flag), "--key-prefix", ""
    )
    assert code == 0, text
    assert len(_objects(flag)) == 3 and all(key.startswith("orders-") for key in _objects(flag))
    assert len(_objects(env)) == 3 and _objects(file) == []


def test_tier_without_a_store_anywhere_exits_2(
    segment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _tier(capsys, segment_dir)
    assert code == 2
    assert text == (
        "error: the following arguments are required: --store (or the environment variable "
        "TIERED_GATEWAY_STORE, or store in the --config file)\n"
    )


def test_a_bad_store_in_the_environment_names_the_setting(
    segment_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERED_GATEWAY_STORE", "file://relative/dir")
    code, text = _tier(capsys, segment_dir)
    assert code == 2
    assert text.startswith("error: invalid configuration: setting 'store' (--store, ")
    assert "TIERED_GATEWAY_STORE" in text and "file URLs take no host" in text


def test_an_unknown_key_in_the_config_file_is_an_error(
    tmp_path: Path, segment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path / "gw.toml", store=_bucket(tmp_path / "b"), key_prefx="t/")
    code, text = _tier(capsys, segment_dir, "--config", str(config))
    assert code == 2
    assert "unknown setting 'key_prefx'" in text and str(config) in text
    assert _objects(tmp_path / "b") == []


# --- catalog ------------------------------------------------------------------------------------


def _scan(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    return _run(capsys, "catalog", "scan", "--json", *extra)


def _partitions(out: str) -> list[tuple[str, int, int]]:
    return [(p["topic"], p["partition"], p["segments"]) for p in json.loads(out)["partitions"]]


def test_catalog_scan_reads_the_environment(
    tiered: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERED_GATEWAY_STORE", tiered)
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PREFIX", PREFIX)
    code, out, err = _scan(capsys)
    assert code == 0, err
    assert _partitions(out) == [("orders", 0, 1)]


def test_catalog_scan_reads_the_config_file(
    tiered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path / "gw.toml", store=tiered, key_prefix=PREFIX)
    code, out, err = _scan(capsys, "--config", str(config))
    assert code == 0, err
    assert _partitions(out) == [("orders", 0, 1)]


def test_catalog_scan_flag_beats_environment_beats_file(
    tiered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    empty = _bucket(tmp_path / "empty")
    config = _config(tmp_path / "gw.toml", store=empty, key_prefix=PREFIX)
    monkeypatch.setenv("TIERED_GATEWAY_STORE", tiered)  # beats the file's empty bucket
    code, out, err = _scan(capsys, "--config", str(config))
    assert code == 0, err
    assert _partitions(out) == [("orders", 0, 1)]
    code, out, err = _scan(capsys, "--config", str(config), "--store", empty)  # flag beats env
    assert code == EXIT_EMPTY
    assert _partitions(out) == []
    assert f"the folder {tmp_path / 'empty' / 't'} does not exist" in err


def test_catalog_scan_without_a_store_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _scan(capsys)
    assert (code, out) == (2, "")
    assert "required: --store (or the environment variable TIERED_GATEWAY_STORE" in err


def test_catalog_ls_takes_the_state_dir_from_the_environment(
    tiered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    state = tmp_path / "state"
    code, _, err = _run(
        capsys, "catalog", "scan", "--store", tiered, "--key-prefix", PREFIX,
        "--state-dir", str(state),
    )  # fmt: skip
    assert code == 0, err
    monkeypatch.setenv("TIERED_GATEWAY_STATE_DIR", str(state))  # ls needs no store then
    code, out, err = _run(
        capsys, "catalog", "ls", "--topic", "orders", "--partition", "0", "--json"
    )
    assert code == 0, err
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert (row["state"], row["start_offset"], row["end_offset"]) == (
        "COPY_SEGMENT_FINISHED",
        0,
        172,
    )


def test_catalog_ls_with_neither_store_nor_state_dir_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _run(capsys, "catalog", "ls", "--topic", "orders", "--partition", "0")
    assert code == 2
    assert "catalog ls needs --store (to scan) or --state-dir" in err


# --- scrub (its empty-scope check names the store and prefix it read, before Spark starts) ------


def _scrub_scope(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code, out, err = _run(capsys, "scrub", *extra)
    assert out == ""
    return code, err


def test_scrub_reads_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _bucket(tmp_path / "env")
    monkeypatch.setenv("TIERED_GATEWAY_STORE", env)
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PREFIX", "e/")
    code, err = _scrub_scope(capsys)
    assert code == 2
    assert f"under key prefix 'e/' of {env} " in err


def test_scrub_reads_the_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = _bucket(tmp_path / "file")
    config = _config(tmp_path / "gw.toml", store=file, key_prefix="f/")
    code, err = _scrub_scope(capsys, "--config", str(config))
    assert code == 2
    assert f"under key prefix 'f/' of {file} " in err


def test_scrub_flag_beats_environment_beats_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flag, env, file = (_bucket(tmp_path / name) for name in ("flag", "env", "file"))
    config = _config(tmp_path / "gw.toml", store=file, key_prefix="f/")
    monkeypatch.setenv("TIERED_GATEWAY_STORE", env)
    code, err = _scrub_scope(capsys, "--config", str(config))
    assert code == 2 and f"under key prefix 'f/' of {env} " in err
    code, err = _scrub_scope(capsys, "--config", str(config), "--store", flag)
    assert code == 2 and f"under key prefix 'f/' of {flag} " in err


def test_scrub_without_a_store_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _scrub_scope(capsys)
    assert code == 2
    assert "required: --store (or the environment variable TIERED_GATEWAY_STORE" in err


# --- the S3 options, key pairs and export's reader options ----------------------------------------


def _applied(*argv: str) -> dict[str, object]:
    args = _parser().parse_args(list(argv))
    apply_settings(args)
    return vars(args)


def test_the_s3_options_and_key_pairs_follow_the_same_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(
        tmp_path / "gw.toml",
        store="s3://file-bucket",
        s3_region="eu-west-1",
        s3_endpoint_url="http://f",
    )
    monkeypatch.setenv("TIERED_GATEWAY_S3_PATH_STYLE", "true")
    monkeypatch.setenv("TIERED_GATEWAY_S3_ENDPOINT_URL", "http://env")
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PAIRS", "a=/keys/a.pem,b=/keys/b.pem")
    base = ("scrub", "--config", str(config))
    args = _applied(*base)
    assert {k: args[k] for k in ("store", "s3_region", "s3_endpoint_url", "s3_path_style")} == {
        "store": "s3://file-bucket",
        "s3_region": "eu-west-1",
        "s3_endpoint_url": "http://env",
        "s3_path_style": True,
    }
    assert args["key_pair"] == ["a=/keys/a.pem", "b=/keys/b.pem"]
    args = _applied(*base, "--no-s3-path-style", "--key-pair", "c=/keys/c.pem")
    assert (args["s3_path_style"], args["key_pair"]) == (False, ["c=/keys/c.pem"])


def test_export_reads_the_shared_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path / "gw.toml", key_prefix="f/", state_dir=str(tmp_path / "cat"))
    monkeypatch.setenv("TIERED_GATEWAY_STORE", "s3://env-bucket")
    args = _parser().parse_args(
        ["export", "--config", str(config), "--topic", "orders", "--output", str(tmp_path / "o")]
    )
    apply_settings(args)
    opts = reader_options(args)
    assert (opts["store"], opts["keyPrefix"], opts["catalog"]) == (
        "s3://env-bucket",
        "f/",
        str(tmp_path / "cat"),
    )


def test_commands_without_store_options_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERED_GATEWAY_STORE", "file:///nowhere")
    args = _parser().parse_args(["dump", "x.log"])
    before = dict(vars(args))
    apply_settings(args)
    assert vars(args) == before


def test_export_under_spark_submit_can_read_them_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m gateway.commands.export`` parses with its own parser: apply_settings works
    on it the same (export.main calls it after parsing)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    monkeypatch.setenv("TIERED_GATEWAY_STORE", "s3://env-bucket")
    monkeypatch.setenv("TIERED_GATEWAY_S3_PATH_STYLE", "1")
    args = parser.parse_args(["--topic", "orders", "--output", str(tmp_path / "o")])
    apply_settings(args)
    opts = reader_options(args)
    assert (opts["store"], opts["keyPrefix"], opts["s3.pathStyle"]) == (
        "s3://env-bucket",
        "",
        "true",
    )
    monkeypatch.delenv("TIERED_GATEWAY_STORE")
    args = parser.parse_args(["--topic", "orders", "--output", str(tmp_path / "o")])
    with pytest.raises(ConfigurationError, match="required: --store"):
        apply_settings(args)
