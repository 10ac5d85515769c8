"""Kafka's ``Uuid`` in text (mirrors ``org.apache.kafka.common.Uuid.toString`` / ``fromString``).

Topic ids and segment ids are 16 bytes (most-significant long then least-significant long,
big-endian); Kafka writes them as the URL-safe Base64 of those bytes without padding: always
22 characters of ``[A-Za-z0-9_-]``, the last of which carries 2 bits only (its low 4 bits of
the alphabet index are zero). Example: ``uuid.UUID(int=1)`` is ``AAAAAAAAAAAAAAAAAAAAAQ``.
"""

from __future__ import annotations

import base64
import re
import uuid
from typing import Final

from gateway.errors import ConfigurationError, InvalidKeyError

__all__ = ["KAFKA_UUID_LENGTH", "decode_uuid", "encode_uuid", "parse_topic_id"]

KAFKA_UUID_LENGTH: Final = 22
"""Characters of a Kafka ``Uuid.toString()``."""

_UUID_RE: Final = re.compile(r"[A-Za-z0-9_-]{22}")


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
