"""Static API keys: the key file, lookups and new keys."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gateway.errors import AuthenticationError, ConfigurationError
from gateway.security.apikeys import KEY_PREFIX, ApiKeys, hash_key, new_key


def test_new_key_round_trips_through_the_key_file(tmp_path: Path) -> None:
    key, line_hash = new_key()
    other_key, other_hash = new_key()
    path = tmp_path / "keys"
    path.write_text(
        f"# scripts\n\nUser:nightly-export {line_hash}  # rotated 2026-11\n"
        f"User:auditor {other_hash}\n",
        encoding="utf-8",
    )
    keys = ApiKeys.load(path)
    assert keys.authenticate(key) == "User:nightly-export"
    assert keys.authenticate(other_key) == "User:auditor"


def test_new_key_shape() -> None:
    key, line_hash = new_key()
    assert key.startswith(KEY_PREFIX)
    assert len(key) == len(KEY_PREFIX) + 43  # 32 random bytes, URL-safe base64, no padding
    assert line_hash == "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    assert new_key()[0] != key


def test_hash_key_is_sha256_hex() -> None:
    assert hash_key("abc") == (
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_unknown_key_is_401() -> None:
    keys = ApiKeys.parse(f"User:a {hash_key('right')}\n")
    with pytest.raises(AuthenticationError, match="unknown API key"):
        keys.authenticate("wrong")
    with pytest.raises(AuthenticationError, match="missing API key"):
        keys.authenticate("")
    with pytest.raises(AuthenticationError, match="malformed API key"):
        keys.authenticate("x" * 513)


def test_the_error_never_contains_the_key() -> None:
    keys = ApiKeys.parse("")
    with pytest.raises(AuthenticationError) as raised:
        keys.authenticate("tgk_secret-value")
    assert "secret-value" not in str(raised.value)


def test_a_principal_may_hold_several_keys() -> None:
    keys = ApiKeys.parse(f"User:a {hash_key('one')}\nUser:a {hash_key('two')}\n")
    assert keys.authenticate("one") == keys.authenticate("two") == "User:a"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("User:a sha256:abc\n", 1),  # short digest
        ("# ok\nUser:a\n", 2),  # no hash
        ("\n\nalice " + hash_key("k") + "\n", 3),  # principal without a type
        ("User:a " + hash_key("k").replace("sha256", "md5") + "\n", 1),
        ("User:a " + hash_key("k").upper() + "\n", 1),
        ("User:a " + hash_key("k") + " extra\n", 1),
    ],
)
def test_bad_line_names_the_line_number(text: str, line: int) -> None:
    with pytest.raises(ConfigurationError, match=f"line {line}:"):
        ApiKeys.parse(text, "keys.txt")


def test_bad_line_message_does_not_echo_the_line() -> None:
    with pytest.raises(ConfigurationError) as raised:
        ApiKeys.parse("tgk_pasted-key-by-mistake\n")
    assert "pasted" not in str(raised.value)


def test_the_same_key_for_two_principals_is_refused() -> None:
    digest = hash_key("shared")
    with pytest.raises(ConfigurationError, match="line 2: the same key is listed twice"):
        ApiKeys.parse(f"User:a {digest}\nUser:b {digest}\n")


def test_unreadable_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read API key file"):
        ApiKeys.load(tmp_path / "missing")
