"""Records whose keys or values are decoded with a registry schema (``avro``, ``protobuf``,
``jsonschema``, ``auto``), or read with ``decode_errors=raw``: one object per record, written by
``orjson`` (the embedded formats' text goes in as it is, an ``orjson.Fragment``).

A record's object is the plain one (:mod:`gateway.api.recordjson`) plus, for a key or value in
a schema format (or ``auto``), ``key_schema_id`` / ``value_schema_id``: the id its bytes name,
null when they name none. ``auto`` decodes by the schema type the registry gives the id of a
framed payload (magic byte 0); anything else (not framed, an id the registry does not have, no
registry) is ``string`` when it is UTF-8, else ``base64``.

A key, value or header value that does not decode is 422 ``invalid_format`` naming the offset;
with ``decode_errors=raw`` the page goes on and the field is null beside
``{key,value}_error: {"message", "raw"}`` (header values: ``error`` and ``raw`` in the header),
``raw`` the bytes in standard base64.
"""

from __future__ import annotations

import binascii
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.api.formats import EmbeddedFormat, Field, RecordFormat, field
from gateway.api.recordjson import groups
from gateway.errors import InvalidFormatError
from gateway.kafka.records import Header
from gateway.schemas.cache import Loaded, Schemas
from gateway.schemas.decoders import AvroDecoder, BodyDecodeError, SchemaUnusableError
from gateway.schemas.registry import SchemaType
from gateway.schemas.wire import WireFormatError, schema_id, split
from gateway.service.types import FetchedRecord

SCHEMA_TYPES: Final = {
    RecordFormat.AVRO: SchemaType.AVRO,
    RecordFormat.PROTOBUF: SchemaType.PROTOBUF,
    RecordFormat.JSONSCHEMA: SchemaType.JSON,
}
_TYPES: Final = ("CreateTime", "LogAppendTime")
NO_REGISTRY: Final = "no schema registry is configured (schema_registry_url or schema_dir)"
_BASE64: Final = field(EmbeddedFormat.BASE64, "")
_STRING: Final = field(EmbeddedFormat.STRING, "")


