"""Object keys of the Aiven tiered-storage plugin. Mirrors ``io.aiven.kafka.tieredstorage.
ObjectKeyFactory`` and, for the custom-metadata override, ``metadata.SegmentCustomMetadataSerde``.

Key layout (spec §1.1), one key per object and three objects per segment::

    <key.prefix><topic>-<topicId>/<partition>/<startOffset:20 digits>-<segmentId>.<suffix>

    key.prefix   the configured prefix, verbatim: no separator is added
    topic        Kafka topic name: 1-249 characters of [a-zA-Z0-9._-], never "." or ".."
    topicId      Kafka ``Uuid.toString()``: the 16 bytes (msb then lsb, big-endian) in the
    segmentId    URL-safe Base64 alphabet, no padding: always 22 characters
    partition    decimal, no padding (int32 >= 0)
    startOffset  decimal, zero-padded to 20 digits (int64 >= 0, so the first digit is 0)
    suffix       ``log`` | ``indexes`` | ``rsm-manifest``

Example: ``prefix/topic-AAAAAAAAAAAAAAAAAAAAAQ/7/00000000000000001234-AAAAAAAAAAAAAAAAAAAAAA.log``.

Topic names and ids both contain ``-``, so a key is parsed from the right: the file name is
``20 digits - 22 chars . suffix``, the partition the component before it, and the directory
``<prefix><topic>-<22 chars>``. A topic name cannot contain ``/``: without a known prefix
everything up to the last ``/`` of the directory is taken as the prefix, which is exact for
prefixes ending in ``/`` (the only sensible ones); pass ``prefix=`` when it does not.

Custom metadata (spec §1.3). When the segment metadata in the RLMM carries the plugin's custom
metadata, the ``.log`` and ``.indexes`` keys are built from its ``object_prefix`` and
``object_key`` fields (each when present) instead of the configured prefix and the computed
main path; the ``.rsm-manifest`` key never is. The bytes are a Kafka tagged-fields section::

    uvarint numFields, then per field (ascending tag order):
        uvarint tag   uvarint byteLength   value
    tag 0  remote_size    VARLONG (zig-zag)            sum of the three uploaded objects' sizes
    tag 1  object_prefix  COMPACT_STRING (uvarint len+1, UTF-8)
    tag 2  object_key     COMPACT_STRING               main path without prefix and suffix

    {0: 100, 2: "foo"}  ->  02 00 02 C8 01 02 04 04 66 6F 6F

Left out on purpose: ``key.prefix.mask`` (§1.2) only changes how the plugin *logs* keys, so a
reader has nothing to do; the pre-release per-index suffixes (``.index``, ``.timeindex``, ...,
§13) are not parsed.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gateway.errors import ConfigurationError, CorruptDataError, InvalidKeyError

__all__ = [
    "KAFKA_UUID_LENGTH",
    "START_OFFSET_DIGITS",
    "ObjectKey",
    "SegmentCustomMetadata",
    "Suffix",
    "b64decode_standard",
    "decode_custom_metadata",
    "decode_uuid",
    "encode_custom_metadata",
    "encode_uuid",
    "parse_object_key",
    "validate_topic",
]

INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

KAFKA_UUID_LENGTH: Final = 22
"""Characters of a Kafka ``Uuid.toString()``."""

START_OFFSET_DIGITS: Final = 20
"""Zero-padded width of the start offset in a segment's file name."""

TOPIC_MAX_LENGTH: Final = 249
"""``org.apache.kafka.common.internals.Topic.MAX_NAME_LENGTH``."""

_UUID_RE: Final = re.compile(r"[A-Za-z0-9_-]{22}")
_TOPIC_RE: Final = re.compile(r"[A-Za-z0-9._-]+")
_PARTITION_RE: Final = re.compile(r"0|[1-9][0-9]{0,9}")
_FILE_NAME_RE: Final = re.compile(r"([0-9]{20})-([A-Za-z0-9_-]{22})")
_STD_B64_RE: Final = re.compile(r"([A-Za-z0-9+/]*)(={0,2})")

# Tagged-field section of the custom metadata.
_TAG_REMOTE_SIZE: Final = 0
_TAG_OBJECT_PREFIX: Final = 1
_TAG_OBJECT_KEY: Final = 2
_UVARINT_MAX_BYTES: Final = 5  # ByteUtils.readUnsignedVarint: an int32
_UVARLONG_MAX_BYTES: Final = 10
_COMPACT_STRING_MAX: Final = 0x7FFF  # Kafka refuses strings longer than Short.MAX_VALUE


