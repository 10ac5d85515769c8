"""Settings: precedence flag > environment > TOML > default, messages that name the setting,
byte sizes, key pairs, the serve flags generated from the settings, docs for every setting."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

import pytest

from gateway.commands.serve import add_setting_flags, settings_from_args
from gateway.config import MiB, Settings, load_settings, parse_byte_size, settings_for
from gateway.errors import ConfigurationError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--config", type=Path)
    add_setting_flags(p)
    return p.parse_args(argv)


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    s = load_settings({"store": "file:///b"})
    assert (s.host, s.port, s.key_prefix, s.key_pairs) == ("127.0.0.1", 8080, "", [])
    assert s.rescan_interval_s == 60
    assert s.index_cache_bytes == s.chunk_cache_bytes == 256 * MiB
    assert s.max_get_bytes == 8 * MiB
    assert (s.request_timeout_ms, s.max_request_timeout_ms) == (30_000, 300_000)
    assert (s.default_max_bytes, s.max_response_bytes, s.stream_page_bytes) == (
        MiB,
        64 * MiB,
        MiB,
    )
    assert s.log_level == "info"
    assert s.threads >= 1
    assert s.loopback
    assert type(s) is Settings


def test_precedence_flag_over_env_over_toml_over_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _toml(tmp_path, 'store = "s3://from-toml"\nport = 1001\nhost = "::1"\n')
    s = settings_from_args(_parse(["--config", str(config)]))
    assert (s.store, s.port, s.host, s.key_prefix) == ("s3://from-toml", 1001, "::1", "")

    monkeypatch.setenv("TIERED_GATEWAY_PORT", "1002")
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PREFIX", "env/")
    s = settings_from_args(_parse(["--config", str(config)]))
    assert (s.store, s.port, s.host, s.key_prefix) == ("s3://from-toml", 1002, "::1", "env/")

    s = settings_from_args(_parse(["--config", str(config), "--port", "1003"]))
    assert (s.port, s.key_prefix) == (1003, "env/")
    assert s.loopback


def test_config_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _toml(tmp_path, '[tiered_gateway]\nstore = "file:///x"\nlog_level = "DEBUG"\n')
    monkeypatch.setenv("TIERED_GATEWAY_CONFIG", str(config))
    s = load_settings()
    assert (s.store, s.log_level) == ("file:///x", "debug")


def test_flags_not_given_stay_unset() -> None:
    args = _parse([])
    assert not {k for k in vars(args) if k in Settings.model_fields}


def test_every_setting_has_a_flag() -> None:
    args = _parse(
        [
            "--store=file:///x",
            "--key-pair",
            "a=/k/a.pem",
            "--key-pair",
            "b=/k/b.pem",
            "--s3-path-style",
            "--index-cache-bytes",
            "1GiB",
            "--threads",
            "3",
        ]
    )
    s = settings_from_args(args)
    assert s.key_pairs == ["a=/k/a.pem", "b=/k/b.pem"]
    assert s.s3_path_style is True
    assert s.index_cache_bytes == 1024 * MiB
    assert s.threads == 3
    assert not settings_from_args(_parse(["--store=file:///x", "--no-s3-path-style"])).s3_path_style


def test_key_pairs_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PAIRS", "a=/k/a.pem, b=/k/b.pem")
    assert load_settings({"store": "file:///x"}).key_pairs == ["a=/k/a.pem", "b=/k/b.pem"]
    monkeypatch.setenv("TIERED_GATEWAY_KEY_PAIRS", '["c=/k/with,comma.pem"]')
    assert load_settings({"store": "file:///x"}).key_pairs == ["c=/k/with,comma.pem"]


@pytest.mark.parametrize(
    ("text", "size"),
    [("1", 1), ("256MiB", 256 * MiB), ("8 MiB", 8 * MiB), ("1.5KiB", 1536), ("2kb", 2000)],
)
def test_byte_sizes(text: str, size: int) -> None:
    assert parse_byte_size(text) == size


@pytest.mark.parametrize("text", ["MiB", "1.2B", "12 parsecs", "-1MiB"])
def test_bad_byte_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_byte_size(text)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({}, "'store' (--store, TIERED_GATEWAY_STORE, store in the TOML file): Field required"),
        ({"store": "http://x"}, "'store'"),
        ({"store": "file:///x", "port": "70000"}, "'port' (--port, TIERED_GATEWAY_PORT"),
        ({"store": "file:///x", "port": "eighty"}, "'port'"),
        ({"store": "file:///x", "max_get_bytes": "12 parsecs"}, "'max_get_bytes'"),
        ({"store": "file:///x", "log_level": "loud"}, "'log_level'"),
        ({"store": "file:///x", "key_pairs": ["nope"]}, "'key_pairs' (--key-pair"),
        ({"store": "file:///x", "key_pairs": ["a=/x", "a=/y"]}, "given twice"),
        ({"store": "file:///x", "request_timeout_ms": "400000"}, "request_timeout_ms (400000)"),
        ({"store": "file:///x", "default_max_bytes": "1GiB"}, "default_max_bytes"),
        ({"store": "file:///x", "threads": "0"}, "'threads'"),
    ],
)
def test_bad_settings_are_named(overrides: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_settings(overrides)
    assert named in str(info.value)


def test_bad_environment_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERED_GATEWAY_RESCAN_INTERVAL_S", "soon")
    with pytest.raises(ConfigurationError, match="TIERED_GATEWAY_RESCAN_INTERVAL_S"):
        load_settings({"store": "file:///x"})


def test_key_material_is_not_echoed() -> None:
    pem = "k=-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"
    with pytest.raises(ConfigurationError) as info:
        load_settings({"store": "file:///x", "key_pairs": [pem]})
    assert "MIIEvQ" not in str(info.value)


def test_toml_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown setting 'prot'"):
        load_settings({}, _toml(tmp_path, 'store = "file:///x"\nprot = 1\n'))
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        load_settings({}, _toml(tmp_path, "store = \n"))
    with pytest.raises(ConfigurationError, match="cannot read it"):
        load_settings({}, tmp_path / "missing.toml")
    with pytest.raises(ConfigurationError, match=r"'port'.*config file"):
        load_settings({}, _toml(tmp_path, 'store = "file:///x"\nport = -1\n'))


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("gateway.example", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert load_settings({"store": "file:///x", "host": host}).loopback is loopback


def test_every_setting_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert f"`{name}`" in text, name
        assert f"TIERED_GATEWAY_{name.upper()}" in text, name


def test_open_service_takes_the_settings_type() -> None:
    """One settings type: the service opens from ``gateway.config.Settings`` itself."""
    from gateway.service.open import open_service  # noqa: PLC0415

    hints = typing.get_type_hints(open_service)
    assert hints["settings"] is Settings


def test_log_format_is_a_setting() -> None:
    assert load_settings({"store": "file:///x"}).log_format == "text"
    assert load_settings({"store": "file:///x", "log_format": "json"}).log_format == "json"
    with pytest.raises(ConfigurationError, match="'log_format'"):
        load_settings({"store": "file:///x", "log_format": "xml"})


def test_s3_data_plane_and_retry_delay_settings() -> None:
    s = settings_from_args(
        _parse(["--store=s3://b", "--s3-data-plane", "httpx", "--retry-max-delay-s", "0.5"])
    )
    assert s.s3_data_plane == "httpx" and s.retry_policy().max_delay == 0.5
    assert settings_from_args(_parse(["--store=s3://b"])).s3_data_plane == "aiohttp"
    with pytest.raises(ConfigurationError, match="s3_data_plane"):
        settings_for(store="s3://b", s3_data_plane="curl")
