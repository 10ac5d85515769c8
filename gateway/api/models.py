"""Response bodies as pydantic models: the schema of ``openapi.yaml`` and the small responses.

Record responses are rendered straight to bytes by :mod:`gateway.api.render` (orjson) for
speed; :class:`RecordsResponse` only documents their shape. Topic ids are Kafka's
``Uuid.toString()`` (22 characters of URL-safe base64), as in the object keys.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, Field

LAST_STABLE_OFFSET: Final = (
    "read_committed: the remote last stable offset, the first offset of the oldest transaction "
    "whose COMMIT or ABORT marker is not tiered yet (log_end_offset when none is open); reads "
    "stop there. null for read_uncommitted (not computed: it reads to log_end_offset)"
)
END_OF_REMOTE_LOG: Final = (
    "next_offset has reached log_end_offset (read_committed: last_stable_offset): nothing more "
    "to read until more is tiered"
)


class ErrorBody(BaseModel):
    error_code: str = Field(description="stable machine-readable code, e.g. offset_out_of_range")
    message: str = Field(description="what went wrong; names the object for corrupt data")
    retriable: bool = Field(description="whether the same request may succeed later")
    parameter: str | None = Field(None, description="the invalid parameter (invalid_request)")
    log_start_offset: int | None = Field(
        None, description="the remote log start offset (offset_out_of_range, transaction_pending)"
    )
    log_end_offset: int | None = Field(
        None,
        description="one past the highest remote offset (offset_out_of_range, transaction_pending)",
    )
    last_stable_offset: int | None = Field(
        None,
        description="the remote last stable offset, where read_committed stops "
        "(transaction_pending)",
    )
    offset: int | None = Field(
        None, description="the record not valid in the asked format (invalid_format)"
    )


class Status(BaseModel):
    status: str


class Topic(BaseModel):
    name: str
    topic_ids: list[str] = Field(description="ids of the topic's incarnations, newest first")


class Topics(BaseModel):
    topics: list[Topic]


class LeaderEpoch(BaseModel):
    epoch: int
    start_offset: int


class Partition(BaseModel):
    topic: str
    topic_id: str
    partition: int
    remote_log_start_offset: int = Field(description="the lowest remote offset (0 when empty)")
    remote_log_end_offset: int = Field(
        description="one past the highest remote offset (as log_end_offset of a fetch)"
    )
    size: int = Field(description="bytes of the remote segments (KIP-852 remote_log_size)")
    segment_count: int
    leader_epochs: list[LeaderEpoch]


class Partitions(BaseModel):
    topic: str
    partitions: list[Partition]


class Segment(BaseModel):
    segment_id: str
    start_offset: int
    end_offset: int
    state: str = Field(description="COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED, ...")
    size: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: list[LeaderEpoch]
    txn_index_empty: bool
    displaced: bool = Field(
        description="a finished upload that a later upload of its offsets took the place of "
        "(a re-upload by a new leader): reads never reach it; retention removes it"
    )
    displaced_by: str | None = Field(
        description="when displaced: the segment reads reach at its start offset, if any"
    )


class Segments(BaseModel):
    topic: str
    partition: int
    segments: list[Segment]


class Header(BaseModel):
    key: str
    value: Any = Field(description="in header_format (default standard base64), or null")


class DecodeFailure(BaseModel):
    message: str = Field(description="why, as the 422 invalid_format would say it")
    raw: str = Field(description="the bytes, in standard base64")


class Record(BaseModel):
    offset: int
    timestamp: int = Field(description="milliseconds; -1 when the record has none")
    timestamp_type: Literal["CreateTime", "LogAppendTime"]
    key: Any = Field(description="in key_format (default standard base64), or null")
    value: Any = Field(description="in value_format (default standard base64), or null")
    headers: list[Header]
    leader_epoch: int | None
    key_schema_id: int | None = Field(
        None,
        description="key_format avro, protobuf, jsonschema or auto only: the schema id the key's "
        "Confluent framing names (null when it names none)",
    )
    value_schema_id: int | None = Field(
        None, description="value_format avro, protobuf, jsonschema or auto only: as key_schema_id"
    )
    key_error: DecodeFailure | None = Field(
        None, description="decode_errors=raw only: the key did not decode (key is then null)"
    )
    value_error: DecodeFailure | None = Field(
        None, description="decode_errors=raw only: the value did not decode (value is then null)"
    )


class RecordsResponse(BaseModel):
    topic: str
    topic_id: str
    partition: int
    records: list[Record]
    next_offset: int = Field(description="one past the last offset considered: fetch from here")
    log_start_offset: int
    log_end_offset: int = Field(description="one past the highest remote offset")
    last_stable_offset: int | None = Field(description=LAST_STABLE_OFFSET)
    end_of_remote_log: bool = Field(description=END_OF_REMOTE_LOG)


class StreamEnd(BaseModel):
    """The last line of an NDJSON stream that ended normally."""

    next_offset: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int | None = Field(description=LAST_STABLE_OFFSET)
    end_of_remote_log: bool = Field(description=END_OF_REMOTE_LOG)


class Offset(BaseModel):
    offset: int = Field(description="-1 when no record matches")
    timestamp: int = Field(description="-1 when no record matches")
    leader_epoch: int | None


_ERROR_DESCRIPTIONS: dict[int | str, str] = {
    400: "invalid_request: a parameter is invalid; `parameter` names it (invalid_host: the "
    "Host header is not one the gateway answers to)",
    401: "authentication_failed: credentials missing (once authentication is configured), "
    "malformed, expired or not verified; with WWW-Authenticate",
    403: "topic_authorization_failed: the principal may not read (records) or describe "
    "(the rest) this topic, whether or not it exists",
    429: "rate_limited: the principal is over its request rate; retriable, with Retry-After",
    404: "unknown_topic_or_partition, or no such route (not_found)",
    406: "not_acceptable: none of the Accept types is served",
    416: "offset_out_of_range: outside the remote tier (past its end; at exactly the end a "
    "fetch is 200 with no records); the body carries log_start_offset and log_end_offset",
    422: "invalid_format: a key, value or header value is not valid in the asked format "
    "(key_format, value_format, header_format; for avro, protobuf and jsonschema: not in the "
    "Confluent wire format, an id the registry does not have, another schema type, or a body "
    "its schema does not read); `parameter` and `offset` name it",
    502: "corrupt_data and its subclasses (crc_mismatch, corrupt_record, corrupt_index, "
    "corrupt_manifest, integrity_error, remote_gap: offsets no segment holds, ...) or "
    "storage_error: never a partial or shortened answer; the message names the object; "
    "schema_registry_error: the schema registry answered what its API does not promise "
    "(credentials refused, a malformed schema answer)",
    503: "auth_unavailable (the JWT keys cannot be fetched: fail closed), "
    "schema_registry_unavailable (the schema registry cannot be reached or answers 5xx), "
    "storage_unavailable, not_ready, overloaded (the response bytes in flight stayed at "
    "their budget until the deadline) or transaction_pending (read_committed at or past the "
    "last stable offset: a transaction whose marker is not tiered yet; the body carries "
    "log_start_offset, log_end_offset and last_stable_offset): retriable, with Retry-After",
    504: "deadline_exceeded: timeout_ms passed; retriable, with Retry-After",
    "default": "any other error, with the same body",
}


def error_responses(*statuses: int, auth: bool = True) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, plus (``auth``: a data route, which
    authenticates and counts the principal's rate) 401 and 429, and ``default``: one body
    shape."""
    chosen: list[int | str] = [*sorted({*statuses, *((401, 429) if auth else ())}), "default"]
    return {
        status: {"model": ErrorBody, "description": _ERROR_DESCRIPTIONS[status]}
        for status in chosen
    }
