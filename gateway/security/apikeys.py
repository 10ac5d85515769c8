"""Static API keys for scripts, stored hashed.

The key file has one ``<principal> sha256:<hex>`` line per key (``#`` starts a comment; blank
lines are skipped), e.g. ``User:nightly-export sha256:9f86d0…``. A principal may hold several
keys (rotation); one key may not belong to two principals.

Why plain SHA-256 and not a password hash (bcrypt, scrypt, argon2): the keys are not chosen by
people but made by :func:`new_key` from 256 random bits. A slow hash protects low-entropy
secrets from guessing after the file leaks; a 256-bit secret cannot be guessed at any speed,
so the slowness would only cost CPU on every request (and a slow hash cannot be looked up by
digest, see below).

Why a dict lookup by digest is not a timing oracle: the lookup compares SHA-256 digests of
what the client sent, not the key itself. What timing could leak is how many leading bytes of
*the digest of the attacker's guess* match a stored digest; to use that, an attacker would have
to choose inputs whose digests share a prefix with the stored one, which gets him no closer to
the key (preimage resistance), and the key has 256 bits of entropy to begin with. Comparing
against every entry with :func:`hmac.compare_digest` would add O(keys) work per request and no
security.

Revoking a key is deleting its line: :class:`ApiKeyFile` reloads the file when it changes (at
most a second later, as the ACL file), so the next request with that key is refused, over HTTP
and on a new Kafka connection; a Kafka connection already authenticated with it is refused at
its next re-authentication (``kafka_reauth_ms``). An edit that does not parse, or a removed
file, keeps the previous keys in force and is logged.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import AuthenticationError, ConfigurationError
from gateway.security.watched import WatchedFile

KEY_PREFIX = "tgk_"  # marks a tiered-gateway key (for secret scanners, and to tell it from a JWT)
_MAX_KEY_CHARS = 512
_LINE = re.compile(r"(?P<principal>[A-Za-z][A-Za-z0-9_-]*:\S+)\s+sha256:(?P<hex>[0-9a-f]{64})")


def hash_key(key: str) -> str:
    """The key file's hash field for ``key``: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh key (``tgk_`` and 256 random bits, URL-safe base64) and its hash field, for a
    CLI to print: the key goes to the client once, the hash into the key file."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key)


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """The loaded key file: principal by SHA-256 digest."""

    by_digest: Mapping[bytes, str]

    @classmethod
    def load(cls, path: Path) -> ApiKeys:
        """Read a key file; an unreadable file or a bad line -> ConfigurationError."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read API key file {path}: {exc}") from exc
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "<api keys>") -> ApiKeys:
        """Parse key file text; a bad line -> ConfigurationError naming ``source`` and the line
        number (never the line: it might be a pasted key)."""
        by_digest: dict[bytes, str] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            match = _LINE.fullmatch(line)
            if match is None:
                raise ConfigurationError(
                    f"{source} line {number}: expected '<type>:<name> sha256:<64 lowercase hex>'"
                )
            digest = bytes.fromhex(match["hex"])
            if digest in by_digest:
                raise ConfigurationError(f"{source} line {number}: the same key is listed twice")
            by_digest[digest] = match["principal"]
        return cls(by_digest)

    def authenticate(self, presented: str) -> str:
        """The principal whose key ``presented`` is; unknown, empty or oversized -> 401."""
        if not presented:
            raise AuthenticationError("missing API key")
        if len(presented) > _MAX_KEY_CHARS:
            raise AuthenticationError("malformed API key")
        principal = self.by_digest.get(hashlib.sha256(presented.encode()).digest())
        if principal is None:
            raise AuthenticationError("unknown API key")
        return principal

    def __len__(self) -> int:
        """How many keys (not principals) the file holds."""
        return len(self.by_digest)


class ApiKeyFile(WatchedFile[ApiKeys]):
    """The ``api_keys_file``, re-read when it changes, without a restart (a
    :class:`~gateway.security.watched.WatchedFile`): a change that parses replaces the keys
    whole, so a removed key is refused from the next check on; a bad edit, a removed or
    unreadable file keeps the previous keys in force, logged, in :attr:`last_error` and
    :attr:`failed_reloads`. At start the same problems raise :class:`ConfigurationError`."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        check_every_s: float = 1.0,
    ) -> None:
        super().__init__(
            path,
            ApiKeys.parse,
            what="API key file",
            noun="API keys",
            clock=clock,
            check_every_s=check_every_s,
        )

    def authenticate(self, presented: str) -> str:
        """:meth:`ApiKeys.authenticate` against the keys in force (reloaded first if due)."""
        return self.current().authenticate(presented)
