"""Strict reader for the JSON objects of a ``.rsm-manifest`` (shared by ``manifest.py`` and
``chunk_index.py``): the decoded value of ``json.loads``, walked property by property.

Each object is read as Jackson reads the plugin's classes with FAIL_ON_UNKNOWN_PROPERTIES, minus
Jackson's coercions: an integer must be a JSON integer (no ``1.0``, no ``"1"``, no boolean) within
the caller's bounds (``int32``: ``[lo, 2^31-1]``, ``lo`` 0 unless given; ``int64``: the whole
Java long range), a string a JSON string encodable as UTF-8 (no unpaired surrogate), a boolean
``true``/``false``, an object a JSON object (``optional_child``: or absent/``null``); a required
property must be present and an unknown one is refused where the caller lists the allowed names.
Every failure is a :class:`CorruptManifestError` naming the dotted path of the property
(``chunkIndex.type``), prefixed by the caller's context.

Binary values inside these objects are standard Base64 as ``java.util.Base64.getDecoder()``
reads it (:func:`b64decode_standard`).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

from gateway.errors import CorruptManifestError
from gateway.kafka.ints import INT32_MAX, INT64_MAX, INT64_MIN, check_int

__all__ = ["JsonFields", "b64decode_standard"]

_STD_B64_RE: Final = re.compile(r"([A-Za-z0-9+/]*)(={0,2})")


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


class JsonFields:
    """One JSON object of a manifest being read, with its path for error messages.

    Every accessor raises :class:`CorruptManifestError` naming ``<path>.<name>``; ``context``
    (for example ``"manifest 'k': "``) starts every message.
    """

    __slots__ = ("_context", "_obj", "path")

    def __init__(self, value: object, path: str, context: str = "") -> None:
        self.path = path
        self._context = context
        if not isinstance(value, dict):
            raise self.error(f"expected a JSON object, found {_json_type(value)}")
        self._obj: dict[str, object] = value

    def where(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, problem: str, name: str | None = None) -> CorruptManifestError:
        where = self.path if name is None else self.where(name)
        return CorruptManifestError(f"{self._context}{where or '<root>'}: {problem}")

    def names(self) -> list[str]:
        """The property names, in document order."""
        return list(self._obj)

    def only(self, *names: str) -> None:
        """Refuse any property not in ``names`` (Jackson's FAIL_ON_UNKNOWN_PROPERTIES)."""
        for name in self._obj:
            if name not in names:
                raise self.error("unknown property", name)

    def raw(self, name: str) -> object:
        try:
            return self._obj[name]
        except KeyError:
            raise self.error("required property is missing", name) from None

    def integer(self, name: str, lo: int, hi: int) -> int:
        value = self.raw(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, found {_json_type(value)}", name)
        return check_int("value", value, lo, hi, error=lambda problem: self.error(problem, name))

    def int32(self, name: str, lo: int = 0) -> int:
        return self.integer(name, lo, INT32_MAX)

    def int64(self, name: str) -> int:
        return self.integer(name, INT64_MIN, INT64_MAX)

    def string(self, name: str) -> str:
        value = self.raw(name)
        if not isinstance(value, str):
            raise self.error(f"expected a string, found {_json_type(value)}", name)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self.error("string holds an unpaired surrogate", name) from exc
        return value

    def boolean(self, name: str) -> bool:
        value = self.raw(name)
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, found {_json_type(value)}", name)
        return value

    def child(self, name: str) -> JsonFields:
        return JsonFields(self.raw(name), self.where(name), self._context)

    def optional_child(self, name: str) -> JsonFields | None:
        """The object at ``name``; ``None`` when the property is absent or ``null``."""
        value = self._obj.get(name)
        return None if value is None else JsonFields(value, self.where(name), self._context)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
