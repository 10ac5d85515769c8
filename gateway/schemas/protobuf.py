"""Protobuf bodies: the registry's serialized ``FileDescriptorProto`` (references added to the
same pool under their import names, the well-known types built in), the message type found by
the wire format's message indexes, rendered by the proto3 JSON mapping with the original field
names (``MessageToDict(preserving_proto_field_name=True)``: 64-bit integers as strings, enums
as names, bytes as base64, fields at their default value omitted).

Imports the pool cannot resolve (``.proto`` text with no serialized form, ``confluent/*.proto``)
are a :class:`SchemaUnusableError` naming them."""

from __future__ import annotations

import base64
import binascii
import importlib
from collections.abc import Mapping
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError

from gateway.schemas.decoders import BodyDecodeError, SchemaUnusableError
from gateway.schemas.registry import Registered, SchemaType
from gateway.schemas.wire import WireFormatError, message_indexes

MAIN: Final = "default"  # the main file's name in its pool (as Confluent's deserializer names it)
_WELL_KNOWN: Final = (
    "any", "source_context", "type", "api", "descriptor", "duration", "empty", "field_mask",
    "struct", "timestamp", "wrappers",
)  # fmt: skip
_GOOGLE_TYPE: Final = (
    "calendar_period", "color", "date", "datetime", "dayofweek", "expr", "fraction", "latlng",
    "money", "month", "postal_address", "quaternion", "timeofday",
)  # fmt: skip


def _builtins() -> list[bytes]:
    """The serialized files every pool starts with: the well-known types, and ``google/type``
    when googleapis-common-protos is installed."""
    files = [
        importlib.import_module(f"google.protobuf.{name}_pb2").DESCRIPTOR.serialized_pb
        for name in _WELL_KNOWN
    ]
    for name in _GOOGLE_TYPE:
        try:
            files.append(
                importlib.import_module(f"google.type.{name}_pb2").DESCRIPTOR.serialized_pb
            )
        except ImportError:
            break
    return files


_BUILTINS: Final = _builtins()


def _file(name: str, schema: str) -> descriptor_pb2.FileDescriptorProto:
    try:
        raw = base64.b64decode(schema.encode("ascii"), validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, UnicodeEncodeError, ValueError, DecodeError):
        raise SchemaUnusableError(
            f"Protobuf schema {name}: not a serialized descriptor (the registry must serve "
            "?format=serialized; .proto text is not parsed here)"
        ) from None
    proto.name = name
    return proto


class ProtobufDecoder:
    schema_type = SchemaType.PROTOBUF

    def __init__(self, registered: Registered, references: Mapping[str, Registered]) -> None:
        self.pool = descriptor_pool.DescriptorPool()
        for serialized in _BUILTINS:
            self.pool.AddSerializedFile(serialized)
        try:
            for name, ref in references.items():  # in dependency order
                if not self._has(name):  # a well-known type a Java serializer registered
                    self.pool.Add(_file(name, ref.schema))
            self.file = _file(MAIN, registered.schema)
            self.pool.Add(self.file)
            self.package = self.file.package
        except SchemaUnusableError:
            raise
        except Exception as exc:  # TypeError: an import not in the pool, a duplicate symbol
            raise SchemaUnusableError(f"Protobuf schema: {type(exc).__name__}: {exc}") from None
        self._types: dict[tuple[int, ...], Any] = {}

    def _has(self, name: str) -> bool:
        try:
            self.pool.FindFileByName(name)
        except KeyError:
            return False
        return True

    def message_class(self, indexes: tuple[int, ...]) -> Any:
        """The message class at ``indexes`` (cached)."""
        found = self._types.get(indexes)
        if found is not None:
            return found
        names, level = [], list(self.file.message_type)
        for index in indexes:
            if index >= len(level):
                raise BodyDecodeError(f"message indexes {list(indexes)}: no message there")
            names.append(level[index].name)
            level = list(level[index].nested_type)
        full = ".".join(([self.package] if self.package else []) + names)
        descriptor: Descriptor = self.pool.FindMessageTypeByName(full)
        found = self._types[indexes] = message_factory.GetMessageClass(descriptor)
        return found

    def decode(self, body: memoryview) -> Any:
        try:
            indexes, message = message_indexes(body)
        except WireFormatError as exc:
            raise BodyDecodeError(str(exc)) from None
        cls = self.message_class(indexes)
        try:
            parsed = cls.FromString(bytes(message))
            return json_format.MessageToDict(
                parsed, preserving_proto_field_name=True, descriptor_pool=self.pool
            )
        except Exception as exc:  # DecodeError; a Timestamp out of range; an Any unknown type
            raise BodyDecodeError(f"Protobuf body: {type(exc).__name__}: {exc}") from None
