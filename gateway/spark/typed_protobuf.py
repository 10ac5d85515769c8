"""Protobuf payloads into values Arrow takes for a typed column, and those columns' types
(:mod:`gateway.spark.typed` has the rules)."""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa
from google.protobuf import descriptor_pb2, json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from gateway.errors import ConfigurationError
from gateway.schemas.decoders import BodyDecodeError
from gateway.schemas.protobuf import ProtobufDecoder
from gateway.schemas.wire import WireFormatError, message_indexes
from gateway.spark.typed_arrow import JSON_TEXT, UTC, Schema

_FD = FieldDescriptor
_PROTO_SCALARS: Final = {
    _FD.TYPE_DOUBLE: pa.float64(), _FD.TYPE_FLOAT: pa.float32(), _FD.TYPE_INT64: pa.int64(),
    _FD.TYPE_UINT64: pa.uint64(), _FD.TYPE_INT32: pa.int32(), _FD.TYPE_FIXED64: pa.uint64(),
    _FD.TYPE_FIXED32: pa.uint32(), _FD.TYPE_BOOL: pa.bool_(), _FD.TYPE_STRING: pa.string(),
    _FD.TYPE_BYTES: pa.binary(), _FD.TYPE_UINT32: pa.uint32(), _FD.TYPE_ENUM: pa.string(),
    _FD.TYPE_SFIXED32: pa.int32(), _FD.TYPE_SFIXED64: pa.int64(), _FD.TYPE_SINT32: pa.int32(),
    _FD.TYPE_SINT64: pa.int64(),
}  # fmt: skip
_WRAPPERS: Final = {
    f"google.protobuf.{n}Value": t for n, t in (
        ("Double", pa.float64()), ("Float", pa.float32()), ("Int64", pa.int64()),
        ("UInt64", pa.uint64()), ("Int32", pa.int32()), ("UInt32", pa.uint32()),
        ("Bool", pa.bool_()), ("String", pa.string()), ("Bytes", pa.binary()))
}  # fmt: skip
_AS_JSON: Final = frozenset({"google.protobuf.Struct", "google.protobuf.Value",
                             "google.protobuf.ListValue", "google.protobuf.Any"})  # fmt: skip
_NS: Final = 1_000_000_000


def _message_arrow(desc: Descriptor, stack: tuple[str, ...] = ()) -> pa.DataType:
    name = desc.full_name
    if name == "google.protobuf.Timestamp":
        return pa.timestamp("us", UTC)  # Spark reads no nanosecond timestamps
    if name == "google.protobuf.Duration":
        return pa.int64()  # nanoseconds: Spark reads no Parquet duration
    if name in _WRAPPERS:
        return _WRAPPERS[name]
    if name in _AS_JSON:
        return JSON_TEXT
    if name in stack:
        raise ConfigurationError(f"Protobuf message {name} is recursive: no Arrow column holds it")
    return pa.struct([pa.field(f.name, _field_arrow(f, (*stack, name))) for f in desc.fields])


def _field_arrow(f: FieldDescriptor, stack: tuple[str, ...]) -> pa.DataType:
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return pa.map_(_field_arrow(key, stack), _field_arrow(value, stack))
    one = (
        _message_arrow(f.message_type, stack)
        if f.message_type is not None
        else _PROTO_SCALARS[f.type]
    )
    return pa.list_(one) if _repeated(f) else one


def _repeated(f: FieldDescriptor) -> bool:
    return bool(f.is_repeated)


def _message_value(message: Any) -> Any:
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Timestamp":
        if message.nanos % 1000:
            raise BodyDecodeError(
                f"a Timestamp with nanoseconds ({message.seconds}s {message.nanos}ns): the "
                "column holds microseconds"
            )
        return message.seconds * 1_000_000 + message.nanos // 1000
    if name == "google.protobuf.Duration":
        return message.seconds * _NS + message.nanos
    if name in _WRAPPERS:
        return message.value
    if name in _AS_JSON:
        return json_format.MessageToJson(message, indent=None, preserving_proto_field_name=True)
    out: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            out[f.name] = [(k, _scalar(f.message_type.fields_by_name["value"], v))
                           for k, v in value.items()]  # fmt: skip
        elif _repeated(f):
            out[f.name] = [_scalar(f, v) for v in value]
        elif f.has_presence and not message.HasField(f.name):
            out[f.name] = None  # a message not set, an optional or oneof member not set
        else:
            out[f.name] = _scalar(f, value)
    return out


def _scalar(f: FieldDescriptor, value: Any) -> Any:
    if f.message_type is not None:
        return _message_value(value)
    if f.enum_type is not None:
        found = f.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    return value


class ProtobufReader:
    def __init__(self, schema: Schema, message: str | None) -> None:
        self.decoder = ProtobufDecoder(*schema)
        if message is None:
            first = self.decoder.file.message_type[0].name
            package = self.decoder.package
            message = f"{package}.{first}" if package else first
        self.message = message
        self.desc = self.decoder.pool.FindMessageTypeByName(message)
        self.arrow = _message_arrow(self.desc)
        self.indexes = _indexes_of(self.decoder.file, message)

    def read(self, body: memoryview) -> Any:
        try:
            indexes, rest = message_indexes(body)
        except WireFormatError as exc:
            raise BodyDecodeError(str(exc)) from None
        if indexes != self.indexes:
            raise BodyDecodeError(
                f"message indexes {list(indexes)}, not the export's {self.message} "
                f"{list(self.indexes)} (choose it with --{{key,value}}-message)"
            )
        cls = self.decoder.message_class(indexes)
        try:
            return _message_value(cls.FromString(bytes(rest)))
        except Exception as exc:  # DecodeError
            raise BodyDecodeError(f"Protobuf body: {type(exc).__name__}: {exc}") from None


def _indexes_of(file: descriptor_pb2.FileDescriptorProto, full: str) -> tuple[int, ...]:
    names = full.removeprefix(f"{file.package}.").split(".") if file.package else full.split(".")
    level, path = list(file.message_type), []
    for name in names:
        found = [i for i, m in enumerate(level) if m.name == name]
        if not found:
            raise ConfigurationError(f"no Protobuf message {full} in the schema")
        path.append(found[0])
        level = list(level[found[0]].nested_type)
    return tuple(path)
