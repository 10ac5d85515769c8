"""Kafka's ssl.principal.mapping.rules and X500Principal.getName(), ported.

The rule cases mirror apache/kafka SslPrincipalMapperTest; the expected DN strings and the extra
rule cases marked "Java 17" were produced by OpenJDK 17 (X500Principal.getName() on the same
certificates, java.util.regex replaceAll on the same rules and DNs).
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ObjectIdentifier

from gateway.errors import AuthenticationError, ConfigurationError
from gateway.security.mtls import PrincipalMapper, subject_dn

# --- SslPrincipalMapperTest -----------------------------------------------------------------


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules: str) -> None:
    assert PrincipalMapper.parse(rules).rules


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ConfigurationError):
        PrincipalMapper.parse(rules)


def test_ssl_principal_mapper() -> None:
    mapper = PrincipalMapper.parse(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    dn = "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert mapper.name(dn) == dn
    assert mapper.principal("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "User:duke"


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        # seeing is believing
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        (
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        ),
        # empty rules are ignored
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        # escape sequences
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        # rules rule
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT,"
            " /DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT,"
            " /DEFAULT/,DEFAULT",
        ),
    ],
)
def test_rules_splitting(expected: str, rules: str) -> None:
    assert str(PrincipalMapper.parse(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


# --- beyond the upstream test: Java 17 gave the same answers -------------------------------


@pytest.mark.parametrize(
    ("rules", "dn", "expected"),
    [
        # $12 is group 12 when there are 12 groups; $123 is group 12 and a literal "3"
        ("RULE:^(.)(.)(.)(.)(.)(.)(.)(.)(.)(.)(.)(.)$/$12-$123-$1/", "abcdefghijkl", "l-l3-a"),
        ("RULE:^CN=(a)(b)(c)$/$1[$4]$0/", "CN=abc", "a[$4]CN=abc"),  # $4 names no group
        ("RULE:^CN=(.*)\\/x$/\\$1\\/$1\\\\/", "CN=a/x", "$1/a\\"),  # escapes in both parts
        ("RULE:([A-Z]*)/$1-/U", "ABC", "ABC--"),  # replaceAll: the empty match at the end too
        ("RULE:a|ab/X/", "ab", "Xb"),  # matches() decides, replaceAll() rewrites
        ("RULE:^CN=(\\w+)$/$1/,DEFAULT", "CN=héllo", "CN=héllo"),  # \w is ASCII, as in Java
        ("RULE:(?i)^cn=(.*)$/$1/L", "CN=ÄBC", "äbc"),
        ("\t RULE:^(.*)$/$1/ \t,DEFAULT\t", "x y", "x y"),
    ],
)
def test_agrees_with_java(rules: str, dn: str, expected: str) -> None:
    assert PrincipalMapper.parse(rules).name(dn) == expected


def test_no_matching_rule_is_401() -> None:
    with pytest.raises(AuthenticationError, match="no principal mapping rule"):
        PrincipalMapper.parse("RULE:^CN=(.*)$/$1/").principal("OU=x")
    with pytest.raises(AuthenticationError):
        PrincipalMapper.parse("").principal("CN=x")


def test_line_terminators_in_a_subject_are_refused() -> None:
    """Java's '.' does not match U+2028 (the rule below falls through to DEFAULT there)."""
    mapper = PrincipalMapper.parse("RULE:^CN=(.*)$/$1/,DEFAULT")
    for dn in ("CN=a\u2028b", "CN=a\nb", "CN=a\rb"):
        with pytest.raises(AuthenticationError, match="line terminator"):
            mapper.principal(dn)


@pytest.mark.parametrize(
    "rules",
    [
        "RULE:^CN=(.*)$/$",  # no trailing '/'
        "RULE:^CN=(.*)$/$/",  # '$' without a number
        "RULE:^CN=(.*)$/${name}/",
        "RULE:^CN=.*$/$1/",  # no groups at all: Java throws on every DN
        "RULE:^CN=(a)$/$4$5/",  # Kafka mis-escapes the second literal reference
        "RULE:^CN=(.*$/$1/",  # bad regex
        "RULE:^CN=\\p{L}+$/x/",  # Java-only syntax
    ],
)
def test_rules_java_would_fail_on_are_refused_at_start(rules: str) -> None:
    with pytest.raises(ConfigurationError):
        PrincipalMapper.parse(rules)


# --- subject_dn: getpeercert() -> X500Principal.getName() -----------------------------------

A = x509.NameAttribute
_KEY = ec.generate_private_key(ec.SECP256R1())


