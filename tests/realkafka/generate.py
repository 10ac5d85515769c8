"""Write the real-Kafka buckets: a real broker and the real Aiven plugin tier what real producers
wrote, and Kafka itself says what it reads back (``python -m tests.realkafka.generate``).

For each bucket: a broker with the plugin (built from its v1.0.0 tag outside the repository,
``--plugin-dir``), the topics of ``produce.TOPICS``, rounds of writes with a segment roll between
them, a broker restart (new plugin settings, a new leader epoch), a trailer so that the last data
segments roll; then, once every rolled segment is uploaded, copies of the broker's segment files
(for DumpLogSegments), the local segments deleted (``local.retention.ms`` lowered), and the
oracles read *through the plugin*: the Java consumer in both isolation levels, ``offsetsForTimes``
and the Admin client's ListOffsets, librdkafka, and the ``__remote_log_metadata`` records. What is
committed under ``tests/fixtures/real_kafka`` is only those outputs (README.md there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fixtures.ports import listening_port
from tests.realkafka import oracle
from tests.realkafka.broker import Broker
from tests.realkafka.jars import kafka_libs, kafka_version
from tests.realkafka.java import JavaTools
from tests.realkafka.produce import SEGMENT_MS, TOPICS, Writer, topic_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_kafka"
KEY_PAIR_ID = "k28"
UPLOAD_TIMEOUT_S = 120.0
FS_BACKEND = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
S3_BACKEND = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"


@dataclass
class Bucket:
    """One bucket: its name, the plugin settings of each phase (a restart between phases)."""

    name: str
    phases: list[dict[str, str]]
    key_prefix: str = ""
    s3: bool = False
    settings: dict[str, Any] = field(default_factory=dict)


def key_pair(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / f"{KEY_PAIR_ID}-private.pem", folder / f"{KEY_PAIR_ID}-public.pem"
    if not private.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        public.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return private, public


def encryption(private: Path, public: Path) -> dict[str, str]:
    return {
        "encryption.enabled": "true",
        "encryption.key.pair.id": KEY_PAIR_ID,
        "encryption.key.pairs": KEY_PAIR_ID,
        f"encryption.key.pairs.{KEY_PAIR_ID}.public.key.file": str(public),
        f"encryption.key.pairs.{KEY_PAIR_ID}.private.key.file": str(private),
    }


def buckets(private: Path, public: Path, moto: str) -> list[Bucket]:
    fs_a = {"chunk.size": "16384", "compression.enabled": "false"}
    fs_b = {
        "chunk.size": "4194304",
        "compression.enabled": "true",
        "compression.heuristic.enabled": "false",
        **encryption(private, public),
    }
    s3 = {
        "storage.backend.class": S3_BACKEND,
        "storage.s3.bucket.name": "real-kafka",
        "storage.s3.region": "us-east-1",
        "storage.s3.endpoint.url": moto,
        "storage.s3.path.style.access.enabled": "true",
        "storage.aws.access.key.id": "testing",
        "storage.aws.secret.access.key": "testing",
        "key.prefix": "tiered/",
        "custom.metadata.fields.include": "REMOTE_SIZE,OBJECT_PREFIX,OBJECT_KEY",
    }
    s3_a = {
        **s3,
        "chunk.size": "65536",
        "compression.enabled": "true",
        "compression.heuristic.enabled": "true",
        **encryption(private, public),
    }
    s3_b = {**s3, "chunk.size": "1048576", "compression.enabled": "false"}
    return [
        Bucket(
            "fs",
            [
                {"storage.backend.class": FS_BACKEND, **fs_a},
                {"storage.backend.class": FS_BACKEND, **fs_b},
            ],
        ),
        # Encryption is turned on, not off: the plugin reads a manifest's encryption only while
        # encryption is enabled (off, it fails on its own encrypted segments: Jackson cannot
        # construct javax.crypto.SecretKey), so a broker cannot turn it off and read its past.
        Bucket("s3", [s3_b, s3_a], key_prefix="tiered/", s3=True),
    ]


class Store:
    """What a bucket holds: the filesystem backend's folder, or the S3 bucket on moto."""

    def __init__(self, bucket: Bucket, root: Path, moto: str) -> None:
        self.bucket, self.root = bucket, root
        self.s3 = boto3.client(
            "s3",
            endpoint_url=moto,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        if bucket.s3:
            self.s3.create_bucket(Bucket="real-kafka")
        root.mkdir(parents=True, exist_ok=True)

    def keys(self) -> list[str]:
        if not self.bucket.s3:
            return sorted(
                str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()
            )
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket="real-kafka"):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return sorted(keys)

    def copy_to(self, dest: Path) -> None:
        for key in self.keys():
            target = dest / key
            target.parent.mkdir(parents=True, exist_ok=True)
            if self.bucket.s3:
                self.s3.download_file("real-kafka", key, str(target))
            else:
                shutil.copyfile(self.root / key, target)


