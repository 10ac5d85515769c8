"""Byte sizes with units, and the machine's usable cores: the value types of the settings."""

from __future__ import annotations

import os
import re
from typing import Annotated, Final, Literal

from pydantic import BeforeValidator

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB

_UNITS: Final = {
    "": 1,
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 1024 * GiB,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
LogLevel = Literal["debug", "info", "warning", "error", "critical"]


def parse_byte_size(value: object) -> object:
    """``"256MiB"`` -> 268435456; integers and anything else go to the int validator."""
    if not isinstance(value, str):
        return value
    match = _SIZE.fullmatch(value)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError("expected bytes: an integer or a number with a unit such as 256MiB")
    number, unit = match.groups()
    size = float(number) * _UNITS[unit.lower()]
    if not size.is_integer():
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(size)


ByteSize = Annotated[int, BeforeValidator(parse_byte_size)]


def default_threads() -> int:
    return min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's own default


def usable_cpus() -> int:
    """The cores this process may run on (its affinity; a container's cpuset), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
