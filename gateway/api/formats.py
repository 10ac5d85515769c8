"""Embedded formats of keys, values and header values in JSON and NDJSON record responses.

``key_format``, ``value_format`` and ``header_format`` each choose one of (as the Kafka REST
proxies' embedded formats):

* ``base64`` (default): standard base64 of the bytes;
* ``hex``: lowercase hex of the bytes;
* ``string``: the bytes as UTF-8 text;
* ``json``: the bytes as an embedded JSON value, verbatim (only CR and LF, which valid JSON holds
  only as whitespace between tokens, become spaces, so an NDJSON line stays one line).

``null`` stays ``null``. Bytes that are not valid in the asked format (not UTF-8; not one JSON
value) are never mangled or skipped: the response is :class:`InvalidFormatError` (422
``invalid_format``) naming the parameter and the record's offset.
"""

from __future__ import annotations

import binascii
import functools
import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Final, NamedTuple

import orjson

from gateway.errors import InvalidFormatError

Encoder = Callable[[bytes], bytes]
"""Bytes (never None: ``null`` is the caller's) -> their text in a JSON document."""


class EmbeddedFormat(StrEnum):
    BASE64 = "base64"
    HEX = "hex"
    STRING = "string"
    JSON = "json"


class RecordFormat(StrEnum):
    """A key's or value's format: the embedded ones, and those decoded with a schema from the
    registry (:mod:`gateway.api.decoded`)."""

    BASE64 = "base64"
    HEX = "hex"
    STRING = "string"
    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSONSCHEMA = "jsonschema"
    AUTO = "auto"

    @property
    def embedded(self) -> EmbeddedFormat | None:
        """The same embedded format, or None for one decoded with a schema."""
        try:
            return EmbeddedFormat(self.value)
        except ValueError:
            return None


base64: Final[Encoder] = functools.partial(binascii.b2a_base64, newline=False)
"""Standard base64, without the quotes (the format is :attr:`Field.quoted`); a C callable, no
Python frame per value."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_json(data: bytes) -> bool:
    """One JSON value (RFC 8259, UTF-8). orjson first; the standard library for what orjson
    refuses although the grammar allows it (numbers beyond a double, lone surrogate escapes)."""
    try:
        orjson.loads(data)
        return True
    except orjson.JSONDecodeError:
        pass
    try:
        json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return False
    return True


class Field(NamedTuple):
    """How one field is written: ``encode`` gives the bytes between the quotes when
    ``quoted`` (base64, hex), else the whole JSON token (string, json)."""

    encode: Encoder
    quoted: bool
    format: EmbeddedFormat

    def token(self, data: bytes | None) -> bytes:
        """The field's complete JSON token (``null`` for None)."""
        if data is None:
            return b"null"
        return b'"%b"' % self.encode(data) if self.quoted else self.encode(data)


def field(fmt: EmbeddedFormat, parameter: str) -> Field:
    """How ``fmt`` writes a field; its errors name ``parameter``."""
    if fmt is EmbeddedFormat.BASE64:
        return Field(base64, True, fmt)
    if fmt is EmbeddedFormat.HEX:
        return Field(binascii.hexlify, True, fmt)
    if fmt is EmbeddedFormat.STRING:

        def string(data: bytes) -> bytes:
            try:
                return orjson.dumps(data.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise InvalidFormatError(
                    f"{parameter}=string: not UTF-8 ({exc.reason} at byte {exc.start})", parameter
                ) from None

        return Field(string, False, fmt)

    def embedded(data: bytes) -> bytes:
        if not _is_json(data):
            raise InvalidFormatError(f"{parameter}=json: not one JSON value", parameter)
        return data.replace(b"\n", b" ").replace(b"\r", b" ")

    return Field(embedded, False, fmt)


class Encoders(NamedTuple):
    """How a record's key, value and header values are written."""

    key: Field
    value: Field
    header: Field

    @classmethod
    def of(cls, key: EmbeddedFormat, value: EmbeddedFormat, header: EmbeddedFormat) -> Encoders:
        return cls(
            field(key, "key_format"),
            field(value, "value_format"),
            field(header, "header_format"),
        )


BASE64: Final = Encoders(*(Field(base64, True, EmbeddedFormat.BASE64),) * 3)
