"""The data real producers write for the real-Kafka buckets: librdkafka (confluent-kafka) and
the Java producer (``KafkaOracle produce``), every codec, idempotent and transactional
producers with commits and aborts, headers, null keys and values, a record near 1 MiB.

A *round* writes a little to every topic; the generator rolls segments between rounds (topics
roll by ``segment.ms`` on the next append), so every round lands in segments of its own.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer

from tests.realkafka.report import b64

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SEGMENT_MS = 1500

# name -> (partitions, topic settings beyond the tiering ones)
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    "codecs": (3, {}),
    "logappend": (1, {"message.timestamp.type": "LogAppendTime"}),
    "txn": (2, {}),
    "big": (1, {"max.message.bytes": "2097152"}),
}


def topic_settings(extra: dict[str, str], *, tiered: bool = True) -> dict[str, str]:
    tiering = {"remote.storage.enable": "true"} if tiered else {}
    return {
        **tiering,
        "segment.ms": str(SEGMENT_MS),
        "local.retention.ms": "3600000",  # lowered once the segments are copied and uploaded
        "retention.ms": "-1",
        "file.delete.delay.ms": "1000",
        **extra,
    }


def _payload(rng: random.Random, n: int) -> bytes:
    words = [b"alpha", b"beta", b"gamma", b"delta", b"\x00\xff", "ünï".encode()]
    return b" ".join(rng.choice(words) for _ in range(n))


class Writer:
    """Runs producers against one broker; ``java`` runs ``KafkaOracle produce`` on a spec."""

    def __init__(self, bootstrap: str, java: Callable[[str, str, Path], None], work: Path) -> None:
        self.bootstrap, self.java, self.work = bootstrap, java, work
        self.rng = random.Random(28)
        self._specs = 0
        self.failures: list[str] = []

    def _rd(self, **config: Any) -> Producer:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.failures.append(str(err))

        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.max.bytes": 2_000_000,
                "on_delivery": delivered,
                **config,
            }
        )

    def _java(self, topic: str, config: dict[str, str], steps: list[dict[str, Any]]) -> None:
        self._specs += 1
        spec = self.work / f"spec-{self._specs}.json"
        spec.write_text(json.dumps({"config": config, "steps": steps}))
        self.java(topic, "produce", spec)

    def _send(
        self,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None = None,
        timestamp: int | None = None,
    ) -> dict[str, Any]:
        return {
            "op": "send",
            "partition": partition,
            "key": b64(key),
            "value": b64(value),
            "headers": [[k, b64(v)] for k, v in headers or []],
            "timestamp": timestamp,
        }

    def round(self, n: int) -> None:
        """One round of writes to every topic."""
        rng = self.rng
        for i, codec in enumerate(CODECS):  # librdkafka, one producer per codec
            p = self._rd(**{"compression.codec": codec, "enable.idempotence": i % 2 == 0})
            for j in range(12):
                key = None if j % 5 == 0 else f"k{n}-{j}".encode()
                value = None if j % 7 == 3 else _payload(rng, 5 + j * 3)
                headers = [("h", f"{codec}".encode()), ("nil", None)] if j % 3 == 0 else None
                p.produce("codecs", value=value, key=key, partition=(n + i) % 3, headers=headers)
            p.produce("logappend", value=_payload(rng, 8), key=codec.encode())
            _flush(p)
        now = int(time.time() * 1000)
        for codec in ("none", "lz4", "zstd"):  # the Java producer, CreateTime set by hand too
            steps = [
                self._send(
                    n % 3,
                    f"j{codec}{j}".encode(),
                    _payload(rng, 10),
                    [("java", codec.encode())],
                    now - 5_000 + j if j % 4 == 0 else None,
                )
                for j in range(10)
            ]
            self._java("codecs", {"compression.type": codec}, [*steps, {"op": "flush"}])
        self._java(
            "logappend",
            {"compression.type": "gzip"},
            [self._send(0, None, _payload(rng, 4)) for _ in range(5)] + [{"op": "flush"}],
        )
        self._transactions(n)
        if n == 0:
            self._java(
                "big",
                {"compression.type": "none", "max.request.size": "2097152"},
                [self._send(0, b"big", rng.randbytes(1_000_000)), {"op": "flush"}],
            )
        else:
            p = self._rd(**{"compression.codec": "zstd"})
            p.produce("big", value=_payload(rng, 30_000), key=b"big-zstd")
            _flush(p)

    def _transactions(self, n: int) -> None:
        """Java: a commit and an abort on both partitions; librdkafka: one transaction committed
        and one aborted; an idempotent librdkafka producer between them."""
        rng = self.rng
        java = {"transactional.id": f"java-tx-{n}", "compression.type": "lz4"}
        steps: list[dict[str, Any]] = [{"op": "begin"}]
        steps += [
            self._send(j % 2, b"jtx", _payload(rng, 6), [("tx", b"commit")]) for j in range(8)
        ]
        steps += [{"op": "commit"}, {"op": "begin"}]
        steps += [self._send(j % 2, b"jtx", b"aborted-java") for j in range(6)]
        steps += [{"op": "abort"}]
        self._java("txn", java, steps)
        idem = self._rd(**{"enable.idempotence": True, "compression.codec": "snappy"})
        for j in range(10):
            idem.produce("txn", value=_payload(rng, 3), key=b"idem", partition=j % 2)
        _flush(idem)
        tx = self._rd(**{"transactional.id": f"rd-tx-{n}", "compression.codec": "gzip"})
        tx.init_transactions(30)
        for outcome in ("commit", "abort"):
            tx.begin_transaction()
            for j in range(7):
                tx.produce("txn", value=f"rd-{outcome}-{j}".encode(), key=b"rdtx", partition=j % 2)
            tx.flush(30)
            (tx.commit_transaction if outcome == "commit" else tx.abort_transaction)(30)

    def spanning_transaction(self) -> None:
        """One Java transaction open across a segment roll, then committed."""
        rng = self.rng
        steps: list[dict[str, Any]] = [{"op": "begin"}]
        steps += [self._send(0, b"span", _payload(rng, 4)) for _ in range(5)]
        steps += [{"op": "flush"}, {"op": "sleep", "ms": SEGMENT_MS + 600}]
        steps += [self._send(0, b"span", _payload(rng, 4)) for _ in range(5)]
        steps += [{"op": "commit"}]
        self._java("txn", {"transactional.id": "java-span", "compression.type": "zstd"}, steps)

    def trailer(self, partitions: dict[str, int]) -> None:
        """A small batch to every partition, so that the last data segments roll (it stays in
        the active segment: never tiered)."""
        p = self._rd()
        for topic, count in partitions.items():
            for partition in range(count):
                p.produce(topic, value=b"trailer", partition=partition)
        _flush(p)


def _flush(p: Producer) -> None:
    left = p.flush(60)
    if left:
        raise KafkaException(f"{left} messages not delivered in 60 s")
