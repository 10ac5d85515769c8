"""Static API keys: the key file, lookups and new keys, and the file reloaded on change."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path

import pytest

from gateway.config import Settings
from gateway.errors import AuthenticationError, ConfigurationError
from gateway.security.access import Access, Credentials, access_for
from gateway.security.apikeys import KEY_PREFIX, ApiKeyFile, ApiKeys, hash_key, new_key
from tests.unit.security.test_acl import Clock, write


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


# --- the file, reloaded on change (the ACL file's watcher, gateway.security.watched) ----------


def keys_file(path: Path, keys: dict[str, str], mtime_ns: int, extra: str = "") -> None:
    """Write ``keys`` (principal by key) as a key file, with a distinct mtime."""
    write(path, "".join(f"{p} {hash_key(k)}\n" for p, k in keys.items()) + extra, mtime_ns)


def principal(f: ApiKeyFile, key: str) -> str | None:
    """Whom ``key`` authenticates through ``f`` now; None when it is refused as unknown."""
    try:
        return f.authenticate(key)
    except AuthenticationError as exc:
        assert str(exc) == "unknown API key"  # the usual 401, nothing else
        return None


def test_a_removed_key_is_refused_from_the_next_check_on(tmp_path: Path) -> None:
    path, clock = tmp_path / "keys", Clock()
    keys_file(path, {"User:a": "key-a", "User:b": "key-b"}, 1_000_000_000)
    f = ApiKeyFile(path, clock=clock, check_every_s=5.0)
    assert principal(f, "key-a") == "User:a" and principal(f, "key-b") == "User:b"
    keys_file(path, {"User:a": "key-a", "User:c": "key-c"}, 2_000_000_000)
    clock.now += 4.9
    assert principal(f, "key-b") == "User:b" and f.reloads == 0  # not due yet
    clock.now += 0.1
    assert principal(f, "key-b") is None  # revoked
    assert principal(f, "key-a") == "User:a"  # kept
    assert principal(f, "key-c") == "User:c"  # added
    assert f.reloads == 1 and f.failed_reloads == 0 and f.last_error is None
    assert len(f.current()) == 2
    clock.now += 5
    f.current()
    assert f.reloads == 1  # unchanged: not read again


def test_a_key_file_renamed_over_the_old_one_is_reloaded(tmp_path: Path) -> None:
    path, clock = tmp_path / "keys", Clock()
    keys_file(path, {"User:a": "key-a"}, 1_000_000_000)
    f = ApiKeyFile(path, clock=clock)
    staged = tmp_path / "keys.new"
    keys_file(staged, {"User:a": "key-A"}, 1_000_000_000)  # same size and mtime: a new inode
    staged.replace(path)
    clock.now += 1
    assert principal(f, "key-a") is None and principal(f, "key-A") == "User:a"
    assert f.reloads == 1


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (f"User:b {hash_key('key-b')}\ntgk_pasted-key\n", "line 2: expected"),  # a bad line
        (f"User:b {hash_key('key-b')}\nUser:c {hash_key('key-b')}\n", "line 2: the same key"),
        ("User:b sha256:" + "0" * 30 + "\n", "line 1: expected"),  # half written
        ("# \xff\n".encode("latin-1"), "not UTF-8"),
    ],
)
def test_a_bad_change_keeps_the_previous_keys(tmp_path: Path, bad: str | bytes, error: str) -> None:
    path, clock = tmp_path / "keys", Clock()
    keys_file(path, {"User:a": "key-a"}, 1_000_000_000)
    f = ApiKeyFile(path, clock=clock)
    if isinstance(bad, bytes):
        path.write_bytes(bad)
    else:
        path.write_text(bad)
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    clock.now += 1
    assert principal(f, "key-a") == "User:a" and principal(f, "key-b") is None
    assert f.failed_reloads == 1 and f.reloads == 0
    assert f.last_error is not None and error in f.last_error and str(path) in f.last_error
    assert "pasted" not in f.last_error
    clock.now += 1
    assert principal(f, "key-a") == "User:a" and f.failed_reloads == 1  # not counted again
    keys_file(path, {"User:b": "key-b"}, 3_000_000_000)
    clock.now += 1
    assert principal(f, "key-a") is None and principal(f, "key-b") == "User:b"
    assert f.reloads == 1 and f.last_error is None


def test_a_removed_or_unreadable_file_keeps_the_previous_keys_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock = tmp_path / "keys", Clock()
    keys_file(path, {"User:a": "key-a"}, 1_000_000_000)
    f = ApiKeyFile(path, clock=clock)
    path.unlink()
    clock.now += 1
    with caplog.at_level(logging.ERROR, logger="gateway.security.watched"):
        assert principal(f, "key-a") == "User:a"
    assert f.failed_reloads == 1 and f.last_error is not None
    assert f"API key file {path} cannot be read" in f.last_error
    assert "the previous API keys stay in force" in caplog.text
    clock.now += 1
    assert principal(f, "key-a") == "User:a" and f.failed_reloads == 1
    path.mkdir()  # there, but not a file that can be read (the tests run as root: no chmod)
    clock.now += 1
    assert principal(f, "key-a") == "User:a" and f.failed_reloads == 2
    assert "cannot be read" in f.last_error
    path.rmdir()
    keys_file(path, {"User:b": "key-b"}, 2_000_000_000)
    clock.now += 1
    assert principal(f, "key-a") is None and principal(f, "key-b") == "User:b"
    assert f.reloads == 1 and f.last_error is None


def test_an_emptied_file_revokes_every_key_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Revoking the last key must be possible; it is fail closed, and never silent."""
    path, clock = tmp_path / "keys", Clock()
    keys_file(path, {"User:a": "key-a"}, 1_000_000_000)
    f = ApiKeyFile(path, clock=clock)
    write(path, "# every key revoked 2026-11-23\n", 2_000_000_000)
    clock.now += 1
    with caplog.at_level(logging.WARNING, logger="gateway.security.watched"):
        assert principal(f, "key-a") is None
    assert f.reloads == 1 and len(f.current()) == 0
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "now holds no API keys" in caplog.text


