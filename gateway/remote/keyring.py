"""RSA key pairs by id: wrapping and unwrapping of segment data keys (key-encryption keys).

Mirrors the plugin's ``security/RsaEncryptionProvider``, ``security/RsaKeyReader`` and
``security/EncryptedDataKey`` (format spec ``aiven-remote-format.md`` §2.3, §5.2-§5.4).

* Wrapping: RSA-OAEP with **SHA3-512** as the OAEP digest **and** as the MGF1 digest, empty
  label (BouncyCastle's ``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding``). The wrapped key is as
  long as the modulus (256 bytes for RSA-2048). OAEP overhead is 2·64 + 2 = 130 bytes, so a
  32-byte key needs a modulus of at least 162 bytes; smaller keys are refused at load time.
  ``cryptography`` refuses OAEP with SHA3, hence PyCryptodome here.
* The manifest's ``dataKey`` is ``<keyId>:<base64(wrapped)>``; the key id selects the pair, so
  segments wrapped by a retired key stay readable while that pair is in the ring (rotation).
* Key files are PEM (the label is ignored, as BouncyCastle's ``PemReader`` does): DER
  PKCS#8 ``PrivateKeyInfo`` (the public key is derived from it) or, for a writer that never
  reads, DER X.509 ``SubjectPublicKeyInfo``. PKCS#1 ``RSA PRIVATE KEY`` files and encrypted
  keys are refused, as the plugin refuses them.
* Configuration specs are ``ID=PATH``; ids must not contain ``:`` (the ``dataKey``
  separator), ``,`` (a config list separator), ``=`` or whitespace.

Errors: a bad spec, key file or unknown key id is :class:`~gateway.errors.ConfigurationError`;
a wrapped key of the wrong length or that unwraps to something other than a 32-byte AES key is
:class:`~gateway.errors.CorruptManifestError`; an OAEP decoding failure (tampered wrapped key,
or a different key than the one it was wrapped with) is :class:`~gateway.errors.IntegrityError`.
No message, ``repr`` or ``str`` shows key material.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from Crypto.Cipher import PKCS1_OAEP
from Crypto.Hash import SHA3_512
from Crypto.IO import PKCS8
from Crypto.PublicKey import RSA
from Crypto.Signature.pss import MGF1
from Crypto.Util.asn1 import DerObjectId, DerSequence

from gateway.errors import (
    ConfigurationError,
    CorruptManifestError,
    IntegrityError,
    KeyNotConfiguredError,
)

#: Size of the AES-256 data keys that are wrapped.
DATA_KEY_SIZE: Final = 32
_OAEP_OVERHEAD: Final = 2 * SHA3_512.digest_size + 2
#: The smallest modulus (bytes) that can wrap a data key with OAEP-SHA3-512.
MIN_MODULUS_BYTES: Final = DATA_KEY_SIZE + _OAEP_OVERHEAD
_RSA_ENCRYPTION_OID: Final = "1.2.840.113549.1.1.1"
_MAX_KEY_FILE: Final = 1024 * 1024
_MAX_SPEC_SHOWN: Final = 4096

_KEY_ID = re.compile(r"[^\s:,=]+")
_PEM = re.compile(
    r"-----BEGIN ([^\r\n-]*)-----\r?\n(.*?)-----END \1-----",
    re.DOTALL,
)


def _mgf1_sha3_512(seed: bytes, length: int) -> bytes:
    return MGF1(seed, length, SHA3_512)


def _oaep(key: RSA.RsaKey) -> PKCS1_OAEP.PKCS1OAEP_Cipher:
    return PKCS1_OAEP.new(key, hashAlgo=SHA3_512, mgfunc=_mgf1_sha3_512)


def _pem_body(text: bytes, source: str) -> bytes:
    """DER bytes of the first PEM block; the label text is ignored."""
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{source}: not a PEM file (non-ASCII content)") from exc
    match = _PEM.search(decoded)
    if match is None:
        raise ConfigurationError(f"{source}: no PEM-encoded block found")
    body = match.group(2)
    if ":" in body:
        raise ConfigurationError(
            f"{source}: PEM block has headers (an encrypted legacy PEM key?); "
            "only unencrypted PKCS#8 or SubjectPublicKeyInfo keys are supported"
        )
    try:
        return base64.b64decode("".join(body.split()), validate=True)
    except binascii.Error as exc:
        raise ConfigurationError(f"{source}: PEM body is not valid Base64") from exc


def _parse_der(der: bytes, source: str) -> RSA.RsaKey:
    """A PKCS#8 RSA private key or an X.509 SubjectPublicKeyInfo RSA public key."""
    try:
        outer = DerSequence().decode(der)
    except (ValueError, IndexError, TypeError) as exc:
        raise ConfigurationError(f"{source}: PEM content is not a DER sequence") from exc
    if outer.hasOnlyInts():
        kind = "PKCS#1 RSAPrivateKey" if len(outer) == 9 else "PKCS#1 RSAPublicKey"
        raise ConfigurationError(
            f"{source}: {kind} is not supported; convert it to PKCS#8 "
            "(openssl pkcs8 -topk8 -nocrypt) or SubjectPublicKeyInfo (openssl rsa -pubout)"
        )
    if len(outer) == 2 and isinstance(outer[1], bytes) and outer[1][:1] == b"\x04":
        raise ConfigurationError(
            f"{source}: encrypted PKCS#8 private keys are not supported; decrypt it "
            "(openssl pkcs8 -topk8 -nocrypt)"
        )
    oid: str | None = None
    try:
        if len(outer) == 2:  # SubjectPublicKeyInfo: SEQUENCE { algorithm, BIT STRING }
            algorithm = DerSequence().decode(outer[0])
            oid = DerObjectId().decode(algorithm[0]).value
        else:  # PrivateKeyInfo: SEQUENCE { version, algorithm, OCTET STRING, ... }
            oid = PKCS8.unwrap(der)[0]
    except (ValueError, IndexError, TypeError) as exc:
        # PyCryptodome's PassphraseRequiredError is a ValueError.
        raise ConfigurationError(
            f"{source}: not an unencrypted PKCS#8 private key or SubjectPublicKeyInfo public key"
        ) from exc
    if oid != _RSA_ENCRYPTION_OID:
        raise ConfigurationError(f"{source}: not an RSA key (algorithm {oid})")
    try:
        return RSA.import_key(der)
    except (ValueError, IndexError, TypeError) as exc:
        raise ConfigurationError(f"{source}: the RSA key does not parse") from exc


