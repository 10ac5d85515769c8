"""The real broker's side of the broker benchmark: a copy of the built broker home restarted
with the Aiven plugin's S3 backend pointed at the slow stand-in over the bucket folder.

Warm first, while every data segment is still local (the build kept them: ``local.retention.ms``
-2): the broker serves the records from its local log, in the page cache (the copy just wrote
the files; one unmeasured pass reads them first). Then ``local.retention.bytes`` drops to 1,
the broker deletes every local data segment (checked: each partition folder keeps only the
trailer's active segment, based at the tiered end), the broker restarts (a fresh JVM, empty
plugin caches, as the gateway's cold process) and the cold pass reads everything through
the plugin from the stand-in (checked: the stand-in's bytes sent during the pass).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Final

from confluent_kafka import admin as ka

from tests.bench.broker_bucket import TOPIC, BenchBroker, Built, plugin_dir, plugin_settings
from tests.bench.broker_sides import (
    BUCKET_NAME,
    Pass,
    SlowS3,
    idle_cpu_ms_per_s,
    measured,
    read_all,
)

S3_STORAGE: Final = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"
MEMORY_CHUNK_CACHE: Final = "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache"
RLMM_READY: Final = "Initialized topic-based RLMM resources successfully"
WAIT_S: Final = 300.0


def reading_settings(endpoint: str, chunk_cache_bytes: int, prefetch_bytes: int) -> dict[str, str]:
    """``rsm.config.*`` for reading through S3: the build's, the S3 backend, and a memory
    chunk cache with prefetching (the plugin has no chunk cache by default: every fetch would
    GET its chunks again) of the gateway's chunk cache size (256 MiB) and 8 MiB of prefetch
    (``--broker-prefetch-mib``; with 1 MiB the broker's cold pass took 22.97 s, within the
    23.4-29.5 s of its 8 MiB runs: docs/benchmarks.md, issue 30)."""
    settings = plugin_settings() | {
        "storage.backend.class": S3_STORAGE,
        "storage.s3.endpoint.url": endpoint,
        "storage.s3.bucket.name": BUCKET_NAME,
        "storage.s3.region": "us-east-1",
        "storage.s3.path.style.access.enabled": "true",
        "storage.aws.access.key.id": "testing",
        "storage.aws.secret.access.key": "testing",
    }
    if chunk_cache_bytes > 0:
        settings |= {
            "fetch.chunk.cache.class": MEMORY_CHUNK_CACHE,
            "fetch.chunk.cache.size": str(chunk_cache_bytes),
            "fetch.chunk.cache.prefetch.max.size": str(prefetch_bytes),
        }
    return settings


def _ready_count(broker: BenchBroker) -> int:
    path = broker.home / "broker.out"
    return path.read_text(errors="replace").count(RLMM_READY) if path.exists() else 0


def _start(broker: BenchBroker, restart: bool) -> None:
    """Start (or restart) and wait until the topic-based RLMM is initialized again."""
    before = _ready_count(broker)
    broker.restart() if restart else broker.start()
    deadline = time.monotonic() + WAIT_S
    while _ready_count(broker) <= before:
        if time.monotonic() > deadline:
            raise TimeoutError(f"RLMM not initialized in {WAIT_S} s: {broker.tail()}")
        time.sleep(0.2)
    time.sleep(3.0)  # its consumer task reads the (small) metadata topic


def local_logs(broker: BenchBroker, built: Built) -> dict[int, list[int]]:
    """Per partition, the base offsets of the local ``.log`` segments."""
    return {
        p: sorted(int(f.stem) for f in (broker.log_dir / f"{TOPIC}-{p}").glob("*.log"))
        for p in built.ends
    }


def only_trailers(local: dict[int, list[int]], built: Built) -> bool:
    """No local segment below the tiered end: the data is remote only."""
    return all(bases and bases[0] == built.ends[p] for p, bases in local.items())


def _drop_local(broker: BenchBroker, built: Built) -> None:
    """``local.retention.bytes`` 1; until only each partition's trailer segment is local (by
    size, not time: a time breach rolls the active trailer segment, which then must upload
    before it goes, and the stand-in takes no PUT)."""
    op = ka.AlterConfigOpType.SET
    entry = ka.ConfigEntry("local.retention.bytes", "1", incremental_operation=op)
    resource = ka.ConfigResource(ka.ResourceType.TOPIC, TOPIC, incremental_configs=[entry])
    for future in broker.admin.incremental_alter_configs([resource]).values():
        future.result(30)
    deadline = time.monotonic() + WAIT_S
    while not only_trailers(have := local_logs(broker, built), built):
        if time.monotonic() > deadline:
            raise TimeoutError(f"local segments not deleted in {WAIT_S} s: {have}")
        time.sleep(0.5)


def run_broker(built: Built, work: Path, s3: SlowS3, rounds: int, chunk_cache_bytes: int,
               prefetch_bytes: int, restart: bool = True
               ) -> tuple[list[Pass], Pass, str]:  # fmt: skip
    """The warm passes, the cold pass, and a note of what was checked."""
    plugin = plugin_dir()
    assert plugin is not None
    home = work / "broker"
    shutil.rmtree(home, ignore_errors=True)
    started = time.monotonic()
    shutil.copytree(built.home, home, symlinks=True)
    print(f"  broker home copied in {time.monotonic() - started:.1f} s", flush=True)
    rsm = reading_settings(s3.endpoint, chunk_cache_bytes, prefetch_bytes)
    broker = BenchBroker(home, built.bucket, plugin_dir=plugin, rsm=rsm)
    broker.cluster_id = built.cluster_id  # formatted: start without formatting again
    try:
        _start(broker, restart=False)
        local = local_logs(broker, built)
        if any(len(bases) < 2 or bases[0] != 0 for bases in local.values()):
            raise RuntimeError(f"the build's local segments are missing: {local}")
        pid = broker.proc.pid if broker.proc else 0

        def read() -> int:
            return read_all(broker.bootstrap, built, "broker")

        measured("broker", "warm-up (local log)", pid, s3, built, read)
        warm = [measured("broker", f"warm {i + 1} (local log)", pid, s3, built, read)
                for i in range(rounds)]  # fmt: skip
        if any(w.s3_gets for w in warm):
            raise RuntimeError("the broker's warm passes read from the stand-in")
        _drop_local(broker, built)
        if restart:
            _start(broker, restart=True)
        else:
            time.sleep(3.0)  # the last deletions settle
        if not only_trailers(local := local_logs(broker, built), built):
            raise RuntimeError(f"local segments back after the restart: {local}")
        idle = idle_cpu_ms_per_s(broker.proc.pid if broker.proc else 0)
        cold = measured("broker", "cold (remote, plugin)", broker.proc.pid if broker.proc else 0,
                        s3, built, read)  # fmt: skip
        if cold.s3_bytes < built.log_bytes * 0.95:
            raise RuntimeError(f"the cold pass fetched {cold.s3_bytes} bytes of "
                               f"{built.log_bytes}: not all from remote")  # fmt: skip
        how = "after a restart" if restart else "in the JVM of the warm passes (no restart)"
        note = (f"broker idle before the cold pass ({how}): {idle:.0f} ms CPU per s; "
                f"broker cold: every partition's local log held only its trailer segment "
                f"(based at the tiered end) and the stand-in sent {cold.s3_bytes / 2**20:.0f} "
                f"MiB in {cold.s3_gets} GETs during the pass")  # fmt: skip
        return warm, cold, note
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)
