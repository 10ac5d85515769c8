"""Kafka's topic-name rules (mirrors ``org.apache.kafka.common.internals.Topic.validate``).

A topic name is 1 to 249 characters of ``[a-zA-Z0-9._-]`` and is neither ``.`` nor ``..``; so
it never holds a ``/`` and can be a path or object-key component as is.
"""

from __future__ import annotations

import re
from typing import Final

from gateway.errors import InvalidKeyError
from gateway.kafka.ints import ErrorFactory

__all__ = ["TOPIC_MAX_LENGTH", "TOPIC_PATTERN", "validate_topic_name"]

TOPIC_MAX_LENGTH: Final = 249
"""``Topic.MAX_NAME_LENGTH``."""

TOPIC_PATTERN: Final = r"^[a-zA-Z0-9._-]+$"
"""The legal characters as a JSON-schema ``pattern`` (the length and dot rules are apart)."""

_LEGAL: Final = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(topic: object, error: ErrorFactory = InvalidKeyError) -> str:
    """Return ``topic`` when Kafka accepts it as a topic name; else raise ``error(message)``."""
    if not isinstance(topic, str) or not topic:
        raise error("topic name is empty")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise error(f"topic name is {len(topic)} characters: Kafka allows 1 to {TOPIC_MAX_LENGTH}")
    if topic in (".", ".."):
        raise error(f"topic name cannot be {topic!r}")
    if _LEGAL.fullmatch(topic) is None:
        raise error(f"topic name {topic!r}: only ASCII letters, digits, '.', '_' and '-' are legal")
    return topic
