"""Kafka's topic-name rules (``Topic.validate``), shared by object keys and the API."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidKeyError, InvalidRequestError
from gateway.kafka.topic import TOPIC_MAX_LENGTH, TOPIC_PATTERN, validate_topic_name


def test_validate_topic() -> None:
    validate_topic_name("a" * 249)
    validate_topic_name("._-aZ09")
    with pytest.raises(InvalidKeyError):
        validate_topic_name("a" * 250)


@pytest.mark.parametrize(
    "topic", ["", ".", "..", "a" * 250, "a/b", "a b", "caf\u00e9", "a\n", "\n", "a\x00", "a:b"]
)
def test_illegal_names(topic: str) -> None:
    with pytest.raises(InvalidKeyError, match="topic name"):
        validate_topic_name(topic)


def test_non_string_is_refused() -> None:
    with pytest.raises(InvalidKeyError):
        validate_topic_name(None)


def test_the_caller_chooses_the_error() -> None:
    def error(message: str) -> InvalidRequestError:
        return InvalidRequestError(message, "topic")

    with pytest.raises(InvalidRequestError, match=r"cannot be '\.\.'") as caught:
        validate_topic_name("..", error)
    assert caught.value.parameter == "topic"
    assert validate_topic_name("ok", error) == "ok"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="ascii"), max_size=TOPIC_MAX_LENGTH + 2))
def test_agrees_with_a_plain_reading_of_the_rules(topic: str) -> None:
    legal = (
        1 <= len(topic) <= TOPIC_MAX_LENGTH
        and topic not in (".", "..")
        and re.fullmatch(TOPIC_PATTERN.strip("^$"), topic) is not None
    )
    try:
        validate_topic_name(topic)
    except InvalidKeyError:
        assert not legal
    else:
        assert legal
