"""One reader option's text as a value (a boolean, an integer, a duration, a JSON object),
with a :class:`~gateway.errors.ConfigurationError` naming the option when it is not one."""

from __future__ import annotations

import json
import re
from typing import Final

from gateway.errors import ConfigurationError


def bool_option(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"option {name}={text!r}: expected true or false")


def int_option(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigurationError(f"option {name}={text!r}: expected an integer") from None
    if value < minimum:
        raise ConfigurationError(f"option {name}={value}: must be >= {minimum}")
    return value


_DURATION_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def duration_option(name: str, text: str) -> int:
    """Spark's durations: ``500ms``, ``30s``, ``15m``, ``1h``; a bare number is ms."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    unit = match.group(2) if match else None
    if match is None or (unit and unit not in _DURATION_UNITS):
        raise ConfigurationError(f"option {name}={text!r}: expected a duration (30s, 15m, 500ms)")
    return int(match.group(1)) * _DURATION_UNITS.get(unit or "ms", 1)


def json_option(name: str, text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"option {name}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"option {name}: expected a JSON object")
    return value
