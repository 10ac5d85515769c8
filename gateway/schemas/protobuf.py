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
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError

from gateway.schemas.decoders import BodyDecodeError, SchemaUnusableError
from gateway.schemas.registry import Registered, SchemaType
from gateway.schemas.wire import WireFormatError, message_indexes

MAIN_PROTO: Final = "default"  # the main file's name in its pool (as Confluent's deserializer
# names it; a text schema is compiled under this name too)
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


def _serialized(name: str, schema: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The schema's serialized descriptor, or None when it is not one (``.proto`` text)."""
    try:
        raw = base64.b64decode(schema.encode("ascii"), validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, UnicodeEncodeError, ValueError, DecodeError):
        return None
    proto.name = name
    return proto


_PROTOC = threading.Lock()  # protoc runs in this process: one compile at a time


def _compile(
    texts: dict[str, str], known: list[descriptor_pb2.FileDescriptorProto]
) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """``.proto`` texts by file name compiled by protoc (grpcio-tools, the ``protobuf-text``
    extra), the serialized files they may import given as a descriptor set."""
    try:
        import grpc_tools  # type: ignore[import-untyped]  # noqa: PLC0415 - optional
        from grpc_tools import protoc  # noqa: PLC0415
    except ImportError:
        raise SchemaUnusableError(
            f"Protobuf schemas {sorted(texts)} are .proto text, not the serialized form "
            "(?format=serialized): parsing text needs grpcio-tools (pip install "
            "'tiered-gateway[protobuf-text]')"
        ) from None
    include = str(Path(grpc_tools.__file__).parent / "_proto")
    with tempfile.TemporaryDirectory(prefix="tg-proto-") as tmp, _PROTOC:
        root = Path(tmp)
        for name, text in texts.items():
            (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "src" / name).write_text(text)
        args = ["protoc", f"-I{root / 'src'}", f"-I{include}", "--include_imports",
                f"--descriptor_set_out={root / 'out.pb'}"]  # fmt: skip
        if known:
            (root / "in.pb").write_bytes(
                descriptor_pb2.FileDescriptorSet(file=known).SerializeToString()
            )
            args.append(f"--descriptor_set_in={root / 'in.pb'}")
        if protoc.main([*args, *texts]) != 0:
            raise SchemaUnusableError(f"Protobuf schemas {sorted(texts)}: protoc refused the text")
        compiled = descriptor_pb2.FileDescriptorSet.FromString((root / "out.pb").read_bytes())
    return {f.name: f for f in compiled.file if f.name in texts}


class ProtobufDecoder:
    schema_type = SchemaType.PROTOBUF

    def __init__(self, registered: Registered, references: Mapping[str, Registered]) -> None:
        self.pool = descriptor_pool.DescriptorPool()
        for serialized in _BUILTINS:
            self.pool.AddSerializedFile(serialized)
        try:
            files = self._files({**references, MAIN_PROTO: registered})
            for name, proto in files.items():  # in dependency order, the main file last
                if not self._has(name):  # a well-known type a Java serializer registered
                    self.pool.Add(proto)
            self.file = files[MAIN_PROTO]
            self.package = self.file.package
        except SchemaUnusableError:
            raise
        except Exception as exc:  # TypeError: an import not in the pool, a duplicate symbol
            raise SchemaUnusableError(f"Protobuf schema: {type(exc).__name__}: {exc}") from None
        self._types: dict[tuple[int, ...], Any] = {}

    @staticmethod
    def _files(schemas: dict[str, Registered]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
        """Each schema's descriptor by file name: the serialized form as it is, ``.proto`` text
        compiled (with the serialized ones it imports)."""
        files = {name: _serialized(name, r.schema) for name, r in schemas.items()}
        texts = {name: schemas[name].schema for name, f in files.items() if f is None}
        if texts:
            known = [f for f in files.values() if f is not None]
            files.update(_compile(texts, known))
        return {name: f for name, f in files.items() if f is not None}

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
