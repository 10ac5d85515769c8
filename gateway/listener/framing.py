"""Kafka's framing: a request is ``int32 size`` then ``size`` bytes (header, body); so is a
response. Requests are decoded with kafka-python's schema-driven messages (Kafka's own JSON
message definitions, flexible versions and tagged fields included); responses other than
Fetch's are encoded with them too (:func:`frame`), Fetch's around its batch views
(:mod:`gateway.listener.fetch_wire`).

A frame that cannot be a request (too short, too large, an unknown API key, a version outside
what :data:`~gateway.listener.dispatch.VERSIONS` advertises, bytes the schema cannot decode)
raises :class:`MalformedRequestError`: the server closes that connection, as a broker does,
and serves every other one on.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from gateway.errors import InvalidRequestError

MAX_FRAME_BYTES: Final = 1024 * 1024
"""The largest request accepted: a consumer's requests are small (a Fetch of the most
partitions one takes, 1,000, is about 40 KB; a SASL frame, a JWT of a few KB), and a frame is
read whole before it is decoded. A broker's default limit, ``socket.request.max.bytes``, is
100 MiB because it takes Produce."""

MAX_NAMED: Final = 10_000
"""The most topics one Metadata request names, and the most partitions one ListOffsets
request names (entries, duplicates counted): more is a malformed request and closes the
connection, as a Fetch naming more than its :data:`~gateway.listener.fetch_plan.MAX_PARTITIONS`.
A client asks for every topic with a null list, not by naming ten thousand."""

_FIXED: Final = struct.Struct(">hhi")  # api key, api version, correlation id
_SIZE: Final = struct.Struct(">i")
_CORRELATION: Final = struct.Struct(">i")

API_VERSIONS: Final = 18
METADATA: Final = 3
LIST_OFFSETS: Final = 2
FETCH: Final = 1
FIND_COORDINATOR: Final = 10
PRODUCE: Final = 0
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_CONFIGS: Final = 32

MESSAGES: Final[dict[int, tuple[Any, Any]]] = {
    API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    METADATA: (MetadataRequest, MetadataResponse),
    LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse),
    FETCH: (FetchRequest, FetchResponse),
    FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    PRODUCE: (ProduceRequest, ProduceResponse),
    SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse),
    OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse),
    JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse),
    HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse),
    SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse),
    DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse),
}
"""API key -> kafka-python's request and response message classes."""
API_NAMES: Final[dict[int, str]] = {
    API_VERSIONS: "ApiVersions",
    METADATA: "Metadata",
    LIST_OFFSETS: "ListOffsets",
    FETCH: "Fetch",
    FIND_COORDINATOR: "FindCoordinator",
    PRODUCE: "Produce",
    SASL_HANDSHAKE: "SaslHandshake",
    SASL_AUTHENTICATE: "SaslAuthenticate",
    OFFSET_COMMIT: "OffsetCommit",
    OFFSET_FETCH: "OffsetFetch",
    JOIN_GROUP: "JoinGroup",
    HEARTBEAT: "Heartbeat",
    LEAVE_GROUP: "LeaveGroup",
    SYNC_GROUP: "SyncGroup",
    DESCRIBE_CONFIGS: "DescribeConfigs",
}
"""API key -> Kafka's name of the API (metrics labels, audit lines)."""


Buffer = bytes | bytearray | memoryview


def nbytes(b: Buffer) -> int:
    """The size of a buffer (a memoryview's in bytes, whatever its format)."""
    return b.nbytes if isinstance(b, memoryview) else len(b)


def _nothing() -> None:
    pass


@dataclass(frozen=True, slots=True)
class Reply:
    """A response frame as buffers, sent in order (never joined); ``release`` is called once
    they are sent, or the connection failed (a fetch gives back its share of
    ``inflight_bytes`` then: the buffers are views of the bytes it read)."""

    buffers: list[Buffer]
    release: Callable[[], None] = _nothing
    error: int = 0  # the first error code the answer carries (0: none), for the metrics
    close: bool = False  # close the connection once sent (a failed SASL exchange)
    topic: str | None = None  # the one topic the request named, if one (the audit line)

    @property
    def size(self) -> int:
        return sum(nbytes(b) for b in self.buffers)


class MalformedRequestError(InvalidRequestError):
    """A frame that is not a request this listener takes: its connection is closed."""


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request: ``body`` is kafka-python's message (attributes named as in
    Kafka's JSON definitions)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    principal: str = "User:ANONYMOUS"  # who sent it, as the connection authenticated
    host: str = ""  # the client's address, for host-scoped ACLs


def frame_size(prefix: bytes) -> int:
    """The size a frame's 4-byte prefix announces, checked against :data:`MAX_FRAME_BYTES`."""
    size = int(_SIZE.unpack(prefix)[0])
    if size < _FIXED.size:
        raise MalformedRequestError(f"a request frame of {size} bytes is shorter than a header")
    if size > MAX_FRAME_BYTES:
        raise MalformedRequestError(
            f"a request frame of {size} bytes exceeds the maximum {MAX_FRAME_BYTES}"
        )
    return size


def peek(payload: bytes) -> tuple[int, int, int]:
    """API key, version and correlation id: the fixed start of every request header."""
    if len(payload) < _FIXED.size:
        raise MalformedRequestError(f"a request of {len(payload)} bytes has no header")
    key, version, correlation = _FIXED.unpack_from(payload)
    return int(key), int(version), int(correlation)


def decode(payload: bytes, versions: dict[int, tuple[int, int]]) -> Request:
    """The request in ``payload`` (a frame without its size), for an API key and version
    ``versions`` advertises."""
    key, version, correlation = peek(payload)
    if key not in versions or key not in MESSAGES:
        raise MalformedRequestError(f"API key {key} is not served by this listener")
    low, high = versions[key]
    if not low <= version <= high:
        raise MalformedRequestError(
            f"API key {key} version {version} is not served (versions {low}-{high})"
        )
    request_class = MESSAGES[key][0]
    try:
        body = request_class.decode(payload, version=version, header=True)
    except Exception as exc:  # the schema decoder's IndexError, ValueError, struct.error...
        raise MalformedRequestError(
            f"API key {key} version {version}: the request does not decode ({exc!r})"
        ) from exc
    header = body.header
    return Request(key, version, correlation, header.client_id, body)


def array(value: Any, what: str) -> list[Any]:
    """A request's array that Kafka's schema says is not nullable: a null one is malformed."""
    if value is None:
        raise MalformedRequestError(f"{what} is null")
    return list(value)


def name(value: Any, what: str) -> str:
    """A request's string that may not be null (a topic name)."""
    if not isinstance(value, str):
        raise MalformedRequestError(f"{what} is null")
    return value


def response_for(request: Request) -> Any:
    """kafka-python's response class at the request's version."""
    return MESSAGES[request.api_key][1][request.api_version]


def frame(response: Any, correlation_id: int) -> bytearray:
    """A kafka-python response message as a whole frame: size, header, body (its header is
    v0, or v1 with tagged fields for a flexible version; ApiVersions' always v0)."""
    response.with_header(correlation_id=correlation_id)
    out: bytearray = response.encode(header=True, framed=True)
    return out


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """A response header: v1 (with an empty tagged-field section) for a flexible version."""
    return _CORRELATION.pack(correlation_id) + (b"\x00" if flexible else b"")


def size_prefix(size: int) -> bytes:
    return _SIZE.pack(size)
