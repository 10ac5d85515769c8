"""Typed exports (issue 31): keys and values in a registry format become typed Arrow columns.

``export --value-format avro|protobuf|jsonschema`` (and ``--key-format``) replaces the binary
``value`` column with one typed column of the same name, and adds ``value_schema_id`` (int32):
a struct of the record's fields when the schema is a record (Spark SQL: ``value.field`` or
``value.*``), so no decoded field can collide with a Kafka column. Types:

* Avro: boolean, int32, int64, float32, float64, binary, string; ``fixed`` fixed-size binary;
  enums their symbols (string); arrays lists; maps ``map<string, T>``; records structs; a union
  of null and one type that type (nullable); a union of several non-null types the JSON text of
  the value (string), as the HTTP API writes it; ``decimal`` decimal128 (past 38 digits, which
  Spark cannot read, a string in plain notation); ``date`` date32; ``timestamp-millis`` /
  ``-micros`` timestamp with UTC; ``local-timestamp-*`` timestamp without a zone; ``uuid``
  string; ``time-millis`` / ``time-micros`` their int32 / int64 (Spark reads no Parquet TIME).
* Protobuf (the file's first message, or ``--value-message``): scalars by their width and
  sign, enums by name, repeated fields lists, maps ``map<K, V>``, messages structs (a message,
  ``optional`` or ``oneof`` member not set: null); ``google.protobuf.Timestamp`` timestamp[us,
  UTC] (Spark reads no nanoseconds: a Timestamp with a finer part fails the run, never
  rounded), ``Duration`` its nanoseconds (int64), the wrappers their nullable scalar,
  ``Struct``/``Value``/``ListValue``/``Any`` their JSON text.
* JSON Schema: an object with ``properties`` a struct, ``string``/``integer``/``number``/
  ``boolean`` string/int64/float64/bool (an integer with no exact double, in a ``number``,
  fails the run), an array with ``items`` a list; anything else (no type, several types,
  ``additionalProperties``) the JSON text.

The versions of the subject (Confluent's TopicNameStrategy ``<topic>-value``, or
``--value-subject``) merge by field name when each adds or drops fields and keeps the type of
those it shares; the column is their union (a field absent from a record's version is null). A
record whose schema id is not a version of the subject, or whose version changes a shared
field's type, fails the run naming its offset and schema id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

from gateway.errors import ConfigurationError, ExportFailedError
from gateway.schemas.decoders import BodyDecodeError
from gateway.schemas.registry import SchemaType
from gateway.schemas.wire import WireFormatError, split
from gateway.spark.typed_arrow import AvroReader, JsonReader, Schema
from gateway.spark.typed_protobuf import ProtobufReader

FORMATS: Final = {"avro": SchemaType.AVRO, "protobuf": SchemaType.PROTOBUF,
                  "jsonschema": SchemaType.JSON}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TypedSide:
    """How one side (key or value) is typed: shipped to every task (small, picklable)."""

    side: str  # "key" or "value"
    fmt: str
    subject: str
    message: str | None  # Protobuf: the message type's full name (None: the file's first)
    schemas: dict[int, Schema]  # every version that merged
    arrow: pa.DataType
    refused: dict[int, str] = field(default_factory=dict)  # versions that did not merge: why


# --- merging versions, typing batches --------------------------------------------------------

Reader = AvroReader | ProtobufReader | JsonReader


def reader_of(fmt: str, schema: Schema, message: str | None) -> Reader:
    if fmt == "avro":
        return AvroReader(schema)
    if fmt == "protobuf":
        return ProtobufReader(schema, message)
    return JsonReader(schema)


def merge(a: pa.DataType, b: pa.DataType, where: str = "") -> pa.DataType:
    """The union by field name of two types; raises ``ValueError`` naming the first field whose
    type changed."""
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {f.name: f.type for f in a}
        for f in b:
            fields[f.name] = (
                merge(fields[f.name], f.type, f"{where}{f.name}.") if f.name in fields else f.type
            )
        return pa.struct([pa.field(k, v) for k, v in fields.items()])
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(merge(a.value_type, b.value_type, f"{where}[]."))
    if a != b:
        raise ValueError(
            f"{where.rstrip('.') or 'the value'} is {a} in one version, {b} in another"
        )
    return a


def resolve(
    side: str, fmt: str, subject: str, message: str | None, versions: Mapping[int, Schema]
) -> TypedSide:
    """Merge ``versions`` (id -> schema, oldest first) of ``subject``; see the module docstring."""
    arrow: pa.DataType | None = None
    merged: dict[int, Schema] = {}
    refused: dict[int, str] = {}
    for schema_id, schema in versions.items():
        if schema[0].schema_type is not FORMATS[fmt]:
            refused[schema_id] = f"a {schema[0].schema_type.value} schema, not {fmt}"
            continue
        try:
            kind = reader_of(fmt, schema, message).arrow
            arrow = kind if arrow is None else merge(arrow, kind)
        except (ValueError, ConfigurationError) as exc:  # SchemaUnusableError is a ValueError
            refused[schema_id] = str(exc)
            continue
        merged[schema_id] = schema
    if arrow is None:
        raise ConfigurationError(
            f"{side}: no version of subject {subject} gives a typed column: {refused}"
        )
    return TypedSide(side, fmt, subject, message, merged, arrow, refused)


_READERS: dict[tuple[str, str | None, int, str], Reader] = {}
MAX_READERS: Final = 256


def _reader(typed: TypedSide, schema_id: int) -> Reader:
    """The reader of ``schema_id``, built once per executor process (ids are immutable; the
    schema text is in the key in case two registries give one id to two schemas)."""
    schema = typed.schemas[schema_id]
    key = (typed.fmt, typed.message, schema_id, schema[0].schema)
    found = _READERS.get(key)
    if found is None:
        if len(_READERS) >= MAX_READERS:
            _READERS.clear()
        found = _READERS[key] = reader_of(typed.fmt, schema, typed.message)
    return found


def column(typed: TypedSide, data: pa.Array, offsets: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The typed column and the schema ids of one batch's ``data`` (binary); a record that does
    not fit raises :class:`ExportFailedError` naming its offset and schema id."""
    values: list[Any] = []
    ids: list[int | None] = []
    for offset, raw in zip(offsets.to_pylist(), data.to_pylist(), strict=True):
        if raw is None:
            values.append(None)
            ids.append(None)
            continue
        try:
            schema_id, body = split(raw)
        except WireFormatError as exc:
            raise ExportFailedError(
                f"offset {offset}: the {typed.side} is not framed: {exc}"
            ) from None
        if schema_id not in typed.schemas:
            why = typed.refused.get(schema_id, f"not a version of subject {typed.subject}")
            raise ExportFailedError(f"offset {offset}: {typed.side} schema id {schema_id}: {why}")
        try:
            values.append(_reader(typed, schema_id).read(body))
        except BodyDecodeError as exc:
            raise ExportFailedError(
                f"offset {offset}: {typed.side} schema id {schema_id}: {exc}"
            ) from None
        ids.append(schema_id)
    try:
        typed_array = pa.array(values, typed.arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        raise ExportFailedError(
            f"offsets {first}-{last}: the {typed.side}s do not fit {typed.arrow}: {exc}"
        ) from None
    return typed_array, pa.array(ids, pa.int32())


def typed_batch(batch: pa.RecordBatch, sides: tuple[TypedSide, ...]) -> pa.RecordBatch:
    """``batch`` with each typed side's binary column replaced, its schema ids beside it."""
    offsets = batch.column("offset")
    for typed in sides:
        at = batch.schema.get_field_index(typed.side)
        values, ids = column(typed, batch.column(at), offsets)
        batch = _set(batch, at, values)
        batch = _insert(batch, at + 1, f"{typed.side}_schema_id", ids)
    return batch


def _set(batch: pa.RecordBatch, at: int, values: pa.Array) -> pa.RecordBatch:
    columns = list(batch.columns)
    columns[at] = values
    names = list(batch.schema.names)
    return pa.RecordBatch.from_arrays(columns, names=names)


def _insert(batch: pa.RecordBatch, at: int, name: str, values: pa.Array) -> pa.RecordBatch:
    columns, names = list(batch.columns), list(batch.schema.names)
    columns.insert(at, values)
    names.insert(at, name)
    return pa.RecordBatch.from_arrays(columns, names=names)


def typed_arrow_schema(base: pa.Schema, sides: tuple[TypedSide, ...]) -> pa.Schema:
    """The files' schema: ``base`` (:func:`gateway.spark.columns.arrow_schema`) with each side's
    binary column typed and its ``*_schema_id`` beside it, as :func:`typed_batch` writes."""
    for typed in sides:
        at = base.get_field_index(typed.side)
        base = base.set(at, pa.field(typed.side, typed.arrow))
        base = base.insert(at + 1, pa.field(f"{typed.side}_schema_id", pa.int32()))
    return base


def _iceberg_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` in what Iceberg holds without loss: no unsigned integers (uint32 as int64,
    uint64 as decimal(20, 0)), timestamps in microseconds."""
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _iceberg_type(f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(_iceberg_type(kind.value_type))
    if pa.types.is_map(kind):
        return pa.map_(_iceberg_type(kind.key_type), _iceberg_type(kind.item_type))
    if kind == pa.uint32():
        return pa.int64()
    if kind == pa.uint64():
        return pa.decimal128(20, 0)
    if pa.types.is_timestamp(kind) and kind.unit == "ms":
        return pa.timestamp("us", kind.tz)
    return kind


def for_iceberg(typed: TypedSide) -> TypedSide:
    """``typed`` with its column in Iceberg's types (:func:`_iceberg_type`)."""
    return dataclasses.replace(typed, arrow=_iceberg_type(typed.arrow))


def _spark_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` as Spark's data source reads it from Arrow: Iceberg's lossless types, and
    plain strings and binaries."""
    kind = _iceberg_type(kind)
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _spark_type(f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(_spark_type(kind.value_type))
    if pa.types.is_map(kind):
        return pa.map_(_spark_type(kind.key_type), _spark_type(kind.item_type))
    if kind == pa.large_string():
        return pa.string()
    if pa.types.is_fixed_size_binary(kind):
        return pa.binary()
    return kind


def for_spark(typed: TypedSide) -> TypedSide:
    """``typed`` with its column in the types the ``tiered-kafka`` source hands Spark."""
    return dataclasses.replace(typed, arrow=_spark_type(typed.arrow))
