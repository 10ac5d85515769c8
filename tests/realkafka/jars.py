"""Apache Kafka's jars from Maven Central, cached under ``build/real-kafka/libs``.

``mvn dependency:copy-dependencies`` on ``tests/realkafka/pom.xml`` (packaging ``pom``) copies
the broker, its tools and clients; once the stamp is written the cache is used offline. A
failed download raises, naming the artifacts, never a silent skip. The ``kafka-storage`` test
jar (Kafka's own ``LocalTieredStorage``) goes to ``build/real-kafka/local-tiered-storage``, a
folder of its own for ``remote.log.storage.manager.class.path``, not the broker's class path.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM = Path(__file__).with_name("pom.xml")
CACHE = ROOT / "build" / "real-kafka"
LIBS = CACHE / "libs"
LTS = CACHE / "local-tiered-storage"


class JarFetchError(RuntimeError):
    """Maven could not fetch Kafka's jars."""


def kafka_version() -> str:
    text = POM.read_text()
    return text.split("<kafka.version>", 1)[1].split("</kafka.version>", 1)[0]


def kafka_libs() -> Path:
    """The folder of Kafka's jars (broker, tools, clients), fetched once."""
    return _copy(LIBS, "-DexcludeClassifiers=test")


def local_tiered_storage_dir() -> Path:
    """The folder holding only ``kafka-storage-<version>-test.jar`` (``LocalTieredStorage``),
    fetched once."""
    return _copy(LTS, "-DincludeClassifiers=test", "-DexcludeTransitive=true")


def _copy(folder: Path, *selection: str) -> Path:
    stamp = folder / ".complete"
    if stamp.exists() and stamp.read_text() == POM.read_text():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.jar"):
        old.unlink()
    command = [
        "mvn",
        "-B",
        "-q",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={folder}",
        *selection,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JarFetchError(
            f"mvn could not fetch org.apache.kafka:kafka_2.13/kafka-tools/kafka-clients/"
            f"kafka-storage:{kafka_version()} (tests/realkafka/pom.xml):\n"
            f"{done.stdout[-4000:]}{done.stderr[-2000:]}"
        )
    stamp.write_text(POM.read_text())
    return folder
