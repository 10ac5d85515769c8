"""The query of ``GET /v1/topics/{topic}/partitions/{partition}/records``
(:mod:`gateway.api.records`), one pydantic model whose descriptions are the contract's
(``openapi.yaml``)."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.api.formats import EmbeddedFormat, RecordFormat
from gateway.api.params import MAX_BYTES_MAX, TIMEOUT_MS, TIMEOUT_MS_MAX
from gateway.service.types import IsolationLevel

_FORMAT: Final = (
    "how {} are written: base64 (standard), hex, string (UTF-8) or json (an embedded JSON "
    "value); not valid in it: 422 invalid_format. JSON and NDJSON only"
)
_READER: Final = (
    "avro {}s only: resolve each record to this registered schema (Avro schema resolution: "
    "fields it adds take their defaults, fields it lacks are dropped; not resolvable: "
    "422 invalid_format)"
)
_SCHEMA_FORMAT: Final = (
    _FORMAT[:-24] + "; or decoded with the schema registry: avro, protobuf, jsonschema (the "
    "Confluent wire format; the record gains {}_schema_id), auto (the registry's schema type "
    "for a framed payload, else string when UTF-8, else base64). JSON and NDJSON only"
)


class RecordsQuery(BaseModel):
    """The query of a records request, validated as one model (one pass of pydantic-core
    instead of FastAPI's per-parameter machinery: issue 15)."""

    model_config = ConfigDict(extra="ignore")

    offset: int = Field(ge=0, description="the first offset wanted", examples=[0])
    max_bytes: int | None = Field(
        None,
        ge=1,
        description="record batch bytes to read (at least one batch); for NDJSON the whole "
        "stream's budget. Default: the default_max_bytes setting, for NDJSON "
        "max_response_bytes; at most max_response_bytes (the maximum here is its default)",
        json_schema_extra=MAX_BYTES_MAX,
    )
    isolation_level: IsolationLevel = Field(
        IsolationLevel.READ_UNCOMMITTED,
        description="read_committed drops aborted transactions and stops at the last stable "
        "offset (the first offset of a transaction not decided in the remote tier), as a Kafka "
        "consumer does (any case)",
    )
    key_format: RecordFormat = Field(
        RecordFormat.BASE64, description=_SCHEMA_FORMAT.format("keys", "key")
    )
    value_format: RecordFormat = Field(
        RecordFormat.BASE64, description=_SCHEMA_FORMAT.format("values", "value")
    )
    header_format: EmbeddedFormat = Field(
        EmbeddedFormat.BASE64, description=_FORMAT.format("header values")
    )
    key_reader_schema_id: int | None = Field(
        None, ge=1, le=2**31 - 1, description=_READER.format("key")
    )
    value_reader_schema_id: int | None = Field(
        None, ge=1, le=2**31 - 1, description=_READER.format("value")
    )
    decode_errors: Literal["fail", "raw"] = Field(
        "fail",
        description="fail: a key, value or header value not valid in its format is 422 "
        "invalid_format naming its offset; raw: the page goes on and that field is null "
        "beside key_error / value_error ({message, raw}: raw in standard base64; a header: "
        "error and raw beside its value)",
    )
    timeout_ms: int | None = Field(
        None, ge=1, description=TIMEOUT_MS, json_schema_extra=TIMEOUT_MS_MAX
    )