# --- Base64 ----------------------------------------------------------------------------------


def b64decode_standard(text: str) -> bytes:
    """Decode standard Base64 (``+``, ``/``) as ``java.util.Base64.getDecoder()`` does.

    Padding is optional but must be right when present; any character outside the alphabet
    (whitespace included) is refused. Raises ``ValueError`` (callers translate it into their
    domain error).
    """
    match = _STD_B64_RE.fullmatch(text)
    if match is None:
        raise ValueError("not standard Base64: a character outside [A-Za-z0-9+/=] or misplaced '='")
    body, pad = match.groups()
    rest = len(body) % 4
    if rest == 1:
        raise ValueError(f"not standard Base64: {len(body)} characters leave a dangling one")
    if pad and (rest == 0 or len(pad) != 4 - rest):
        raise ValueError("not standard Base64: wrong padding")
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except binascii.Error as exc:  # pragma: no cover - excluded by the checks above
        raise ValueError(f"not standard Base64: {exc}") from exc


# --- Kafka Uuid ------------------------------------------------------------------------------


def encode_uuid(value: uuid.UUID) -> str:
    """Kafka ``Uuid.toString()``: URL-safe Base64 of the 16 bytes, no padding (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def decode_uuid(text: str) -> uuid.UUID:
    """Inverse of :func:`encode_uuid`; only the canonical 22-character form is accepted.

    Raises :class:`InvalidKeyError` for anything else (wrong length or alphabet, padding,
    non-zero bits in the unused low 4 bits of the last character).
    """
    if not isinstance(text, str) or _UUID_RE.fullmatch(text) is None:
        raise InvalidKeyError(
            f"{text!r} is not a Kafka Uuid: expected {KAFKA_UUID_LENGTH} characters of the "
            "URL-safe Base64 alphabet"
        )
    raw = base64.urlsafe_b64decode(text + "==")
    value = uuid.UUID(bytes=raw)
    if encode_uuid(value) != text:
        raise InvalidKeyError(f"{text!r} is not a canonical Kafka Uuid (non-zero trailing bits)")
    return value


def parse_topic_id(text: str, what: str = "topic id") -> uuid.UUID:
    """A topic id as users write it: a UUID (``8c4d...-...``) or Kafka's 22-character form.

    Raises :class:`ConfigurationError` naming ``what`` (e.g. ``--topic-id``) for anything else.
    """
    try:
        return uuid.UUID(text)
    except ValueError:
        pass
    try:
        return decode_uuid(text)
    except InvalidKeyError as exc:
        raise ConfigurationError(
            f"{what} {text!r} is neither a UUID nor a Kafka topic id (22 base64url characters)"
        ) from exc


# --- object keys -----------------------------------------------------------------------------


class Suffix(StrEnum):
    """The three objects of one segment."""

    LOG = "log"
    INDEXES = "indexes"
    MANIFEST = "rsm-manifest"


def validate_topic(topic: str) -> None:
    """Kafka's ``Topic.validate``: raises :class:`InvalidKeyError` for an illegal topic name."""
    if not isinstance(topic, str) or not topic:
        raise InvalidKeyError("topic name is empty")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidKeyError(
            f"topic name is {len(topic)} characters, longer than {TOPIC_MAX_LENGTH}"
        )
    if topic in (".", ".."):
        raise InvalidKeyError(f"topic name cannot be {topic!r}")
    if _TOPIC_RE.fullmatch(topic) is None:
        raise InvalidKeyError(f"topic name {topic!r} has a character outside [a-zA-Z0-9._-]")


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """One object key, split into its parts. ``str(key)`` (or :attr:`key`) renders it.

    Every part is validated on construction (:class:`InvalidKeyError`), so a value of this
    type always renders to a key that :func:`parse_object_key` reads back to an equal value.
    """

    prefix: str
    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    segment_id: uuid.UUID
    suffix: Suffix

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str):
            raise InvalidKeyError(f"key prefix must be a string, not {type(self.prefix).__name__}")
        validate_topic(self.topic)
        if not isinstance(self.topic_id, uuid.UUID) or not isinstance(self.segment_id, uuid.UUID):
            raise InvalidKeyError("topic_id and segment_id must be uuid.UUID values")
        if (
            isinstance(self.partition, bool)
            or not isinstance(self.partition, int)
            or not 0 <= self.partition <= INT32_MAX
        ):
            raise InvalidKeyError(f"partition {self.partition!r} is not an int32 >= 0")
        if (
            isinstance(self.start_offset, bool)
            or not isinstance(self.start_offset, int)
            or not 0 <= self.start_offset <= INT64_MAX
        ):
            raise InvalidKeyError(f"start offset {self.start_offset!r} is not an int64 >= 0")
        try:
            object.__setattr__(self, "suffix", Suffix(self.suffix))
        except ValueError as exc:
            raise InvalidKeyError(f"unknown object suffix {self.suffix!r}") from exc

    @property
    def main_path(self) -> str:
        """``<topic>-<topicId>/<partition>/<startOffset>-<segmentId>`` (``mainPath``)."""
        return (
            f"{self.topic}-{encode_uuid(self.topic_id)}/{self.partition}/"
            f"{self.start_offset:0{START_OFFSET_DIGITS}d}-{encode_uuid(self.segment_id)}"
        )

    @property
    def key(self) -> str:
        """The full object key."""
        return f"{self.prefix}{self.main_path}.{self.suffix.value}"

    def __str__(self) -> str:
        return self.key

    def with_suffix(self, suffix: Suffix | str) -> ObjectKey:
        """The same segment's key for another object."""
        return ObjectKey(
            self.prefix,
            self.topic,
            self.topic_id,
            self.partition,
            self.start_offset,
            self.segment_id,
            Suffix(suffix),
        )

    def key_for(self, suffix: Suffix | str, custom: SegmentCustomMetadata | None = None) -> str:
        """The key of this segment's ``suffix`` object, as the plugin's fetch path builds it.

        ``custom`` is the segment's decoded custom metadata when the RLMM carries any: its
        ``object_prefix`` / ``object_key`` replace the prefix / main path of the ``.log`` and
        ``.indexes`` keys. The manifest key always uses this key's prefix and main path.
        """
        suffix = Suffix(suffix)
        prefix = self.prefix
        main = self.main_path
        if custom is not None and suffix is not Suffix.MANIFEST:
            if custom.object_prefix is not None:
                prefix = custom.object_prefix
            if custom.object_key is not None:
                main = custom.object_key
        return f"{prefix}{main}.{suffix.value}"


