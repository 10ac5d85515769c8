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
import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Final, NamedTuple

import orjson

from gateway.errors import InvalidFormatError

Encoder = Callable[[bytes | None], Any]


class EmbeddedFormat(StrEnum):
    BASE64 = "base64"
    HEX = "hex"
    STRING = "string"
    JSON = "json"


def base64(data: bytes | None) -> str | None:
    return None if data is None else binascii.b2a_base64(data, newline=False).decode("ascii")


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


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


def _encoder(fmt: EmbeddedFormat, parameter: str) -> Encoder:
    if fmt is EmbeddedFormat.BASE64:
        return base64
    if fmt is EmbeddedFormat.HEX:
        return _hex
    if fmt is EmbeddedFormat.STRING:

        def string(data: bytes | None) -> str | None:
            if data is None:
                return None
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidFormatError(
                    f"{parameter}=string: not UTF-8 ({exc.reason} at byte {exc.start})", parameter
                ) from None

        return string

    def embedded(data: bytes | None) -> orjson.Fragment | None:
        if data is None:
            return None
        if not _is_json(data):
            raise InvalidFormatError(f"{parameter}=json: not one JSON value", parameter)
        return orjson.Fragment(data.replace(b"\n", b" ").replace(b"\r", b" "))

    return embedded


class Encoders(NamedTuple):
    """The encoders of a record's key, value and header values."""

    key: Encoder
    value: Encoder
    header: Encoder

    @classmethod
    def of(cls, key: EmbeddedFormat, value: EmbeddedFormat, header: EmbeddedFormat) -> Encoders:
        return cls(
            _encoder(key, "key_format"),
            _encoder(value, "value_format"),
            _encoder(header, "header_format"),
        )


BASE64: Final = Encoders(base64, base64, base64)