@dataclass(frozen=True, slots=True, eq=False)
class KeyPair:
    """One key-encryption key: a public key and, unless writer-only, its private key."""

    key_id: str
    _public: RSA.RsaKey = field(repr=False, compare=False)
    _private: RSA.RsaKey | None = field(repr=False, compare=False)

    @classmethod
    def from_pem(cls, key_id: str, pem: bytes, source: str = "key") -> KeyPair:
        """Parse a PEM key; ``source`` names it in error messages (e.g. the file path)."""
        key = _parse_der(_pem_body(pem, source), source)
        private = key if key.has_private() else None
        pair = cls(key_id, key.public_key(), private)
        if pair.modulus_bytes < MIN_MODULUS_BYTES:
            raise ConfigurationError(
                f"{source}: RSA key of {key.size_in_bits()} bits is too small for OAEP with "
                f"SHA3-512 (at least {MIN_MODULUS_BYTES * 8} bits; 2048 or more recommended)"
            )
        return pair

    @property
    def bits(self) -> int:
        return int(self._public.size_in_bits())

    @property
    def modulus_bytes(self) -> int:
        return int(self._public.size_in_bytes())

    @property
    def has_private(self) -> bool:
        """Whether this pair can unwrap (a reader needs it; a writer only wraps)."""
        return self._private is not None

    def wrap(self, data_key: bytes) -> bytes:
        """RSA-OAEP(SHA3-512, MGF1-SHA3-512) ciphertext of a 32-byte data key."""
        if len(data_key) != DATA_KEY_SIZE:
            raise ValueError(f"data key must be {DATA_KEY_SIZE} bytes, got {len(data_key)}")
        return bytes(_oaep(self._public).encrypt(data_key))

    def unwrap(self, wrapped: bytes) -> bytes:
        """The 32-byte data key inside ``wrapped``."""
        if self._private is None:
            raise ConfigurationError(
                f"key pair {self.key_id!r} has no private key: it cannot unwrap data keys"
            )
        if len(wrapped) != self.modulus_bytes:
            raise CorruptManifestError(
                f"wrapped data key for key pair {self.key_id!r} is {len(wrapped)} bytes, "
                f"expected {self.modulus_bytes} (the {self.bits}-bit modulus length)"
            )
        try:
            data_key = bytes(_oaep(self._private).decrypt(wrapped))
        except (ValueError, TypeError) as exc:
            raise IntegrityError(
                f"wrapped data key does not unwrap with key pair {self.key_id!r} "
                "(tampered, or wrapped by a different key)"
            ) from exc
        if len(data_key) != DATA_KEY_SIZE:
            raise CorruptManifestError(
                f"wrapped data key for key pair {self.key_id!r} holds {len(data_key)} bytes, "
                f"not a {DATA_KEY_SIZE}-byte AES key"
            )
        return data_key

    def __repr__(self) -> str:
        kind = "private" if self.has_private else "public-only"
        return f"KeyPair({self.key_id!r}, {self.bits} bits, {kind})"

    __str__ = __repr__


