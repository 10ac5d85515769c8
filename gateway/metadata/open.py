"""Opening the RLMM: durable in a state folder (SQLite, WAL), or in memory for one run."""

from __future__ import annotations

from pathlib import Path

from gateway.metadata.backend import MemoryBackend
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.sqlite import SQLiteBackend

STATE_DB = "rlmm.sqlite"
"""The catalog's file inside a ``--state-dir``."""


def open_manager(state_dir: Path | None) -> RemoteLogMetadataManager:
    """The RLMM: durable in ``state_dir`` when given, else in memory."""
    if state_dir is None:
        return RemoteLogMetadataManager(MemoryBackend())
    return RemoteLogMetadataManager(SQLiteBackend(state_dir / STATE_DB))
