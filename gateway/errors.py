"""The one exception tree of tiered-gateway.

Every error the core raises is a :class:`GatewayError` with two class attributes: ``code`` (a
stable, machine-readable error code) and ``retriable`` (whether the same request may succeed
later). Corrupt input is never "retriable": retrying does not change the bytes in the bucket.
The errors carry no transport status: each adapter maps their types to its own codes in one
table (HTTP: :data:`gateway.api.statuses.HTTP_STATUS`; the Kafka listener:
:func:`gateway.listener.codes.error_code`).
"""

from __future__ import annotations

import uuid
from typing import TypeVar


class GatewayError(Exception):
    """Root of every error raised by tiered-gateway."""

    code: str = "internal_error"
    retriable: bool = False


_E = TypeVar("_E", bound="GatewayError")


def add_context(exc: _E, context: str) -> _E:
    """``exc`` with ``context`` (an object key, a byte position) in front of its message; the
    same object, so its type and fields (a rule, offsets) stay as they are."""
    exc.args = (f"{context}: {exc}", *exc.args[1:])
    return exc


# --- data found in storage is not what the format says -------------------------------------


class CorruptDataError(GatewayError):
    """Stored bytes fail a format or integrity check; never served."""

    code = "corrupt_data"


class CorruptRecordError(CorruptDataError):
    """A record batch or record violates the Kafka v2 format."""

    code = "corrupt_record"


class CorruptMetadataRecordError(CorruptDataError):
    """A ``__remote_log_metadata`` record that does not follow its schema."""

    code = "corrupt_metadata_record"


class CrcMismatchError(CorruptRecordError):
    """A record batch's CRC-32C does not match its bytes."""

    code = "crc_mismatch"


class CodecError(CorruptRecordError):
    """A compressed batch payload cannot be decompressed."""

    code = "codec_error"


class DecompressedSizeExceededError(CodecError):
    """A compressed payload expands past the configured cap."""

    code = "decompressed_size_exceeded"


class CorruptIndexError(CorruptDataError):
    """An offset, time or transaction index fails Kafka's sanity checks."""

    code = "corrupt_index"


class CorruptCheckpointError(CorruptDataError):
    """A leader-epoch checkpoint or producer snapshot cannot be parsed, or a checkpoint that
    parses disagrees with the segments' epoch maps (the partition's leader epochs are then in
    doubt)."""

    code = "corrupt_checkpoint"


class UnsupportedFormatError(GatewayError):
    """Well-formed data in a format this gateway does not serve."""

    code = "unsupported_format"


class LegacyFormatError(UnsupportedFormatError):
    """Magic 0/1 message sets (pre-0.11 Kafka)."""

    code = "legacy_format_not_supported"


class CorruptManifestError(CorruptDataError):
    """A ``.rsm-manifest`` (or a chunk index inside it) is malformed."""

    code = "corrupt_manifest"


class RemoteGapError(CorruptDataError):
    """The remote metadata does not cover offsets inside the remote log: the next segment of
    the epoch lineage does not start right after the previous one ends. Never hopped over;
    ``start``..``end`` (inclusive) are the missing offsets."""

    code = "remote_gap"

    def __init__(self, message: str, start: int | None = None, end: int | None = None) -> None:
        super().__init__(message)
        self.start = start
        self.end = end


class IntegrityError(CorruptDataError):
    """Authenticated decryption failed (AES-GCM tag mismatch): the bytes were altered."""

    code = "integrity_error"


# --- the remote store ------------------------------------------------------------------------


class StorageError(GatewayError):
    """The object store failed; whether a retry may help is decided per subclass."""

    code = "storage_error"


class ObjectNotFoundError(StorageError):
    """The object is not in the store (e.g. a segment deleted by retention after listing)."""

    code = "object_not_found"


class StorageUnavailableError(StorageError):
    """A transient store fault (503 SlowDown, 500, timeout, reset, short body), or the store
    away: a filesystem root that is not there, a bucket that answers NoSuchBucket."""

    code = "storage_unavailable"
    retriable = True


class DeadlineExceededError(GatewayError):
    """The request's deadline passed before the store answered."""

    code = "deadline_exceeded"
    retriable = True


# --- the remote log metadata manager ----------------------------------------------------------


class MetadataError(GatewayError):
    """The remote log metadata (RLMM) rejected an event or a lookup."""

    code = "metadata_error"


class MetadataUnavailableError(MetadataError):
    """A followed ``__remote_log_metadata`` topic could not be read up to its end (the cluster
    cannot be reached, or answers errors): the catalog is not known, never empty."""

    code = "metadata_unavailable"
    retriable = True


class InvalidStateTransitionError(MetadataError):
    """A segment or partition-delete state change that Kafka does not allow; nothing changed."""

    code = "invalid_state_transition"


class RemoteResourceNotFoundError(MetadataError):
    """An update names a segment the manager does not know (Kafka's
    ``RemoteResourceNotFoundException``)."""

    code = "remote_resource_not_found"