def _peercert(tmp_path: Path, name: x509.Name) -> dict[str, Any]:
    """What getpeercert() returns for a certificate with subject ``name`` (CPython decodes
    both with the same _decode_certificate)."""
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(_KEY.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(_KEY, hashes.SHA256())
    )
    path = tmp_path / "cert.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    decoded: dict[str, Any] = ssl._ssl._test_decode_cert(str(path))  # type: ignore[attr-defined]
    return decoded


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        (
            [
                A(NameOID.COUNTRY_NAME, "US"),
                A(NameOID.ORGANIZATION_NAME, "Acme"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
                A(NameOID.COMMON_NAME, "alice"),
            ],
            "CN=alice,OU=ServiceUsers,O=Acme,C=US",
        ),
        (
            [
                A(NameOID.COMMON_NAME, "Tkac, Adam"),
                A(NameOID.ORGANIZATION_NAME, 'a+b=c<d>e#f;g"h\\i'),
            ],
            'O=a\\+b\\=c\\<d\\>e\\#f\\;g\\"h\\\\i,CN=Tkac\\, Adam',
        ),
        (
            [
                A(NameOID.COMMON_NAME, " lead and trail  "),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "#h"),
            ],
            "OU=\\#h,CN=\\ lead and trail\\ \\ ",
        ),
        (
            [A(NameOID.COMMON_NAME, "ünïcødé 名前"), A(NameOID.LOCALITY_NAME, "x_y@z*!&")],
            "L=x_y@z*!&,CN=ünïcødé 名前",
        ),
        (
            [
                A(NameOID.DOMAIN_COMPONENT, "com"),
                A(NameOID.DOMAIN_COMPONENT, "example"),
                A(NameOID.USER_ID, "jdoe"),
                A(NameOID.STREET_ADDRESS, "1 Main St"),
                A(NameOID.STATE_OR_PROVINCE_NAME, "MD"),
            ],
            "ST=MD,STREET=1 Main St,UID=jdoe,DC=example,DC=com",
        ),
        (
            [A(NameOID.COMMON_NAME, "bob"), A(NameOID.EMAIL_ADDRESS, "bob@example.com")],
            "1.2.840.113549.1.9.1=#160f626f62406578616d706c652e636f6d,CN=bob",
        ),
        (
            [
                A(NameOID.SERIAL_NUMBER, "12345"),
                A(NameOID.TITLE, "Boss"),
                A(NameOID.GIVEN_NAME, "Bob"),
                A(NameOID.SURNAME, "Smith"),
                A(NameOID.COMMON_NAME, "x"),
            ],
            "CN=x,2.5.4.4=#0c05536d697468,2.5.4.42=#0c03426f62,2.5.4.12=#0c04426f7373,"
            "2.5.4.5=#13053132333435",
        ),
        (
            [A(ObjectIdentifier("1.3.6.1.4.1.99999.1"), "custom"), A(NameOID.COMMON_NAME, "y")],
            "CN=y,1.3.6.1.4.1.99999.1=#0c06637573746f6d",
        ),
        (
            [A(NameOID.COMMON_NAME, "a\rb\r"), A(NameOID.PSEUDONYM, "p" * 130)],
            "2.5.4.65=#0c8182" + "70" * 130 + ",CN=a\rb\\\r",
        ),
    ],
)
def test_subject_dn_matches_x500principal(
    tmp_path: Path, attributes: list[x509.NameAttribute[Any]], expected: str
) -> None:
    assert subject_dn(_peercert(tmp_path, x509.Name(attributes))) == expected


def test_subject_dn_multi_valued_rdn(tmp_path: Path) -> None:
    rdn = x509.RelativeDistinguishedName
    name = x509.Name(
        [
            rdn([A(NameOID.COUNTRY_NAME, "US")]),
            rdn([A(NameOID.COMMON_NAME, "carol"), A(NameOID.ORGANIZATIONAL_UNIT_NAME, "Ops")]),
        ]
    )
    assert subject_dn(_peercert(tmp_path, name)) == "OU=Ops+CN=carol,C=US"


def test_subject_dn_then_rules(tmp_path: Path) -> None:
    peercert = _peercert(
        tmp_path,
        x509.Name(
            [A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"), A(NameOID.COMMON_NAME, "Eve")]
        ),
    )
    mapper = PrincipalMapper.parse("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT")
    assert mapper.principal(subject_dn(peercert)) == "User:eve"


def test_no_certificate_is_401() -> None:
    with pytest.raises(AuthenticationError, match="no verified client certificate"):
        subject_dn({})  # getpeercert() when the certificate was not verified


def test_unknown_attribute_name_is_refused() -> None:
    peercert = {"subject": ((("commonName", "a"),), (("someNewName", "b"),))}
    with pytest.raises(AuthenticationError, match="unsupported attribute"):
        subject_dn(peercert)
