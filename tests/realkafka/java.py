"""The project's own Java programs (``java/KafkaOracle.java``: a producer driven by a JSON spec,
and the oracles read with Kafka's clients; ``java/RecordReader.java``: Kafka's reading of raw
batches), compiled by ``javac`` against Kafka's jars."""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCES = tuple(sorted((Path(__file__).with_name("java")).glob("*.java")))
TIMEOUT_S = 180.0


class JavaToolError(RuntimeError):
    """A Java tool failed; the message has its output."""


class JavaTools:
    def __init__(self, libs: Path, classes: Path) -> None:
        self.libs, self.classes = libs, classes

    def compile(self) -> Path:
        """``javac`` once (again only when a source changed)."""
        stamps = [self.classes / f"{source.stem}.class" for source in SOURCES]
        newest = max(source.stat().st_mtime for source in SOURCES)
        if any(not s.exists() or s.stat().st_mtime < newest for s in stamps):
            self.classes.mkdir(parents=True, exist_ok=True)
            command = ["javac", "-nowarn", "-cp", f"{self.libs}/*", "-d", str(self.classes)]
            done = subprocess.run(
                [*command, *map(str, SOURCES)], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                names = " ".join(s.name for s in SOURCES)
                raise JavaToolError(f"javac {names} failed:\n{done.stderr}")
        return self.classes

    def run(self, command: str, *args: str, program: str = "KafkaOracle") -> str:
        """``<program> <command> <args>`` (a program of ``java/``); its standard output."""
        classpath = f"{self.libs}/*:{self.compile()}"
        return self.main(program, command, *args, classpath=classpath)

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
