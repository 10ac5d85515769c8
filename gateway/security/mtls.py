"""Principals from TLS client certificates, the way a Kafka broker names them.

Two steps, each a port of the upstream code so a gateway and a broker given the same certificate
and the same ``ssl.principal.mapping.rules`` agree on the principal (and so on the ACLs):

1. :func:`subject_dn` renders the subject of :meth:`ssl.SSLSocket.getpeercert` as the RFC 2253
   string of ``javax.security.auth.x500.X500Principal.getName()`` (what Kafka's
   ``SslAuthenticator`` hands the mapper): RDNs most specific first, joined by ``,``; the
   AVAs of a multi-valued RDN joined by ``+``; RFC 2253 keywords ``CN C L ST O OU STREET DC
   UID``, other attributes as a dotted OID with ``#`` and the hex of the value's DER encoding
   (OpenJDK ``sun.security.x509.AVA.toRFC2253String``).
2. :class:`PrincipalMapper` applies the rules (Kafka ``SslPrincipalMapper``): a comma separated
   list of ``RULE:pattern/replacement/[LU]`` and ``DEFAULT``; the first rule whose pattern
   matches the whole DN gives the name (``DEFAULT`` gives the DN itself); ``/L`` and ``/U``
   lower- or upper-case the result; no rule matches -> the client is refused.

Patterns are Java regexes run by Python's ``re`` with ``re.ASCII`` (Java's ``\\w``, ``\\d``,
``\\s`` and ``(?i)`` are ASCII-only too). Java-only syntax (``\\p{..}``, ``\\Q..\\E``, ``(?<name>``)
does not compile here: such a rule is a :class:`ConfigurationError` at start, never a silent
difference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.errors import AuthenticationError, ConfigurationError

# SslPrincipalMapper.RULE_PATTERN, group for group (1 DEFAULT, 2 pattern, 4 replacement,
# 6 case flag, 7 anything else). Java's \s and Python's re.ASCII \s are the same six characters.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)", re.ASCII)
_RULE_PARSER = re.compile(_RULE, re.ASCII)
_LINE_TERMINATOR = re.compile("[\n\r\u0085\u2028\u2029]")  # java.util.regex's
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))  # String.trim(): every char <= ' '


@dataclass(frozen=True, slots=True)
class _Group:
    index: int


@dataclass(frozen=True, slots=True)
class _Rule:
    """One ``RULE:`` (``pattern`` set) or ``DEFAULT`` (``pattern`` None)."""

    source: str  # the pattern as written, for str()
    replacement: str
    pattern: re.Pattern[str] | None
    template: tuple[str | _Group, ...]
    case: str  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        """The name this rule gives ``dn``, or None when the pattern does not match it all."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # Java: dn.replaceAll(pattern, replacement), i.e. every match, not only the full one.
        name = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name

    def _expand(self, match: re.Match[str]) -> str:
        # Java appends nothing for a group that did not take part in the match.
        return "".join(
            (match.group(part.index) or "") if isinstance(part, _Group) else part
            for part in self.template
        )

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        flag = f"/{self.case}" if self.case else ""
        return f"RULE:{self.source}/{self.replacement}{flag}"


def _template(replacement: str, groups: int, rule: str) -> tuple[str | _Group, ...]:
    """Java's ``Matcher.appendReplacement`` syntax after Kafka's ``escapeLiteralBackReferences``:
    ``\\x`` is a literal x; ``$n`` takes digits while they still name a group (``$12`` is
    group 12 only with 12 groups, else group 1 and a literal "2"); a ``$n`` naming no group is
    literal text. What Java would throw on when mapping (a lone ``\\`` or ``$``, ``${name}``,
    ``$1`` with no groups) is refused here at parse time."""
    parts: list[str | _Group] = []
    literal: list[str] = []
    i = escaped = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            if i + 1 == len(replacement):
                raise ConfigurationError(f"invalid rule {rule!r}: replacement ends with '\\'")
            literal.append(replacement[i + 1])
            i += 2
        elif c == "$":
            j = i + 1
            if j == len(replacement) or not ("0" <= replacement[j] <= "9"):
                raise ConfigurationError(
                    f"invalid rule {rule!r}: '$' must be followed by a group number "
                    "(write '\\$' for a literal '$')"
                )
            end = j
            while end < len(replacement) and "0" <= replacement[end] <= "9":
                end += 1
            digits = replacement[j:end]
            first = int(digits[0])
            if groups == 0 and first != 0:
                raise ConfigurationError(f"invalid rule {rule!r}: the pattern has no group {first}")
            if first > groups:  # Kafka escapes it: the whole "$nn" stays literal
                escaped += 1
                if escaped > 1:  # Kafka escapes the second one at a shifted offset and fails
                    raise ConfigurationError(
                        f"invalid rule {rule!r}: more than one '$n' names no group "
                        "(Kafka cannot apply such a rule; write '\\$n' for a literal)"
                    )
                literal.append("$" + digits)
                i = end
                continue
            index, k = first, j + 1
            while k < end and index * 10 + int(replacement[k]) <= groups:
                index = index * 10 + int(replacement[k])
                k += 1
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(_Group(index))
            i = k
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


