"""The RLMM on both backends, for the tests of this folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.metadata.backend import MemoryBackend
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.sqlite import SQLiteBackend


@pytest.fixture(params=["memory", "sqlite"])
def rlmm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RemoteLogMetadataManager]:
    backend = MemoryBackend() if request.param == "memory" else SQLiteBackend(tmp_path / "m.db")
    manager = RemoteLogMetadataManager(backend)
    yield manager
    manager.close()
