"""Java's integer bounds and the one range check every format shares."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import CorruptManifestError
from gateway.kafka.ints import (
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    check_int,
)


def test_bounds_are_javas() -> None:
    assert (INT16_MIN, INT16_MAX) == (-32768, 32767)
    assert (INT32_MIN, INT32_MAX) == (-2147483648, 2147483647)
    assert (INT64_MIN, INT64_MAX) == (-9223372036854775808, 9223372036854775807)


def test_in_range_is_returned() -> None:
    assert check_int("size", 0, 0, INT32_MAX) == 0
    assert check_int("size", INT32_MAX, 0, INT32_MAX) == INT32_MAX


@pytest.mark.parametrize("value", [-1, INT32_MAX + 1, True, False, 1.0, "1", None])
def test_out_of_range_or_not_an_int_is_a_value_error(value: object) -> None:
    with pytest.raises(ValueError, match=rf"^size {value!r} is outside \[0, 2147483647\]$"):
        check_int("size", value, 0, INT32_MAX)


def test_the_caller_chooses_the_error() -> None:
    def error(message: str) -> CorruptManifestError:
        return CorruptManifestError(f"manifest: {message}")

    with pytest.raises(CorruptManifestError, match=r"^manifest: epoch -1 is outside \[0, 5\]$"):
        check_int("epoch", -1, 0, 5, error=error)


@given(st.integers(INT64_MIN - 2, INT64_MAX + 2), st.integers(-5, 5), st.integers(-5, 5))
def test_agrees_with_the_comparison(value: int, lo: int, hi: int) -> None:
    try:
        assert check_int("v", value, lo, hi) == value
    except ValueError:
        assert not lo <= value <= hi
    else:
        assert lo <= value <= hi