def rolled_segments(log_dir: Path, topics: Collection[str] = TOPICS.keys()) -> dict[str, list[int]]:
    """Per partition folder of ``topics``, the base offsets of its segments but the active
    (last) one."""
    out: dict[str, list[int]] = {}
    for folder in log_dir.iterdir():
        if folder.is_dir() and folder.name.rsplit("-", 1)[0] in topics:
            bases = sorted(int(p.stem) for p in folder.glob("*.log"))
            out[folder.name] = bases[:-1]
    return out


def wait_uploaded(broker: Broker, store: Store, topics: Collection[str] = TOPICS.keys()) -> None:
    """Until every rolled segment of ``topics`` has its manifest (bounded)."""
    deadline = time.monotonic() + UPLOAD_TIMEOUT_S
    while True:
        manifests = {
            (k.split("/")[-3][:-23] + "-" + k.split("/")[-2], int(k.split("/")[-1][:20]))
            for k in store.keys()  # noqa: SIM118 - a method of Store
            if k.endswith(".rsm-manifest")
        }
        missing = [
            (f, b)
            for f, bases in rolled_segments(broker.log_dir, topics).items()
            for b in bases
            if (f, b) not in manifests
        ]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"not uploaded in {UPLOAD_TIMEOUT_S:.0f} s: {missing}\n{broker.tail()}"
            )
        time.sleep(0.5)


def copy_local(broker: Broker, dest: Path) -> None:
    """The broker's files of every segment, before they are deleted locally. The active one
    too: lowering ``local.retention.ms`` expires it with the rest, and Kafka then rolls it
    (its trailer is tiered too); the checks take the segments the remote tier holds."""
    for folder in rolled_segments(broker.log_dir):
        for base in sorted(int(p.stem) for p in (broker.log_dir / folder).glob("*.log")):
            for path in (broker.log_dir / folder).glob(f"{base:020d}.log"):
                target = dest / folder / path.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        checkpoint = broker.log_dir / folder / "leader-epoch-checkpoint"
        shutil.copyfile(checkpoint, dest / folder / "leader-epoch-checkpoint")