def _spec_label(spec: str) -> str:
    """The spec for an error message, unless it looks like key material pasted for a path."""
    if "-----" in spec or "\n" in spec or len(spec) > _MAX_SPEC_SHOWN:
        key_id = spec.partition("=")[0]
        shown = repr(key_id) if _KEY_ID.fullmatch(key_id) else "<hidden>"
        return f"with id {shown} (value hidden: it looks like key material, not ID=PATH)"
    return repr(spec)


def parse_spec(spec: str) -> tuple[str, Path]:
    """Split one ``ID=PATH`` spec strictly."""
    key_id, sep, path = spec.partition("=")
    if "-----" in path or "\n" in path:
        raise ConfigurationError(
            f"key pair spec {_spec_label(spec)}: PATH must be a file path, not the key itself"
        )
    if not sep or not path or not key_id:
        raise ConfigurationError(f"key pair spec {_spec_label(spec)} is not of the form ID=PATH")
    if _KEY_ID.fullmatch(key_id) is None:
        raise ConfigurationError(
            f"key pair spec {_spec_label(spec)}: the id must be non-empty and contain no ':', "
            "',', '=' or whitespace"
        )
    if path != path.strip():
        raise ConfigurationError(
            f"key pair spec {_spec_label(spec)}: the path has surrounding whitespace"
        )
    return key_id, Path(path)


def _read_key_file(spec: str, key_id: str, path: Path) -> KeyPair:
    source = f"key pair {key_id!r} ({path})"
    try:
        with path.open("rb") as f:
            pem = f.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationError(
            f"key pair spec {_spec_label(spec)}: cannot read {path}: {reason}"
        ) from exc
    if len(pem) > _MAX_KEY_FILE:
        raise ConfigurationError(f"{source}: larger than {_MAX_KEY_FILE} bytes, not a key file")
    return KeyPair.from_pem(key_id, pem, source)


class KeyRing:
    """Key pairs by id; the id in a manifest's ``dataKey`` selects the pair that unwraps it."""

    __slots__ = ("_pairs",)

    def __init__(self, pairs: Iterable[KeyPair] = ()) -> None:
        by_id: dict[str, KeyPair] = {}
        for pair in pairs:
            if pair.key_id in by_id:
                raise ConfigurationError(f"key pair id {pair.key_id!r} is given twice")
            by_id[pair.key_id] = pair
        self._pairs: Final = by_id

    @classmethod
    def from_specs(cls, specs: Iterable[str]) -> KeyRing:
        """Load ``ID=PATH`` specs (PATH: PKCS#8 private key PEM, or SPKI public key PEM)."""
        pairs: list[KeyPair] = []
        for spec in specs:
            key_id, path = parse_spec(spec)
            pairs.append(_read_key_file(spec, key_id, path))
        return cls(pairs)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __iter__(self) -> Iterator[KeyPair]:
        return iter(self._pairs.values())

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._pairs

    def pair(self, key_id: str) -> KeyPair:
        try:
            return self._pairs[key_id]
        except KeyError as exc:
            known = ", ".join(repr(k) for k in self._pairs) or "none"
            raise KeyNotConfiguredError(
                f"unknown key pair id {key_id!r} (configured: {known}): add "
                f"--key-pair {key_id}=PATH (its private key PEM) and restart"
            ) from exc

    def wrap(self, key_id: str, data_key: bytes) -> bytes:
        return self.pair(key_id).wrap(data_key)

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        return self.pair(key_id).unwrap(wrapped)

    def __repr__(self) -> str:
        return f"KeyRing({list(self._pairs.values())!r})"

    __str__ = __repr__
