"""A live broker in every test run, with no plugin: what the plugin is needed for comes from the
fixtures (``tests/fixtures/real_kafka``), the rest is checked on a broker started now.

A broker without tiered storage takes the same writes as the fixtures' (``produce.Writer``,
librdkafka and the Java producer, a restart between rounds), Kafka's own clients record what
they read from it, then the broker is stopped and its partition folders are tiered with
``tiered-gateway tier --include-active`` (the broker's own segment, index, snapshot and
checkpoint files, in the plugin's layout). The result has the fixtures' shape, so the same
checks run on it: every record, ListOffsets (here the broker's max-timestamp answer too, which
a tiered 4.1 broker cannot give), the listener under Kafka's clients, ``dump`` against
DumpLogSegments, the served bytes against the broker's files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import NewTopic

from tests.realkafka import oracle
from tests.realkafka.broker import Broker
from tests.realkafka.generate import roll_pause
from tests.realkafka.jars import kafka_libs, kafka_version
from tests.realkafka.java import JavaTools
from tests.realkafka.produce import TOPICS, Writer, topic_settings


class LiveError(RuntimeError):
    """The live broker's bucket could not be made."""


def build(work: Path, java: JavaTools) -> Path:
    """A bucket folder in the fixtures' layout, written now by a live broker."""
    folder = work / "live"
    broker = Broker(kafka_libs(), work / "live-broker", None, {})
    broker.start()
    try:
        topics = [
            NewTopic(t, n, 1, config=topic_settings(extra, tiered=False))
            for t, (n, extra) in TOPICS.items()
        ]
        broker.create_topics(topics)
        writer = Writer(
            broker.bootstrap,
            lambda t, cmd, spec: java.run(cmd, broker.bootstrap, t, str(spec)),
            work,
        )
        writer.round(0)
        roll_pause()
        broker.restart()  # a new leader epoch
        writer.round(1)
        roll_pause()
        writer.spanning_transaction()
        roll_pause()
        writer.trailer({t: n for t, (n, _) in TOPICS.items()})
        if writer.failures:
            raise LiveError(f"deliveries failed: {writer.failures[:5]}")
        oracle.record(broker.bootstrap, java, folder / "oracle", TOPICS, tiered=False)
        broker.stop()
        _tier(broker, folder)
    except BaseException:
        print(broker.tail(60), file=sys.stderr)
        raise
    finally:
        broker.close()
    settings = {
        "kafka": kafka_version(),
        "live": True,
        "store": "filesystem",
        "key_prefix": "",
        "topics": {t: {"partitions": n} for t, (n, _) in TOPICS.items()},
    }
    (folder / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    return folder


def _tier(broker: Broker, folder: Path) -> None:
    """Every partition folder, active segment included (the broker is stopped), into
    ``folder/bucket``; its ``.log`` files copied to ``folder/local``."""
    for topic, (partitions, _) in TOPICS.items():
        for p in range(partitions):
            source = broker.log_dir / f"{topic}-{p}"
            local = folder / "local" / f"{topic}-{p}"
            local.mkdir(parents=True)
            for log in source.glob("*.log"):
                shutil.copyfile(log, local / log.name)
            topic_id = _topic_id(source)
            command = [
                sys.executable,
                "-m",
                "gateway.cli",
                "tier",
                "--store",
                (folder / "bucket").as_uri(),
                "--topic",
                topic,
                "--topic-id",
                topic_id,
                "--partition",
                str(p),
                "--include-active",
                "--chunk-size",
                "16384",
                *(["--compression"] if p % 2 else []),
                str(source),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise LiveError(f"tier {topic}-{p} exited {done.returncode}: {done.stderr[-1000:]}")


def _topic_id(partition_folder: Path) -> str:
    """The topic id in the broker's ``partition.metadata`` (``topic_id: <base64url>``)."""
    for line in (partition_folder / "partition.metadata").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    raise LiveError(f"no topic_id in {partition_folder / 'partition.metadata'}")
