"""What serve refuses to start with: anonymous reads off loopback, private keys others may read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import Settings
from gateway.errors import ConfigurationError
from gateway.security.startup import check_private_file, check_start


def _key(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "k.pem"
    path.write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    path.chmod(mode)
    return path


def test_loopback_anonymous_is_the_local_default() -> None:
    check_start(Settings(store="file:///x"))
    check_start(Settings(store="file:///x", host="::1"))


def test_off_loopback_needs_authentication_or_an_explicit_yes(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no authentication"):
        check_start(Settings(store="file:///x", host="0.0.0.0"))
    check_start(Settings(store="file:///x", host="0.0.0.0", allow_anonymous=True))
    acl = tmp_path / "acl"
    acl.write_text("")
    keys = tmp_path / "keys"
    keys.write_text("")
    check_start(Settings(store="file:///x", host="0.0.0.0", api_keys_file=keys, acl_file=acl))


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o660, 0o602, 0o620, 0o444])
def test_a_private_key_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = _key(tmp_path, mode)
    with pytest.raises(ConfigurationError, match="chmod 600") as caught:
        check_private_file(path)
    assert "PRIVATE KEY" not in str(caught.value)
    settings = Settings(store="file:///x", key_pairs=[f"k1={path}"])
    with pytest.raises(ConfigurationError, match="--allow-readable-keys"):
        check_start(settings)
    check_start(Settings(store="file:///x", key_pairs=[f"k1={path}"], allow_readable_keys=True))


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o440, 0o640])
def test_a_private_key_only_its_owner_reads_is_accepted(tmp_path: Path, mode: int) -> None:
    """0440 and 0640 with the file's group our own: a Kubernetes Secret under fsGroup."""
    path = _key(tmp_path, mode)
    os.chown(path, -1, os.getegid())
    check_start(Settings(store="file:///x", key_pairs=[f"k1={path}"]))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file another group")
def test_a_key_another_group_may_read_is_refused(tmp_path: Path) -> None:
    path = _key(tmp_path, 0o440)
    os.chown(path, -1, os.getegid() + 1)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        check_private_file(path)


def test_the_tls_key_is_checked_too(tmp_path: Path) -> None:
    key = _key(tmp_path, 0o644)
    cert = tmp_path / "c.pem"
    cert.write_text("")
    with pytest.raises(ConfigurationError, match=r"k\.pem"):
        check_start(Settings(store="file:///x", tls_certfile=cert, tls_keyfile=key))


def test_serve_says_it_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = _key(tmp_path, 0o644)
    assert main(["serve", "--store", tmp_path.as_uri(), "--key-pair", f"k1={key}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: private key file")
    assert "chmod 600" in err


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"jwt_issuer": "https://idp"}, "jwt_issuer and jwt_audience"),
        ({"jwt_issuer": "https://idp", "jwt_audience": "gw"}, "one of jwt_jwks_url"),
        ({"tls_certfile": "/c.pem"}, "tls_certfile and tls_keyfile"),
        ({"tls_client_ca": "/ca.pem"}, "needs TLS"),
        ({"api_keys_file": "/keys"}, "no acl_file"),
    ],
)
def test_inconsistent_security_settings(values: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(store="file:///x", **values)  # type: ignore[arg-type]