def parse_object_key(key: str, prefix: str | None = None) -> ObjectKey:
    """Split ``key`` into its parts (from the right); :class:`InvalidKeyError` if it is not one.

    ``prefix``: the configured ``key.prefix`` when known (the key must start with it). Without
    it, the prefix is everything up to and including the last ``/`` before the topic name.
    """
    if not isinstance(key, str):
        raise InvalidKeyError(f"object key must be a string, not {type(key).__name__}")
    for suffix in Suffix:
        if key.endswith("." + suffix.value):
            stem = key[: -len(suffix.value) - 1]
            break
    else:
        raise InvalidKeyError(f"object key {key!r} does not end in .log, .indexes or .rsm-manifest")

    directory, slash, file_name = stem.rpartition("/")
    file_match = _FILE_NAME_RE.fullmatch(file_name)
    if not slash or file_match is None:
        raise InvalidKeyError(
            f"object key {key!r}: file name must be <20-digit start offset>-<22-char segment id>"
        )
    head, slash, partition_text = directory.rpartition("/")
    if not slash or _PARTITION_RE.fullmatch(partition_text) is None:
        raise InvalidKeyError(
            f"object key {key!r}: partition component {partition_text!r} is not a decimal "
            "number without padding"
        )
    id_start = len(head) - KAFKA_UUID_LENGTH
    if id_start < 2 or head[id_start - 1] != "-":
        raise InvalidKeyError(
            f"object key {key!r}: directory {head!r} is not <topic>-<22-char topic id>"
        )
    prefix_and_topic = head[: id_start - 1]
    if prefix is None:
        before, slash, topic = prefix_and_topic.rpartition("/")
        prefix = before + slash
    elif prefix_and_topic.startswith(prefix):
        topic = prefix_and_topic[len(prefix) :]
    else:
        raise InvalidKeyError(f"object key {key!r} does not start with the prefix {prefix!r}")

    start_offset = int(file_match.group(1))
    partition = int(partition_text)
    if start_offset > INT64_MAX or partition > INT32_MAX:
        raise InvalidKeyError(f"object key {key!r}: start offset or partition out of range")
    return ObjectKey(
        prefix=prefix,
        topic=topic,
        topic_id=decode_uuid(head[id_start:]),
        partition=partition,
        start_offset=start_offset,
        segment_id=decode_uuid(file_match.group(2)),
        suffix=suffix,
    )


# --- custom metadata (§1.3) ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentCustomMetadata:
    """The plugin's fields in ``RemoteLogSegmentMetadata.customMetadata`` (each optional)."""

    remote_size: int | None = None
    object_prefix: str | None = None
    object_key: str | None = None