class UnknownTopicOrPartitionError(MetadataError):
    """No remote metadata for this topic or partition (a caller error, not a fault)."""

    code = "unknown_topic_or_partition"


# --- the request --------------------------------------------------------------------------------


class InvalidRequestError(GatewayError):
    """A request parameter is invalid; ``parameter`` names it."""

    code = "invalid_request"

    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class InvalidFormatError(InvalidRequestError):
    """A record's key, value or header value is not valid in the asked format; ``parameter``
    names the format parameter and ``offset`` the record."""

    code = "invalid_format"

    def __init__(self, message: str, parameter: str, offset: int | None = None) -> None:
        super().__init__(message, parameter)
        self.offset = offset

    def at(self, offset: int) -> InvalidFormatError:
        message = f"the record at offset {offset}: {self}"
        return InvalidFormatError(message, self.parameter or "", offset)


class SchemaRegistryError(GatewayError):
    """The schema registry (or the schema snapshot folder) answered what its API does not
    promise: a configuration or registry fault, not the request's."""

    code = "schema_registry_error"


class SchemaRegistryUnavailableError(SchemaRegistryError):
    """The schema registry cannot be reached or answers 5xx: retriable."""

    code = "schema_registry_unavailable"
    retriable = True


class NotAcceptableError(GatewayError):
    """No representation the client accepts (the ``Accept`` header)."""

    code = "not_acceptable"


class NotReadyError(GatewayError):
    """The catalog has not been loaded yet."""

    code = "not_ready"
    retriable = True


class OverloadedError(GatewayError):
    """The response bytes in flight are at their budget and this request's share did not free
    up within its deadline: retriable, later or elsewhere."""

    code = "overloaded"
    retriable = True


class TransactionPendingError(GatewayError):
    """read_committed reached a transaction whose COMMIT or ABORT marker is not in the remote
    tier yet (its outcome is unknown until the broker tiers the segment holding it). A fetch
    carries the partition's bounds: the remote log start and end, and the remote last stable
    offset (where read_committed stops), and the id of the topic incarnation they are of;
    ``None`` where not known (a Spark read)."""

    code = "transaction_pending"
    retriable = True

    def __init__(
        self,
        message: str,
        *,
        log_start_offset: int | None = None,
        log_end_offset: int | None = None,
        last_stable_offset: int | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.last_stable_offset = last_stable_offset
        self.topic_id = topic_id


class OffsetOutOfRangeError(GatewayError):
    """The offset is outside the remote tier (Kafka's OFFSET_OUT_OF_RANGE); carries the
    remote log start offset and the end offset (one past the highest) for the client, and
    the id of the topic incarnation they are of (``None`` where not known)."""

    code = "offset_out_of_range"

    def __init__(
        self,
        message: str,
        log_start_offset: int | None,
        log_end_offset: int | None,
        *,
        topic_id: uuid.UUID | None = None,
    ) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.topic_id = topic_id


# --- who may read what (issue 16) ------------------------------------------------------------


class AuthenticationError(GatewayError):
    """The request's credentials are missing, malformed, expired or do not verify. The message
    says which check failed, never the credential itself."""

    code = "authentication_failed"
    challenge: str = 'Bearer realm="tiered-gateway"'  # the WWW-Authenticate header of a 401


class AuthorizationError(GatewayError):
    """The principal may not do this (a resource other than a topic, e.g. ``/metrics``)."""

    code = "authorization_failed"


class TopicAuthorizationError(AuthorizationError):
    """The principal may not read or describe this topic: the same answer whether or not the
    topic exists (Kafka's TOPIC_AUTHORIZATION_FAILED), so nothing about it leaks."""

    code = "topic_authorization_failed"


class AuthUnavailableError(GatewayError):
    """What verifies credentials cannot be reached (a JWKS endpoint down): the request is
    refused, never let through (fail closed); retriable."""

    code = "auth_unavailable"
    retriable = True


class RateLimitedError(GatewayError):
    """The principal is over its request rate; ``retry_after_s`` says when to come back."""

    code = "rate_limited"
    retriable = True

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# --- configuration ---------------------------------------------------------------------------


class ConfigurationError(GatewayError):
    """A setting is wrong (bad key file, missing key id, access denied): fix and restart."""

    code = "configuration_error"


class KeyNotConfiguredError(ConfigurationError):
    """An encrypted segment's data key is wrapped by a key pair id that is not configured: the
    message names the id and the ``--key-pair`` flag to add."""

    code = "key_not_configured"


class InvalidKeyError(GatewayError):
    """An object key that is not in the layout it claims (a caller error)."""

    code = "invalid_object_key"


# --- batch jobs ------------------------------------------------------------------------------


class ExportFailedError(GatewayError):
    """A Spark task of an export failed after Spark's retries (the message is its error)."""

    code = "export_failed"
