"""Standard Base64 as ``java.util.Base64.getDecoder()`` reads it (the manifests' binary fields)."""

from __future__ import annotations

import pytest

from gateway.remote._json import b64decode_standard


@pytest.mark.parametrize(
    ("text", "raw"),
    [("", b""), ("CgsMDQ==", b"\n\x0b\x0c\r"), ("CgsMDQ", b"\n\x0b\x0c\r"), ("+/8=", b"\xfb\xff")],
)
def test_b64decode_standard(text: str, raw: bytes) -> None:
    assert b64decode_standard(text) == raw


@pytest.mark.parametrize(
    "text", ["C", "CgsMDQ=", "CgsMDQ===", "Cg==Cg==", "Cg sM", "-_8=", "=", "Zm9v\n"]
)
def test_b64decode_standard_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        b64decode_standard(text)
