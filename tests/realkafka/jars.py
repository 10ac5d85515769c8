"""Apache Kafka's jars from Maven Central, cached under ``build/real-kafka/libs``.

``mvn dependency:copy-dependencies`` on ``tests/realkafka/pom.xml`` (packaging ``pom``) copies
the broker, its tools and clients; once the stamp is written the cache is used offline. A
failed download raises, naming the artifacts, never a silent skip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM = Path(__file__).with_name("pom.xml")
CACHE = ROOT / "build" / "real-kafka"
LIBS = CACHE / "libs"
_STAMP = LIBS / ".complete"


class JarFetchError(RuntimeError):
    """Maven could not fetch Kafka's jars."""


def kafka_version() -> str:
    text = POM.read_text()
    return text.split("<kafka.version>", 1)[1].split("</kafka.version>", 1)[0]


def kafka_libs() -> Path:
    """The folder of Kafka's jars (broker, tools, clients), fetched once."""
    if _STAMP.exists() and _STAMP.read_text() == POM.read_text():
        return LIBS
    LIBS.mkdir(parents=True, exist_ok=True)
    for old in LIBS.glob("*.jar"):
        old.unlink()
    command = [
        "mvn",
        "-B",
        "-q",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={LIBS}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise JarFetchError(
            f"mvn could not fetch org.apache.kafka:kafka_2.13/kafka-tools/kafka-clients:"
            f"{kafka_version()} (tests/realkafka/pom.xml):\n"
            f"{done.stdout[-4000:]}{done.stderr[-2000:]}"
        )
    _STAMP.write_text(POM.read_text())
    return LIBS
