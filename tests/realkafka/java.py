"""The project's own Java program (``java/KafkaOracle.java``: a producer driven by a JSON spec,
and the oracles read with Kafka's clients), compiled by ``javac`` against Kafka's jars."""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("java") / "KafkaOracle.java"
TIMEOUT_S = 180.0


class JavaToolError(RuntimeError):
    """A Java tool failed; the message has its output."""


class JavaTools:
    def __init__(self, libs: Path, classes: Path) -> None:
        self.libs, self.classes = libs, classes

    def compile(self) -> Path:
        """``javac`` once (again only when the source changed)."""
        stamp = self.classes / "KafkaOracle.class"
        if not stamp.exists() or stamp.stat().st_mtime < SOURCE.stat().st_mtime:
            self.classes.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["javac", "-nowarn", "-cp", f"{self.libs}/*", "-d", str(self.classes), str(SOURCE)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise JavaToolError(f"javac KafkaOracle.java failed:\n{done.stderr}")
        return self.classes

    def run(self, command: str, *args: str) -> str:
        """``KafkaOracle <command> <args>``; its standard output."""
        classpath = f"{self.libs}/*:{self.compile()}"
        return self.main("KafkaOracle", command, *args, classpath=classpath)

    def main(self, main: str, *args: str, classpath: str | None = None) -> str:
        """Any main class on Kafka's jars (DumpLogSegments, ...); its standard output."""
        command = [
            "java",
            "-Xmx384m",
            "-Dlog4j2.level=WARN",
            "-cp",
            classpath or f"{self.libs}/*",
            main,
            *args,
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=TIMEOUT_S
            )
        except subprocess.TimeoutExpired as e:
            raise JavaToolError(f"{main} {' '.join(args)}: no answer in {TIMEOUT_S:.0f} s") from e
        if done.returncode != 0:
            raise JavaToolError(
                f"{main} {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
            )
        return done.stdout