def _corrupt_custom(problem: str) -> CorruptDataError:
    return CorruptDataError(f"segment custom metadata: {problem}")


def _read_uvarint(data: bytes, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    value = 0
    for i in range(max_bytes):
        if pos + i >= len(data):
            raise _corrupt_custom(f"{what} at byte {pos} runs past the end")
        b = data[pos + i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos + i + 1
    raise _corrupt_custom(f"{what} at byte {pos} is longer than {max_bytes} bytes")


def _write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_compact_string(value: bytes, what: str) -> str:
    length_plus_one, pos = _read_uvarint(value, 0, _UVARINT_MAX_BYTES, f"{what} length")
    if length_plus_one == 0:
        raise _corrupt_custom(f"{what} is null")
    length = length_plus_one - 1
    if length > _COMPACT_STRING_MAX or pos + length != len(value):
        raise _corrupt_custom(f"{what} length {length} does not match its {len(value)}-byte field")
    try:
        return value[pos:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _corrupt_custom(f"{what} is not UTF-8") from exc


def decode_custom_metadata(data: bytes | bytearray | memoryview) -> SegmentCustomMetadata:
    """Decode the plugin's custom metadata bytes; empty bytes = no fields.

    Tags must ascend strictly and every field must fill exactly its declared length; unknown
    tags are skipped (Kafka keeps them as raw fields). Raises :class:`CorruptDataError`.
    """
    buf = bytes(data)
    if not buf:
        return SegmentCustomMetadata()
    count, pos = _read_uvarint(buf, 0, _UVARINT_MAX_BYTES, "field count")
    fields: dict[int, bytes] = {}
    previous = -1
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos, _UVARINT_MAX_BYTES, "tag")
        if tag <= previous:
            raise _corrupt_custom(f"tag {tag} follows tag {previous} (tags must ascend)")
        previous = tag
        size, pos = _read_uvarint(buf, pos, _UVARINT_MAX_BYTES, f"length of tag {tag}")
        if pos + size > len(buf):
            raise _corrupt_custom(f"tag {tag}: {size}-byte value runs past the end")
        fields[tag] = buf[pos : pos + size]
        pos += size
    if pos != len(buf):
        raise _corrupt_custom(f"{len(buf) - pos} bytes after the last field")

    remote_size: int | None = None
    if (raw := fields.get(_TAG_REMOTE_SIZE)) is not None:
        zigzag, used = _read_uvarint(raw, 0, _UVARLONG_MAX_BYTES, "remote_size")
        if used != len(raw):
            raise _corrupt_custom("remote_size does not fill its field")
        remote_size = (zigzag >> 1) ^ -(zigzag & 1)
        if not INT64_MIN <= remote_size <= INT64_MAX:
            raise _corrupt_custom("remote_size overflows int64")
    object_prefix = None
    if (raw := fields.get(_TAG_OBJECT_PREFIX)) is not None:
        object_prefix = _decode_compact_string(raw, "object_prefix")
    object_key = None
    if (raw := fields.get(_TAG_OBJECT_KEY)) is not None:
        object_key = _decode_compact_string(raw, "object_key")
    return SegmentCustomMetadata(remote_size, object_prefix, object_key)


def _encode_compact_string(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > _COMPACT_STRING_MAX:
        raise ValueError(f"custom metadata string of {len(raw)} bytes is longer than 32767")
    return _write_uvarint(len(raw) + 1) + raw


def encode_custom_metadata(metadata: SegmentCustomMetadata) -> bytes:
    """Inverse of :func:`decode_custom_metadata` (empty bytes when no field is set)."""
    fields: list[tuple[int, bytes]] = []
    if metadata.remote_size is not None:
        if not INT64_MIN <= metadata.remote_size <= INT64_MAX:
            raise ValueError(f"remote_size {metadata.remote_size} does not fit an int64")
        v = metadata.remote_size
        fields.append((_TAG_REMOTE_SIZE, _write_uvarint(((v << 1) ^ (v >> 63)) & ((1 << 64) - 1))))
    if metadata.object_prefix is not None:
        fields.append((_TAG_OBJECT_PREFIX, _encode_compact_string(metadata.object_prefix)))
    if metadata.object_key is not None:
        fields.append((_TAG_OBJECT_KEY, _encode_compact_string(metadata.object_key)))
    if not fields:
        return b""
    out = bytearray(_write_uvarint(len(fields)))
    for tag, value in fields:
        out += _write_uvarint(tag) + _write_uvarint(len(value)) + value
    return bytes(out)