def _raw(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


class _Side:
    """How a key (or a value) is written: ``text`` gives (its JSON value, its schema id)."""

    def __init__(
        self, fmt: RecordFormat, parameter: str, registry: bool = True, reader: int | None = None
    ) -> None:
        self.fmt, self.parameter, self.registry, self.reader = fmt, parameter, registry, reader
        self.loaded: dict[int, Loaded] = {}
        embedded = fmt.embedded
        self.plain: Field | None = None if embedded is None else field(embedded, parameter)
        self.schema_type = SCHEMA_TYPES.get(fmt)

    def ids(self, data: bytes | None) -> int | None:
        return None if data is None or self.plain is not None else schema_id(data)

    def text(self, data: bytes, loaded: dict[int, Loaded]) -> tuple[Any, int | None]:
        self.loaded = loaded
        if self.plain is not None:
            return orjson.Fragment(self.plain.token(data)), None
        found = schema_id(data)
        decoder = None if found is None else loaded.get(found)
        if self.schema_type is None and (decoder is None or found is None):  # auto, not ours
            try:
                return orjson.Fragment(_STRING.encode(data)), found
            except InvalidFormatError:
                return _raw(data), found
        return self._decoded(data, decoder, found)

    def _decoded(self, data: bytes, decoder: Loaded, found: int | None) -> tuple[Any, int | None]:
        fail = f"{self.parameter}={self.fmt.value}"
        try:
            schema, body = split(data)
        except WireFormatError as exc:
            raise InvalidFormatError(f"{fail}: {exc}", self.parameter) from None
        if decoder is None:
            why = f"no schema has id {schema}" if self.registry else NO_REGISTRY
            raise InvalidFormatError(f"{fail}: {why}", self.parameter)
        if isinstance(decoder, SchemaUnusableError):
            raise InvalidFormatError(f"{fail}: {decoder}", self.parameter)
        if self.schema_type is not None and decoder.schema_type is not self.schema_type:
            kind = decoder.schema_type.value
            raise InvalidFormatError(f"{fail}: schema id {schema} is {kind}", self.parameter)
        try:
            if isinstance(decoder, AvroDecoder) and self.reader is not None:
                value = decoder.decode(body, self._reader(fail, self.reader))
            else:
                value = decoder.decode(body)
        except BodyDecodeError as exc:
            raise InvalidFormatError(f"{fail}: schema id {schema}: {exc}", self.parameter) from None
        return (orjson.Fragment(value) if isinstance(value, bytes) else value), found

    def _reader(self, fail: str, reader: int) -> AvroDecoder:
        found = self.loaded.get(reader)
        if not isinstance(found, AvroDecoder):
            why = found if isinstance(found, SchemaUnusableError) else "not an Avro schema here"
            raise InvalidFormatError(f"{fail}: reader schema id {reader}: {why}", self.parameter)
        return found


@dataclass(frozen=True, slots=True)
class Decoding:
    """The formats of a request that decodes (see the module docstring)."""

    key: RecordFormat
    value: RecordFormat
    header: EmbeddedFormat
    raw_errors: bool
    schemas: Schemas | None
    readers: tuple[int | None, int | None] = (None, None)  # Avro reader schema ids: key, value

    @classmethod
    def of(
        cls,
        key: RecordFormat,
        value: RecordFormat,
        header: EmbeddedFormat,
        raw_errors: bool,
        schemas: Schemas | None,
        *,
        readers: tuple[int | None, int | None] = (None, None),
    ) -> Decoding | None:
        """None when nothing decodes (the plain writers serve the request). Without a
        registry a schema format is still a valid request: each framed key or value is then
        a record that does not decode (422 naming it, or ``decode_errors=raw``), saying why."""
        if not raw_errors and key.embedded is not None and value.embedded is not None:
            return None
        return cls(key, value, header, raw_errors, schemas, readers)

    async def prepare(self, records: Sequence[FetchedRecord]) -> dict[int, Loaded]:
        """The decoders of every schema id the page's keys and values name."""
        if self.schemas is None:
            return {}
        key, value = _Side(self.key, ""), _Side(self.value, "")
        ids = {
            i
            for group in groups(records)
            for i in itertools.chain(map(key.ids, group.keys), map(value.ids, group.values))
            if i is not None
        }
        if ids:
            ids |= {r for r in self.readers if r is not None}
        return await self.schemas.decoders(ids) if ids else {}

    def write(
        self, records: Sequence[FetchedRecord], loaded: dict[int, Loaded], sep: bytes
    ) -> tuple[list[bytes], InvalidFormatError | None]:
        """The records' text in pieces (``sep`` between them), up to the first record that
        does not decode (and its error; never with ``raw_errors``)."""
        return _Writer(self, loaded).write(records, sep)


class _Writer:
    def __init__(self, decoding: Decoding, loaded: dict[int, Loaded]) -> None:
        registry = decoding.schemas is not None
        self.key = _Side(decoding.key, "key_format", registry, decoding.readers[0])
        self.value = _Side(decoding.value, "value_format", registry, decoding.readers[1])
        self.header = field(decoding.header, "header_format")
        self.raw_errors, self.loaded = decoding.raw_errors, loaded

    def _side(self, doc: dict[str, Any], name: str, side: _Side, data: bytes | None) -> None:
        found = side.ids(data) if data is not None else None
        if data is None:
            doc[name] = None
        else:
            try:
                doc[name], found = side.text(data, self.loaded)
            except InvalidFormatError as exc:
                if not self.raw_errors:
                    raise
                doc[name] = None
                doc[f"{name}_error"] = {"message": str(exc), "raw": _raw(data)}
        if side.plain is None:
            doc[f"{name}_schema_id"] = found

    def _headers(self, headers: Iterable[Header]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for key, data in headers:
            item: dict[str, Any] = {"key": key}
            try:
                item["value"] = orjson.Fragment(self.header.token(data))
            except InvalidFormatError as exc:
                if not self.raw_errors or data is None:
                    raise
                item.update(value=None, error=str(exc), raw=_raw(data))
            out.append(item)
        return out

    def write(
        self, records: Sequence[FetchedRecord], sep: bytes
    ) -> tuple[list[bytes], InvalidFormatError | None]:
        out: list[bytes] = []
        for group in groups(records):
            kind = _TYPES[group.log_append_time]
            columns = (group.offsets, group.timestamps, group.keys, group.values)
            for offset, stamp, key, value, headers in zip(
                *columns, group.headers or itertools.repeat(()), strict=False
            ):
                doc: dict[str, Any] = {"offset": offset, "timestamp": stamp, "timestamp_type": kind}
                try:
                    self._side(doc, "key", self.key, key)
                    self._side(doc, "value", self.value, value)
                    doc["headers"] = self._headers(headers)
                except InvalidFormatError as exc:
                    return out, exc.at(offset)
                doc["leader_epoch"] = group.leader_epoch
                if out:
                    out.append(sep)
                out.append(orjson.dumps(doc))
        return out, None