def test_a_key_file_missing_or_bad_at_start_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"API key file .*keys cannot be read"):
        ApiKeyFile(tmp_path / "keys")
    (tmp_path / "keys").write_text("User:a sha256:00\n")
    with pytest.raises(ConfigurationError, match="line 1: expected"):
        ApiKeyFile(tmp_path / "keys")


def test_access_refuses_a_removed_key_with_the_usual_401(tmp_path: Path) -> None:
    """Through :class:`Access`, as HTTP's ``X-API-Key`` and SASL/PLAIN's password ask it."""
    path, clock = tmp_path / "keys", Clock()
    keys_file(path, {"User:a": "key-a", "User:b": "key-b"}, 1_000_000_000)
    access = Access(api_keys=ApiKeyFile(path, clock=clock))

    async def who(key: str) -> str:
        return await access.authenticate(Credentials(host="10.0.0.1", api_key=key))

    assert asyncio.run(who("key-b")) == "User:b"
    keys_file(path, {"User:a": "key-a"}, 2_000_000_000)
    clock.now += 1
    with pytest.raises(AuthenticationError, match=r"^unknown API key$"):
        asyncio.run(who("key-b"))
    assert asyncio.run(who("key-a")) == "User:a"


def test_access_for_watches_the_configured_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    keys_file(path, {"User:a": "key-a"}, 1_000_000_000)
    (tmp_path / "acl").write_text("")
    access = access_for(Settings(store="file:///x", api_keys_file=path, acl_file=tmp_path / "acl"))
    api_keys = access._api_keys  # which watcher it built
    assert isinstance(api_keys, ApiKeyFile) and api_keys.path == path
