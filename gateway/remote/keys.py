"""Object keys of the Aiven tiered-storage plugin. Mirrors ``io.aiven.kafka.tieredstorage.
ObjectKeyFactory``.

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

Custom metadata (spec §1.3, :mod:`gateway.remote.custom_metadata`) may replace the prefix and
main path of the ``.log`` and ``.indexes`` keys (:meth:`ObjectKey.key_for`). The Kafka ``Uuid``
text form is :mod:`gateway.kafka.uuids`, the topic-name rules :mod:`gateway.kafka.topic`.

Left out on purpose: ``key.prefix.mask`` (§1.2) only changes how the plugin *logs* keys, so a
reader has nothing to do; the pre-release per-index suffixes (``.index``, ``.timeindex``, ...,
§13) are not parsed.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

from gateway.errors import InvalidKeyError
from gateway.kafka.ints import INT32_MAX, INT64_MAX, check_int
from gateway.kafka.topic import validate_topic_name
from gateway.kafka.uuids import KAFKA_UUID_LENGTH, decode_uuid, encode_uuid
from gateway.remote.custom_metadata import SegmentCustomMetadata

__all__ = [
    "START_OFFSET_DIGITS",
    "ObjectKey",
    "SegmentLike",
    "Suffix",
    "parse_object_key",
    "segment_key",
]

START_OFFSET_DIGITS: Final = 20
"""Zero-padded width of the start offset in a segment's file name."""

_PARTITION_RE: Final = re.compile(r"0|[1-9][0-9]{0,9}")
_FILE_NAME_RE: Final = re.compile(r"([0-9]{20})-([A-Za-z0-9_-]{22})")


class Suffix(StrEnum):
    """The three objects of one segment."""

    LOG = "log"
    INDEXES = "indexes"
    MANIFEST = "rsm-manifest"


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
        validate_topic_name(self.topic)
        if not isinstance(self.topic_id, uuid.UUID) or not isinstance(self.segment_id, uuid.UUID):
            raise InvalidKeyError("topic_id and segment_id must be uuid.UUID values")
        check_int("partition", self.partition, 0, INT32_MAX, error=InvalidKeyError)
        check_int("start offset", self.start_offset, 0, INT64_MAX, error=InvalidKeyError)
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


class _PartitionLike(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def partition(self) -> int: ...


class _SegmentIdLike(Protocol):
    @property
    def partition(self) -> _PartitionLike: ...
    @property
    def id(self) -> uuid.UUID: ...


class SegmentLike(Protocol):
    """What names a segment's objects: the RLMM's ``RemoteLogSegmentMetadata`` has it."""

    @property
    def segment_id(self) -> _SegmentIdLike: ...
    @property
    def start_offset(self) -> int: ...


def segment_key(prefix: str, segment: SegmentLike, suffix: Suffix | str = Suffix.LOG) -> ObjectKey:
    """The key of ``segment``'s ``suffix`` object under the configured ``prefix``."""
    tp = segment.segment_id.partition
    return ObjectKey(
        prefix,
        tp.topic,
        tp.topic_id,
        tp.partition,
        segment.start_offset,
        segment.segment_id.id,
        Suffix(suffix),
    )


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
