"""Decoders of registry-framed bodies into plain JSON values, the way the REST proxies show them.

* Avro (fastavro, the writer's schema): unions untagged, ``bytes`` and ``fixed`` as standard
  base64, enums as their symbols, decimals as plain-notation strings (never a float), every
  other logical type as its underlying value (a ``date`` is its day number, a
  ``timestamp-millis`` its long), NaN and infinities as the strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"`` (as the proto3 JSON mapping writes them); a body with bytes left after the
  value is refused (Confluent's reader would ignore them: they mean the bytes are not what the
  schema wrote).
* JSON Schema: the body verbatim once it is one JSON value the schema accepts (Draft 7 unless
  the schema names another ``$schema``; references by their names).
* Protobuf: :mod:`gateway.schemas.protobuf`.

A body a decoder cannot read raises :class:`BodyDecodeError` with the reason; every exception of
the third-party readers is translated here, at this boundary, and nowhere else.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol

import fastavro
import jsonschema
import orjson
import referencing
import referencing.jsonschema
from fastavro import _read_py

from gateway.schemas.registry import Registered, SchemaType


class BodyDecodeError(ValueError):
    """A body the schema does not read (the message says why)."""


class SchemaUnusableError(ValueError):
    """A registered schema this process cannot use (the message says why)."""


class Decoder(Protocol):
    schema_type: SchemaType

    def decode(self, body: memoryview) -> Any:
        """The body as a JSON value, or (JSON Schema) its verbatim JSON text as ``bytes``."""
        ...


def _strip_logical(node: Any) -> Any:
    """The schema with every logical type but ``decimal`` removed (their underlying values)."""
    if isinstance(node, list):
        return [_strip_logical(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strip_logical(v) for k, v in node.items()}
    if out.get("logicalType") not in (None, "decimal"):
        del out["logicalType"]
    return out


def plain(value: Any) -> Any:
    """An Avro value (fastavro's reading) as a JSON value."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


class _Shape:
    """What a walk of a parsed Avro schema finds: zero-width array items (a corrupt block count
    would loop without reading a byte: fastavro's compiled reader never returns) and recursion
    (a named type inside itself: its compiled reader recurses on the C stack, one level per
    body byte)."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named, self.recursive, self._open = named, False, set[str]()

    def zero_width(self, node: Any) -> bool:
        """Whether ``node`` can be written in no bytes; raises on an array of such items."""
        if isinstance(node, str):
            if node in self._open:
                self.recursive = True
                return False
            return node == "null" or (node in self.named and self.zero_width(self.named[node]))
        if isinstance(node, list):
            for branch in node:
                self.zero_width(branch)
            return False  # the branch index is one byte at least
        kind = node.get("type")
        if kind == "array":
            if self.zero_width(node["items"]):
                raise SchemaUnusableError("Avro schema: an array of zero-width items")
            return False
        if kind == "map":
            self.zero_width(node["values"])
            return False
        if kind == "fixed":
            return int(node.get("size", 1)) == 0
        if kind in ("record", "error"):
            name = node.get("name", "")
            self._open.add(name)
            try:
                widths = [self.zero_width(f["type"]) for f in node.get("fields", ())]  # each one
                return all(widths)
            finally:
                self._open.discard(name)
        return self.zero_width(kind) if isinstance(kind, str | list | dict) else False


class AvroDecoder:
    schema_type = SchemaType.AVRO

    def __init__(self, registered: Registered, references: Mapping[str, Registered]) -> None:
        named: dict[str, Any] = {}
        try:
            for ref in references.values():  # imported first: they define named types
                fastavro.parse_schema(_strip_logical(json.loads(ref.schema)), named_schemas=named)
            writer = _strip_logical(json.loads(registered.schema))
            self.schema = fastavro.parse_schema(writer, named_schemas=named)
        except Exception as exc:  # fastavro's SchemaParseException, a ValueError, ...
            raise SchemaUnusableError(f"Avro schema: {type(exc).__name__}: {exc}") from None
        shape = _Shape(named)
        shape.zero_width(self.schema)
        # A recursive schema is read by fastavro's Python reader, whose depth is bounded by the
        # interpreter's recursion limit (a RecursionError, caught below).
        self.recursive = shape.recursive

    def decode(self, body: memoryview, reader: AvroDecoder | None = None) -> Any:
        """The body, resolved to ``reader``'s schema when one is given (Avro's schema
        resolution: fields the reader adds take their defaults, fields it lacks are skipped)."""
        stream = io.BytesIO(body)
        recursive = self.recursive or (reader is not None and reader.recursive)
        read = _read_py.schemaless_reader if recursive else fastavro.schemaless_reader
        try:
            value = plain(read(stream, self.schema, None if reader is None else reader.schema))
        except Exception as exc:  # EOFError, IndexError, UnicodeDecodeError, RecursionError, ...
            raise BodyDecodeError(f"Avro body: {type(exc).__name__}: {exc}") from None
        if stream.tell() != len(body):
            raise BodyDecodeError(f"Avro body: {len(body) - stream.tell()} bytes after the value")
        return value


def json_value(data: bytes | memoryview) -> Any:
    """One JSON value (numbers beyond 64 bits too); raises ValueError."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return json.loads(bytes(data).decode("utf-8"), parse_constant=_no_constant)
        except RecursionError:
            raise ValueError("nested deeper than the interpreter's recursion limit") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class JsonSchemaDecoder:
    schema_type = SchemaType.JSON

    def __init__(self, registered: Registered, references: Mapping[str, Registered]) -> None:
        try:
            schema = json_value(registered.schema.encode("utf-8"))
            default = referencing.jsonschema.DRAFT7
            resources = [
                (name, referencing.Resource.from_contents(json_value(ref.schema.encode()), default))
                for name, ref in references.items()
            ]
            registry: referencing.Registry[Any] = referencing.Registry().with_resources(resources)
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
            cls.check_schema(schema)
            self.validator = cls(schema, registry=registry)
        except Exception as exc:  # ValueError, jsonschema's SchemaError, ...
            raise SchemaUnusableError(f"JSON schema: {type(exc).__name__}: {exc}") from None

    def decode(self, body: memoryview) -> Any:
        try:
            value = json_value(body)
        except ValueError as exc:
            raise BodyDecodeError(f"JSON body: not one JSON value ({exc})") from None
        try:
            error = jsonschema.exceptions.best_match(self.validator.iter_errors(value))
        except Exception as exc:  # an unresolvable $ref, a recursion without end, ...
            raise BodyDecodeError(
                f"JSON body: not validated: {type(exc).__name__}: {exc}"
            ) from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the root"
            raise BodyDecodeError(f"JSON body rejected by its schema at {where}: {error.message}")
        return bytes(body).replace(b"\n", b" ").replace(b"\r", b" ")
