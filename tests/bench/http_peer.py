"""The naive peer of the end-to-end HTTP benchmark: GET the ``.log`` objects (here: read the
files of the filesystem store) and decode every record with kafka-python, CRC checked, key and
value touched; records per CPU-second of this process."""

from __future__ import annotations

import time
from pathlib import Path

from kafka.record import MemoryRecords

from tests.bench.http_procs import self_cpu_s


def decode_log(data: bytes) -> int:
    """The records of ``data``, decoded by kafka-python."""
    records = MemoryRecords(data)
    n = 0
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise RuntimeError(f"kafka-python: CRC mismatch at {batch.base_offset}")
        for record in batch:
            _ = record.key, record.value, record.headers
            n += 1
    return n


def naive_peer(logs: tuple[Path, ...], seconds: float) -> tuple[int, float, float]:
    """(records, CPU seconds, wall seconds) of reading and decoding whole logs in order until
    ``seconds`` have passed (at least one log)."""
    n = 0
    cpu0, wall0 = self_cpu_s(), time.perf_counter()
    deadline = wall0 + seconds
    while time.perf_counter() < deadline:
        for log in logs:
            n += decode_log(log.read_bytes())
            if time.perf_counter() >= deadline:
                break
    return n, self_cpu_s() - cpu0, time.perf_counter() - wall0