def delete_locally(
    admin: AdminClient, broker: Broker, topics: Collection[str] = TOPICS.keys()
) -> None:
    resources = [
        ConfigResource(
            "topic",
            t,
            incremental_configs=[
                ConfigEntry(
                    "local.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
        for t in topics
    ]
    for f in admin.incremental_alter_configs(resources).values():
        f.result(30)
    deadline = time.monotonic() + UPLOAD_TIMEOUT_S
    while any(rolled_segments(broker.log_dir, topics).values()):
        if time.monotonic() > deadline:
            left = rolled_segments(broker.log_dir, topics)
            raise TimeoutError(f"local segments not deleted: {left}")
        time.sleep(0.5)


def roll_pause() -> None:
    time.sleep(SEGMENT_MS / 1000 + 0.4)


def generate_bucket(bucket: Bucket, work: Path, plugin_dir: Path, moto: str, out: Path) -> None:
    libs = kafka_libs()
    java = JavaTools(libs, work / "classes")
    store_root = work / f"{bucket.name}-store"
    store = Store(bucket, store_root, moto)
    rsm = [dict(p) for p in bucket.phases]
    for p in rsm:
        if not bucket.s3:
            p["storage.root"] = str(store_root)
    broker = Broker(libs, work / f"{bucket.name}-broker", plugin_dir, rsm[0])
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = [
            NewTopic(t, n, 1, config=topic_settings(extra)) for t, (n, extra) in TOPICS.items()
        ]
        broker.create_topics(topics)
        writer = Writer(
            broker.bootstrap,
            lambda t, cmd, spec: java.run(cmd, broker.bootstrap, t, str(spec)),
            work,
        )
        rounds = 0
        for phase, settings in enumerate(rsm):
            if phase:
                wait_uploaded(broker, store)
                broker.rsm = settings
                broker.restart()  # a new leader epoch, the next plugin settings
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for _ in range(2):
                writer.round(rounds)
                rounds += 1
                roll_pause()
            if phase == 0:
                writer.spanning_transaction()
                roll_pause()
        roll_pause()
        writer.trailer({t: n for t, (n, _) in TOPICS.items()})
        if writer.failures:
            raise RuntimeError(f"deliveries failed: {writer.failures[:5]}")
        wait_uploaded(broker, store)
        copy_local(broker, out / "local")
        delete_locally(admin, broker)
        oracle.record(broker.bootstrap, java, out / "oracle", TOPICS)
        spark = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.realkafka.spark_oracle",
                broker.bootstrap,
                str(out / "oracle"),
                *TOPICS,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if spark.returncode != 0:
            raise RuntimeError(f"Spark's Kafka source failed:\n{spark.stderr[-4000:]}")
        for checkpoint in (out / "oracle").glob(".checkpoint-*"):
            shutil.rmtree(checkpoint)
        store.copy_to(out / "bucket")
        bucket.settings = {
            "phases": rsm,
            "rounds": rounds,
            "topics": {
                t: {"partitions": n, **topic_settings(extra)} for t, (n, extra) in TOPICS.items()
            },
        }
    except BaseException:
        print(broker.tail(60), file=sys.stderr)
        raise
    finally:
        broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--plugin-dir",
        type=Path,
        required=True,
        help="the plugin's jars and their dependencies (no Kafka, no slf4j)",
    )
    parser.add_argument("--plugin-commit", required=True)
    parser.add_argument("--work", type=Path, default=Path("build/real-kafka/generate"))
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    private, public = key_pair(args.out / "keys")
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{listening_port(moto, timeout_s=60)}"
        done = []
        for bucket in buckets(private, public, endpoint):
            if args.only and bucket.name != args.only:
                continue
            out = args.out / bucket.name
            shutil.rmtree(out, ignore_errors=True)
            started = time.monotonic()
            generate_bucket(bucket, args.work, args.plugin_dir, endpoint, out)
            print(f"{bucket.name}: {time.monotonic() - started:.0f} s", flush=True)
            settings = {
                "kafka": kafka_version(),
                "plugin_commit": args.plugin_commit,
                "key_prefix": bucket.key_prefix,
                "store": "s3" if bucket.s3 else "filesystem",
                **bucket.settings,
            }
            text = json.dumps(settings, indent=1, sort_keys=True).replace(
                str(args.work.resolve()), "<work>"
            )
            (out / "settings.json").write_text(
                text.replace(str(args.out.resolve()), "<fixtures>") + "\n"
            )
            done.append(bucket.name)
    finally:
        moto.terminate()
        moto.wait()


if __name__ == "__main__":
    main()
