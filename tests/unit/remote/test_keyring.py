"""Key ring: PEM loading, OAEP-SHA3-512 wrapping, interop, rotation, no key material leaks.

(aiven-remote-format.md §2.3, §5.2-§5.4)
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from Crypto.Cipher import PKCS1_OAEP
from Crypto.Hash import SHA1, SHA3_512, SHA256
from Crypto.PublicKey import RSA
from Crypto.Signature.pss import MGF1
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ConfigurationError, CorruptManifestError, GatewayError, IntegrityError
from gateway.remote.keyring import MIN_MODULUS_BYTES, KeyPair, KeyRing, parse_spec
from gateway.remote.transforms import (
    ChunkTransform,
    DataKeyAndAad,
    detransform_chunk,
    generate_data_key_and_aad,
    transform_chunk,
)

DEK = bytes(range(32))


@dataclass(frozen=True)
class Keys:
    # repr=False: RsaKey's own repr prints the private exponent and primes.
    k1: RSA.RsaKey = field(repr=False)
    k2: RSA.RsaKey = field(repr=False)
    other: RSA.RsaKey = field(repr=False)  # same size as k1, never configured


@pytest.fixture(scope="session")
def keys() -> Keys:
    return Keys(RSA.generate(2048), RSA.generate(2048), RSA.generate(2048))


def _pkcs8(key: RSA.RsaKey) -> bytes:
    return key.export_key(format="PEM", pkcs=8)


def _spki(key: RSA.RsaKey) -> bytes:
    return key.public_key().export_key(format="PEM")


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, bytes], str]:
    def _write(name: str, content: bytes) -> str:
        path = tmp_path / name
        path.write_bytes(content)
        return str(path)

    return _write


@pytest.fixture
def ring(keys: Keys, write: Callable[[str, bytes], str]) -> KeyRing:
    return KeyRing.from_specs(
        [f"k1={write('k1.pem', _pkcs8(keys.k1))}", f"k2={write('k2.pem', _pkcs8(keys.k2))}"]
    )


# --- an independent RFC 8017 EME-OAEP over raw RSA (hashlib SHA3-512 for hash and MGF1) -----


def _mgf1(seed: bytes, length: int) -> bytes:
    out = b"".join(
        hashlib.sha3_512(seed + i.to_bytes(4, "big")).digest() for i in range(length // 64 + 1)
    )
    return out[:length]


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _oaep_encrypt(n: int, e: int, message: bytes) -> bytes:
    k = (n.bit_length() + 7) // 8
    l_hash = hashlib.sha3_512(b"").digest()
    db = l_hash + bytes(k - len(message) - 2 * 64 - 2) + b"\x01" + message
    seed = os.urandom(64)
    masked_db = _xor(db, _mgf1(seed, k - 65))
    masked_seed = _xor(seed, _mgf1(masked_db, 64))
    em = b"\x00" + masked_seed + masked_db
    return pow(int.from_bytes(em, "big"), e, n).to_bytes(k, "big")


def _oaep_decrypt(n: int, d: int, ciphertext: bytes) -> bytes:
    k = (n.bit_length() + 7) // 8
    em = pow(int.from_bytes(ciphertext, "big"), d, n).to_bytes(k, "big")
    assert em[0] == 0
    masked_seed, masked_db = em[1:65], em[65:]
    seed = _xor(masked_seed, _mgf1(masked_db, 64))
    db = _xor(masked_db, _mgf1(seed, k - 65))
    assert db[:64] == hashlib.sha3_512(b"").digest()
    rest = db[64:].lstrip(b"\x00")
    assert rest[0] == 1
    return rest[1:]


def test_sha3_512_empty_label_hash_matches_the_spec() -> None:
    assert hashlib.sha3_512(b"").hexdigest() == (
        "a69f73cca23a9ac5c8b567dc185a756e97c982164fe25859e0d1dcc1475c80a6"
        "15b2123af1f5f94c11e3e9402c3ac558f500199d95b6d3e301758586281dcd26"
    )


# --- loading ---------------------------------------------------------------------------------


def test_private_pkcs8_key_derives_the_public_key(ring: KeyRing, keys: Keys) -> None:
    assert ring.ids == ("k1", "k2") and len(ring) == 2 and "k1" in ring and "k3" not in ring
    pair = ring.pair("k1")
    assert pair.has_private and pair.bits == 2048 and pair.modulus_bytes == 256
    wrapped = ring.wrap("k1", DEK)
    assert len(wrapped) == 256
    assert len(base64.b64encode(wrapped)) == 344  # §2.3: 344 Base64 characters for RSA-2048
    assert ring.unwrap("k1", wrapped) == DEK
    assert [p.key_id for p in ring] == ["k1", "k2"]


def test_public_only_pair_wraps_for_a_writer_but_cannot_unwrap(
    keys: Keys, write: Callable[[str, bytes], str], ring: KeyRing
) -> None:
    writer = KeyRing.from_specs([f"k1={write('pub.pem', _spki(keys.k1))}"])
    assert not writer.pair("k1").has_private
    wrapped = writer.wrap("k1", DEK)
    assert ring.unwrap("k1", wrapped) == DEK
    with pytest.raises(ConfigurationError, match="no private key"):
        writer.unwrap("k1", wrapped)


def test_pem_label_is_ignored_like_bouncycastle(keys: Keys) -> None:
    # Upstream tests write their PEMs with the label "SOME KEY".
    for pem in (_pkcs8(keys.k1), _spki(keys.k1)):
        text = pem.decode()
        label = text.split("-----")[1].removeprefix("BEGIN ")
        relabelled = text.replace(label, "SOME KEY").encode()
        pair = KeyPair.from_pem("k", relabelled)
        assert pair.bits == 2048
    priv = KeyPair.from_pem("k", _pkcs8(keys.k1).replace(b"PRIVATE KEY", b"SOME KEY"))
    assert priv.unwrap(KeyPair.from_pem("k", _spki(keys.k1)).wrap(DEK)) == DEK


def test_pem_with_crlf_and_surrounding_text_loads(keys: Keys) -> None:
    pem = b"comment line\r\n" + _pkcs8(keys.k1).replace(b"\n", b"\r\n") + b"trailer\r\n"
    assert KeyPair.from_pem("k", pem).has_private


def _other_formats(keys: Keys) -> dict[str, bytes]:
    ckey = serialization.load_pem_private_key(_pkcs8(keys.k1), password=None)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    return {
        "pkcs1 private": keys.k1.export_key(format="PEM", pkcs=1),
        "pkcs1 public": ckey.public_key().public_bytes(pem, serialization.PublicFormat.PKCS1),
        "encrypted pkcs8": ckey.private_bytes(
            pem,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        ),
        "legacy encrypted": ckey.private_bytes(
            pem,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.BestAvailableEncryption(b"secret"),
        ),
        "ec pkcs8": ec_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        "ec spki": ec_key.public_key().public_bytes(
            pem, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        "openssh": keys.k1.public_key().export_key(format="OpenSSH"),
        "der": keys.k1.export_key(format="DER", pkcs=8),
        "empty": b"",
        "not pem": b"hello\n",
        "bad base64": b"-----BEGIN PRIVATE KEY-----\nnot*base64\n-----END PRIVATE KEY-----\n",
        "mismatched end": _pkcs8(keys.k1).replace(b"END PRIVATE", b"END PUBLIC"),
        "truncated der": b"-----BEGIN PRIVATE KEY-----\n"
        + base64.encodebytes(keys.k1.export_key(format="DER", pkcs=8)[:300])
        + b"-----END PRIVATE KEY-----\n",
        "binary": os.urandom(500),
    }


FORMATS = [
    "pkcs1 private",
    "pkcs1 public",
    "encrypted pkcs8",
    "legacy encrypted",
    "ec pkcs8",
    "ec spki",
    "openssh",
    "der",
    "empty",
    "not pem",
    "bad base64",
    "mismatched end",
    "truncated der",
    "binary",
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_unsupported_key_files_are_configuration_errors(
    fmt: str, keys: Keys, write: Callable[[str, bytes], str]
) -> None:
    content = _other_formats(keys)[fmt]
    path = write("key.pem", content)
    with pytest.raises(ConfigurationError) as info:
        KeyRing.from_specs([f"kx={path}"])
    message = str(info.value)
    assert "'kx'" in message and path in message
    _assert_no_key_material(message, keys)


def test_pkcs1_private_key_error_says_how_to_convert(
    keys: Keys, write: Callable[[str, bytes], str]
) -> None:
    path = write("rsa.pem", keys.k1.export_key(format="PEM", pkcs=1))
    with pytest.raises(ConfigurationError, match=r"PKCS#1 RSAPrivateKey.*openssl pkcs8"):
        KeyRing.from_specs([f"k={path}"])


def test_too_small_a_key_is_refused(write: Callable[[str, bytes], str]) -> None:
    small = RSA.generate(1024)
    assert small.size_in_bytes() < MIN_MODULUS_BYTES == 162
    path = write("small.pem", _pkcs8(small))
    with pytest.raises(ConfigurationError, match="1024 bits is too small"):
        KeyRing.from_specs([f"k={path}"])


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "k1",
        "=/tmp/x.pem",
        "k1=",
        "a:b=/tmp/x.pem",
        "a,b=/tmp/x.pem",
        "a b=/tmp/x.pem",
        " k1=/tmp/x.pem",
        "k1= /tmp/x.pem",
        "k1=/tmp/x.pem ",
    ],
)
def test_bad_specs_name_the_spec(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        KeyRing.from_specs([spec])
    assert repr(spec) in str(info.value)


def test_spec_path_may_contain_equals(keys: Keys, write: Callable[[str, bytes], str]) -> None:
    path = write("a=b.pem", _pkcs8(keys.k1))
    assert parse_spec(f"k-1.x_y={path}") == ("k-1.x_y", Path(path))
    assert KeyRing.from_specs([f"k={path}"]).ids == ("k",)


def test_missing_or_unreadable_file(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.pem", tmp_path):
        with pytest.raises(ConfigurationError, match=r"k1=.*cannot read"):
            KeyRing.from_specs([f"k1={path}"])


def test_key_pasted_instead_of_a_path_is_not_echoed(keys: Keys) -> None:
    pem = _pkcs8(keys.k1).decode()
    for spec in (f"k1={pem}", pem):
        with pytest.raises(ConfigurationError) as info:
            KeyRing.from_specs([spec])
        message = str(info.value)
        assert "hidden" in message
        _assert_no_key_material(message, keys)


def test_duplicate_ids_are_refused(keys: Keys, write: Callable[[str, bytes], str]) -> None:
    a, b = write("a.pem", _pkcs8(keys.k1)), write("b.pem", _pkcs8(keys.k2))
    with pytest.raises(ConfigurationError, match="'k1' is given twice"):
        KeyRing.from_specs([f"k1={a}", f"k1={b}"])


def test_empty_ring() -> None:
    ring = KeyRing.from_specs([])
    assert len(ring) == 0
    with pytest.raises(ConfigurationError, match=r"unknown key pair id 'k1' .*none"):
        ring.unwrap("k1", bytes(256))


# --- unwrapping: interop and failures --------------------------------------------------------


def test_unknown_id_names_the_id_only(ring: KeyRing, keys: Keys) -> None:
    with pytest.raises(ConfigurationError) as info:
        ring.unwrap("retired", ring.wrap("k1", DEK))
    message = str(info.value)
    assert "'retired'" in message and "'k1', 'k2'" in message
    _assert_no_key_material(message, keys)
    with pytest.raises(ConfigurationError):
        ring.wrap("retired", DEK)


def test_unwraps_a_key_wrapped_by_pycryptodome_oaep_sha3_512(ring: KeyRing, keys: Keys) -> None:
    explicit = PKCS1_OAEP.new(
        keys.k1.public_key(), hashAlgo=SHA3_512, mgfunc=lambda s, n: MGF1(s, n, SHA3_512)
    )
    default_mgf = PKCS1_OAEP.new(keys.k1.public_key(), hashAlgo=SHA3_512)
    for cipher in (explicit, default_mgf):
        assert ring.unwrap("k1", cipher.encrypt(DEK)) == DEK


def test_independent_rfc8017_oaep_both_ways(ring: KeyRing, keys: Keys) -> None:
    n, e, d = int(keys.k1.n), int(keys.k1.e), int(keys.k1.d)
    assert ring.unwrap("k1", _oaep_encrypt(n, e, DEK)) == DEK
    assert _oaep_decrypt(n, d, ring.wrap("k1", DEK)) == DEK


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl CLI")
def test_openssl_cli_both_ways(
    ring: KeyRing, keys: Keys, write: Callable[[str, bytes], str]
) -> None:
    opts = [
        "-pkeyopt",
        "rsa_padding_mode:oaep",
        "-pkeyopt",
        "rsa_oaep_md:sha3-512",
        "-pkeyopt",
        "rsa_mgf1_md:sha3-512",
    ]
    pub, priv = write("pub.pem", _spki(keys.k1)), write("priv.pem", _pkcs8(keys.k1))
    enc = subprocess.run(
        ["openssl", "pkeyutl", "-encrypt", "-pubin", "-inkey", pub, *opts],
        input=DEK,
        capture_output=True,
        check=False,
    )
    if enc.returncode != 0:
        pytest.skip(f"openssl lacks OAEP-SHA3: {enc.stderr!r}")
    assert ring.unwrap("k1", enc.stdout) == DEK
    dec = subprocess.run(
        ["openssl", "pkeyutl", "-decrypt", "-inkey", priv, *opts],
        input=ring.wrap("k1", DEK),
        capture_output=True,
        check=True,
    )
    assert dec.stdout == DEK


def _foreign_wraps(key: RSA.RsaKey) -> dict[str, bytes]:
    public = key.public_key()
    cpub = serialization.load_pem_public_key(_spki(key))
    assert hasattr(cpub, "encrypt")
    return {
        "pycryptodome sha256": PKCS1_OAEP.new(public, hashAlgo=SHA256).encrypt(DEK),
        "pycryptodome sha1": PKCS1_OAEP.new(public).encrypt(DEK),
        # SunJCE's reading of "OAEPWithSHA3-512AndMGF1Padding": MGF1 stays on SHA-1 (§5.2).
        "sha3-512 with mgf1-sha1": PKCS1_OAEP.new(
            public, hashAlgo=SHA3_512, mgfunc=lambda s, n: MGF1(s, n, SHA1)
        ).encrypt(DEK),
        "cryptography sha256": cpub.encrypt(
            DEK,
            padding.OAEP(
                mgf=padding.MGF1(algorithm=hashes.SHA256()),
                algorithm=hashes.SHA256(),
                label=None,
            ),
        ),
        "non-empty label": PKCS1_OAEP.new(public, hashAlgo=SHA3_512, label=b"x").encrypt(DEK),
    }


@pytest.mark.parametrize(
    "variant",
    [
        "pycryptodome sha256",
        "pycryptodome sha1",
        "sha3-512 with mgf1-sha1",
        "cryptography sha256",
        "non-empty label",
    ],
)
def test_other_oaep_parameters_do_not_unwrap(ring: KeyRing, keys: Keys, variant: str) -> None:
    wrapped = _foreign_wraps(keys.k1)[variant]
    with pytest.raises(IntegrityError) as info:
        ring.unwrap("k1", wrapped)
    _assert_no_key_material(str(info.value), keys)


def test_wrong_key_of_the_same_size_is_an_integrity_error(ring: KeyRing, keys: Keys) -> None:
    foreign = PKCS1_OAEP.new(keys.other.public_key(), hashAlgo=SHA3_512).encrypt(DEK)
    with pytest.raises(IntegrityError):
        ring.unwrap("k1", foreign)


@given(pos=st.integers(0, 255), xor=st.integers(1, 255))
@settings(max_examples=60, deadline=None)
def test_tampered_wrapped_key_is_an_integrity_error(pos: int, xor: int) -> None:
    # Session fixtures cannot be used with @given: one module-level pair, built once.
    pair = _module_pair()
    wrapped = bytearray(pair.wrap(DEK))
    wrapped[pos] ^= xor
    with pytest.raises(IntegrityError):
        pair.unwrap(bytes(wrapped))


_PAIR: list[KeyPair] = []


def _module_pair() -> KeyPair:
    if not _PAIR:
        _PAIR.append(KeyPair.from_pem("m", _pkcs8(RSA.generate(2048))))
    return _PAIR[0]


def test_ciphertext_not_below_the_modulus_is_an_integrity_error(ring: KeyRing) -> None:
    with pytest.raises(IntegrityError):
        ring.unwrap("k1", b"\xff" * 256)


@pytest.mark.parametrize("length", [0, 1, 255, 257, 512])
def test_wrapped_key_of_the_wrong_length_is_a_corrupt_manifest(ring: KeyRing, length: int) -> None:
    with pytest.raises(CorruptManifestError, match=f"is {length} bytes, expected 256"):
        ring.unwrap("k1", bytes(length))


@pytest.mark.parametrize("size", [0, 16, 31, 33, 64])
def test_wrapped_value_that_is_not_an_aes_256_key(ring: KeyRing, keys: Keys, size: int) -> None:
    cipher = PKCS1_OAEP.new(keys.k1.public_key(), hashAlgo=SHA3_512)
    with pytest.raises(CorruptManifestError, match=f"holds {size} bytes"):
        ring.unwrap("k1", cipher.encrypt(os.urandom(size)))


def test_wrap_refuses_a_data_key_of_the_wrong_size(ring: KeyRing) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        ring.wrap("k1", bytes(16))


# --- rotation --------------------------------------------------------------------------------


def _data_key_field(key_id: str, wrapped: bytes) -> str:
    return f"{key_id}:{base64.b64encode(wrapped).decode()}"  # §2.3


def _unwrap_field(ring: KeyRing, data_key_field: str) -> bytes:
    key_id, wrapped = data_key_field.split(":")  # exactly one colon (§2.3)
    return ring.unwrap(key_id, base64.b64decode(wrapped, validate=True))


def test_rotation_the_manifest_key_id_selects_the_pair(
    keys: Keys, write: Callable[[str, bytes], str]
) -> None:
    k1, k2 = write("k1.pem", _pkcs8(keys.k1)), write("k2.pem", _pkcs8(keys.k2))
    before = KeyRing.from_specs([f"k1={k1}"])  # before rotation: only k1
    old_dek, new_dek = os.urandom(32), os.urandom(32)
    old_field = _data_key_field("k1", before.wrap("k1", old_dek))
    after = KeyRing.from_specs([f"k1={k1}", f"k2={k2}"])  # rotated: k2 active, k1 kept
    new_field = _data_key_field("k2", after.wrap("k2", new_dek))
    assert _unwrap_field(after, old_field) == old_dek
    assert _unwrap_field(after, new_field) == new_dek
    with pytest.raises(ConfigurationError, match="'k2'"):
        _unwrap_field(before, new_field)
    # A manifest naming the wrong pair: the other key cannot decode it.
    with pytest.raises(IntegrityError):
        after.unwrap("k2", base64.b64decode(old_field.split(":")[1]))
    # Pair order in the spec list does not matter.
    swapped = KeyRing.from_specs([f"k2={k2}", f"k1={k1}"])
    assert _unwrap_field(swapped, old_field) == old_dek


def test_envelope_end_to_end(ring: KeyRing) -> None:
    keys = generate_data_key_and_aad()
    wrapped = ring.wrap("k2", keys.data_key)
    reader = ChunkTransform(
        compression=True, encryption=DataKeyAndAad(ring.unwrap("k2", wrapped), keys.aad)
    )
    chunk = b"records " * 1000
    stored = transform_chunk(chunk, ChunkTransform(compression=True, encryption=keys))
    assert detransform_chunk(stored, len(chunk), reader) == chunk


# --- no key material in reprs or messages ----------------------------------------------------


def _assert_no_key_material(text: str, keys: Keys) -> None:
    assert "BEGIN" not in text and "-----" not in text
    for key in (keys.k1, keys.k2, keys.other):
        for value in (key.n, key.d, key.p, key.q):
            assert str(int(value))[:20] not in text
            assert format(int(value), "x")[:16] not in text
        for pem in (_pkcs8(key), _spki(key)):
            for line in pem.decode().splitlines()[1:-1]:
                assert line[:24] not in text


def test_reprs_show_no_key_material(
    ring: KeyRing, keys: Keys, write: Callable[[str, bytes], str]
) -> None:
    writer = KeyRing.from_specs([f"w={write('p.pem', _spki(keys.k1))}"])
    texts = [repr(ring), str(ring), repr(ring.pair("k1")), str(ring.pair("k2")), repr(writer)]
    for text in texts:
        _assert_no_key_material(text, keys)
    assert (
        repr(ring)
        == "KeyRing([KeyPair('k1', 2048 bits, private), KeyPair('k2', 2048 bits, private)])"
    )
    assert repr(writer) == "KeyRing([KeyPair('w', 2048 bits, public-only)])"


def test_error_chain_messages_show_no_key_material(ring: KeyRing, keys: Keys) -> None:
    # The causes (raise ... from) end up in logs too.
    cases: list[Callable[[], object]] = [
        lambda: ring.unwrap("k1", b"\xff" * 256),
        lambda: ring.unwrap("k1", _foreign_wraps(keys.k1)["pycryptodome sha256"]),
        lambda: ring.unwrap("nope", bytes(256)),
        lambda: KeyPair.from_pem("x", keys.k1.export_key(format="PEM", pkcs=1)),
    ]
    for case in cases:
        with pytest.raises(GatewayError) as info:
            case()
        err: BaseException | None = info.value
        while err is not None:
            _assert_no_key_material(str(err), keys)
            _assert_no_key_material(repr(err), keys)
            err = err.__cause__ or err.__context__
