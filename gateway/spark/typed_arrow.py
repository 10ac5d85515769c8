"""Readers of registry payloads into values Arrow takes for a typed column, and those columns'
types (:mod:`gateway.spark.typed` has the rules): Avro and JSON Schema here, Protobuf in
:mod:`gateway.spark.typed_protobuf`."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any, Final

import fastavro
import orjson
import pyarrow as pa

from gateway.errors import ConfigurationError
from gateway.schemas.decoders import (
    AvroDecoder,
    BodyDecodeError,
    JsonSchemaDecoder,
    json_value,
    plain,
)
from gateway.schemas.registry import Registered

UTC: Final = "UTC"
Schema = tuple[Registered, dict[str, Registered]]  # a schema and its imports by name
JSON_TEXT: Final = pa.large_string()  # JSON text: apart from a string-typed field

# --- Avro ------------------------------------------------------------------------------------

_AVRO_PRIMITIVES: Final = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(), "null": pa.null(),
}  # fmt: skip
_AVRO_LOGICAL: Final = {  # times of day stay ints: Spark reads no Parquet TIME column
    "date": pa.date32(), "time-millis": pa.int32(), "time-micros": pa.int64(),
    "timestamp-millis": pa.timestamp("ms", UTC), "timestamp-micros": pa.timestamp("us", UTC),
    "local-timestamp-millis": pa.timestamp("ms"), "local-timestamp-micros": pa.timestamp("us"),
    "uuid": pa.string(),
}  # fmt: skip
_WIDE_DECIMAL: Final = pa.utf8()  # past 38 digits (Spark reads no decimal256): plain notation
_MIDNIGHT: Final = dt.datetime(1970, 1, 1)


def _avro_arrow(node: Any, named: dict[str, Any], stack: tuple[str, ...] = ()) -> pa.DataType:
    if isinstance(node, str):
        if node in stack:
            raise ConfigurationError(f"Avro type {node} is recursive: no Arrow column holds it")
        if node in named:
            return _avro_arrow(named[node], named, stack)
        return _AVRO_PRIMITIVES[node]
    if isinstance(node, list):
        others = [b for b in node if b != "null"]
        return _avro_arrow(others[0], named, stack) if len(others) == 1 else JSON_TEXT
    kind, logical = node["type"], node.get("logicalType")
    if logical == "decimal":
        precision, scale = int(node["precision"]), int(node.get("scale", 0))
        return pa.decimal128(precision, scale) if precision <= 38 else _WIDE_DECIMAL
    if logical in _AVRO_LOGICAL and not isinstance(kind, dict):
        return _AVRO_LOGICAL[logical]
    if kind in ("record", "error"):
        inner = (*stack, node["name"])
        return pa.struct([pa.field(f["name"], _avro_arrow(f["type"], named, inner))
                          for f in node["fields"]])  # fmt: skip
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary(int(node["size"]))
    if kind == "array":
        return pa.list_(_avro_arrow(node["items"], named, stack))
    if kind == "map":
        return pa.map_(pa.string(), _avro_arrow(node["values"], named, stack))
    return _avro_arrow(kind, named, stack)


def _logical(node: Any, logical: str, value: Any) -> Any:
    """A logical type's value (fastavro's conversion) as Arrow takes it for the type above."""
    if logical == "uuid":
        return str(value)  # fastavro reads a uuid.UUID
    if logical in ("time-millis", "time-micros"):
        micros = (dt.datetime.combine(_MIDNIGHT, value) - _MIDNIGHT) // dt.timedelta(microseconds=1)
        return micros // 1000 if logical == "time-millis" else micros
    if logical == "decimal" and int(node["precision"]) > 38:
        return format(value, "f")
    return value


def _avro_value(node: Any, value: Any, named: dict[str, Any]) -> Any:
    """fastavro's reading (logical types converted) as Arrow takes it for the type above."""
    if isinstance(node, str):
        return _avro_value(named[node], value, named) if node in named else value
    if isinstance(node, list):
        others = [b for b in node if b != "null"]
        if len(others) == 1:
            return None if value is None else _avro_value(others[0], value, named)
        return None if value is None else orjson.dumps(plain(value)).decode()
    kind, logical = node["type"], node.get("logicalType")
    if value is not None and logical is not None:
        return _logical(node, logical, value)
    if logical is not None or value is None:
        return value
    if kind in ("record", "error"):
        return {
            f["name"]: _avro_value(f["type"], value.get(f["name"]), named) for f in node["fields"]
        }
    if kind == "array":
        return [_avro_value(node["items"], v, named) for v in value]
    if kind == "map":
        return [(k, _avro_value(node["values"], v, named)) for k, v in value.items()]
    if isinstance(kind, dict | list):
        return _avro_value(kind, value, named)
    return value


class AvroReader:
    def __init__(self, schema: Schema) -> None:
        AvroDecoder(*schema)  # its refusals first: arrays of zero-width items
        self.named: dict[str, Any] = {}
        for ref in schema[1].values():
            fastavro.parse_schema(json.loads(ref.schema), named_schemas=self.named)
        self.parsed = fastavro.parse_schema(json.loads(schema[0].schema), named_schemas=self.named)
        self.arrow = _avro_arrow(self.parsed, self.named)

    def read(self, body: memoryview) -> Any:
        stream = io.BytesIO(body)
        try:
            value = fastavro.schemaless_reader(stream, self.parsed, None)
        except Exception as exc:  # as gateway.schemas.decoders: the reader's own errors
            raise BodyDecodeError(f"Avro body: {type(exc).__name__}: {exc}") from None
        if stream.tell() != len(body):
            raise BodyDecodeError(f"Avro body: {len(body) - stream.tell()} bytes after the value")
        return _avro_value(self.parsed, value, self.named)


# --- JSON Schema -----------------------------------------------------------------------------

_JSON_TYPES: Final = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
                      "boolean": pa.bool_()}  # fmt: skip


def _json_arrow(node: Any) -> pa.DataType:
    if not isinstance(node, dict):
        return JSON_TEXT
    kind = node.get("type")
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        kind = others[0] if len(others) == 1 else None
    if kind == "object" and "properties" in node and not node.get("additionalProperties"):
        return pa.struct([pa.field(k, _json_arrow(v)) for k, v in node["properties"].items()])
    if kind == "array" and isinstance(node.get("items"), dict):
        return pa.list_(_json_arrow(node["items"]))
    return _JSON_TYPES.get(kind, JSON_TEXT) if isinstance(kind, str) else JSON_TEXT


def _json_value(kind: pa.DataType, value: Any) -> Any:
    if value is None:
        return None
    if kind == JSON_TEXT and not isinstance(value, str):
        return orjson.dumps(value).decode()
    if pa.types.is_struct(kind) and isinstance(value, dict):
        return {f.name: _json_value(f.type, value.get(f.name)) for f in kind}
    if pa.types.is_list(kind) and isinstance(value, list):
        return [_json_value(kind.value_type, v) for v in value]
    if kind == pa.float64() and isinstance(value, int) and not isinstance(value, bool):
        if int(float(value)) != value:
            raise BodyDecodeError(f"the number {value} has no exact double")
        return float(value)
    if kind == pa.int64() and isinstance(value, float) and value.is_integer():
        return int(value)  # JSON Schema's integer takes 1.0
    return value


class JsonReader:
    def __init__(self, schema: Schema) -> None:
        self.decoder = JsonSchemaDecoder(*schema)
        self.arrow = _json_arrow(json.loads(schema[0].schema))

    def read(self, body: memoryview) -> Any:
        return _json_value(self.arrow, json_value(self.decoder.decode(body)))