def _parse_rule(rule: str) -> _Rule | None:
    match = _RULE_PARSER.match(rule)  # Java lookingAt()
    if match is None or match.end() != len(rule):
        raise ConfigurationError(f"invalid principal mapping rule {rule!r}")
    if match.group(1) is not None:
        return _Rule("", "", None, (), "")
    if match.group(2) is None:
        return None  # empty rules are ignored
    source, replacement, case = match.group(2), match.group(4), match.group(6)
    try:
        pattern = re.compile(source, re.ASCII)
    except re.error as exc:
        raise ConfigurationError(
            f"invalid pattern in principal mapping rule {rule!r}: {exc}"
        ) from exc
    return _Rule(source, replacement, pattern, _template(replacement, pattern.groups, rule), case)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``, parsed once at start."""

    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, rules: str) -> PrincipalMapper:
        """Parse a rules string (e.g. ``RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT``)
        exactly as ``SslPrincipalMapper.fromRules`` splits it; a bad rule -> ConfigurationError."""
        parsed = []
        for found in _RULE_SPLITTER.finditer(rules.strip(_JAVA_TRIM)):
            rule = _parse_rule(found.group(1))
            if rule is not None:
                parsed.append(rule)
        return cls(tuple(parsed))

    def name(self, subject_dn: str) -> str:
        """The name the first matching rule gives ``subject_dn`` (Kafka ``getName``)."""
        if _LINE_TERMINATOR.search(subject_dn):
            # Java's '.' and '$' treat these differently from Python's: refuse, not guess.
            raise AuthenticationError("client certificate subject contains a line terminator")
        for rule in self.rules:
            name = rule.apply(subject_dn)
            if name is not None:
                return name
        raise AuthenticationError(
            f"no principal mapping rule matches the client certificate subject {subject_dn!r}"
        )

    def principal(self, subject_dn: str) -> str:
        """``User:<name>`` for the certificate subject ``subject_dn`` (an RFC 2253 string)."""
        return f"User:{self.name(subject_dn)}"

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(str(r) for r in self.rules)}])"


# Python's getpeercert() names attributes by OpenSSL long name; X500Principal's RFC 2253
# keywords (AVAKeyword entries with rfc2253Compliant=true).
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Attributes without an RFC 2253 keyword are printed as OID=#<DER hex>. getpeercert() drops the
# ASN.1 string type, so it is taken from the attribute's definition: IA5String for
# emailAddress, PrintableString for serialNumber and dnQualifier (X.520), UTF8String for the
# DirectoryString ones (what RFC 5280 has CAs use).
_IA5, _PRINTABLE, _UTF8 = 0x16, 0x13, 0x0C
_OTHER_ATTRIBUTES = {
    "emailAddress": ("1.2.840.113549.1.9.1", _IA5),
    "serialNumber": ("2.5.4.5", _PRINTABLE),
    "dnQualifier": ("2.5.4.46", _PRINTABLE),
    "surname": ("2.5.4.4", _UTF8),
    "title": ("2.5.4.12", _UTF8),
    "description": ("2.5.4.13", _UTF8),
    "businessCategory": ("2.5.4.15", _UTF8),
    "postalCode": ("2.5.4.17", _UTF8),
    "name": ("2.5.4.41", _UTF8),
    "givenName": ("2.5.4.42", _UTF8),
    "initials": ("2.5.4.43", _UTF8),
    "generationQualifier": ("2.5.4.44", _UTF8),
    "pseudonym": ("2.5.4.65", _UTF8),
    "organizationIdentifier": ("2.5.4.97", _UTF8),
}
_DOTTED_OID = re.compile(r"[0-2](\.(0|[1-9][0-9]*))+", re.ASCII)
_ESCAPEES = frozenset(',=+<>#;"\\')  # AVA.toRFC2253String: RFC 2253's list plus '=' and '#'


def _der_hex(tag: int, value: str) -> str:
    """``#`` and the hex of the DER TLV of ``value`` as a ``tag`` string (UTF8String when the
    value is not ASCII, which IA5String and PrintableString cannot hold)."""
    if tag != _UTF8 and not value.isascii():
        tag = _UTF8
    content = value.encode()
    n = len(content)
    if n < 0x80:
        length = bytes([n])
    else:
        size = (n.bit_length() + 7) // 8
        length = bytes([0x80 | size]) + n.to_bytes(size, "big")
    return "#" + (bytes([tag]) + length + content).hex()


def _escape(value: str) -> str:
    """The value as ``AVA.toRFC2253String`` writes a string: ``\\`` before each escapee, NUL as
    ``\\00``, ``\\`` before each leading or trailing space or CR, all else as is."""
    chars: list[str] = []
    for c in value:
        if c in _ESCAPEES:
            chars.extend(("\\", c))
        elif c == "\0":
            chars.extend(("\\", "0", "0"))
        else:
            chars.append(c)
    lead = 0
    while lead < len(chars) and chars[lead] in " \r":
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in " \r":
        trail -= 1
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))


def _ava(name: str, value: str) -> str:
    keyword = _RFC2253_KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    other = _OTHER_ATTRIBUTES.get(name)
    if other is not None:
        return f"{other[0]}={_der_hex(other[1], value)}"
    if _DOTTED_OID.fullmatch(name):
        return f"{name}={_der_hex(_UTF8, value)}"
    # Rendering it differently from Kafka could hand this client another principal: refuse.
    raise AuthenticationError(f"client certificate subject has an unsupported attribute {name!r}")


def subject_dn(peercert: Mapping[str, Any]) -> str:
    """The RFC 2253 subject DN (``X500Principal.getName()``) of a ``getpeercert()`` dict, e.g.
    ``CN=alice,OU=ServiceUsers,O=Acme,C=US``. No certificate (an empty dict, which is what
    ``getpeercert()`` gives when the peer's certificate was not verified) -> 401."""
    subject = peercert.get("subject")
    if not peercert or subject is None:
        raise AuthenticationError("no verified client certificate")
    try:
        rdns = ["+".join(_ava(str(n), str(v)) for n, v in rdn) for rdn in subject]
    except (TypeError, ValueError) as exc:
        raise AuthenticationError("client certificate subject is malformed") from exc
    return ",".join(reversed(rdns))
