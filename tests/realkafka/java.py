"""The project's own Java programs (``java/KafkaOracle.java``: a producer driven by a JSON spec,
and the oracles read with Kafka's clients; ``java/RecordReader.java``: Kafka's reading of raw
batches), compiled by ``javac`` against Kafka's jars. ``KafkaOracle`` runs as a server, one
JVM per calling thread (its ``serve`` command), rather than one JVM per command."""

from __future__ import annotations

import collections
import contextlib
import json
import subprocess
import threading
from pathlib import Path
from typing import IO

SOURCES = tuple(sorted((Path(__file__).with_name("java")).glob("*.java")))
TIMEOUT_S = 180.0


class JavaToolError(RuntimeError):
    """A Java tool failed; the message has its output."""


DONE = "KafkaOracle done "
JVM = ("java", "-Xmx384m", "-Dlog4j2.level=WARN")


class _Server:
    """``KafkaOracle serve``: a command a line on its stdin, its output then a ``DONE`` line on
    its stdout; stderr kept (its last lines) for the errors."""

    def __init__(self, classpath: str) -> None:
        self.proc = subprocess.Popen(
            [*JVM, "-cp", classpath, "KafkaOracle", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True).start()

    def _drain(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.stderr.append(line)

    def call(self, args: list[str]) -> str:
        """The command's stdout; :class:`JavaToolError` when it failed or the JVM ended."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stderr.clear()
        watchdog = threading.Timer(TIMEOUT_S, self.proc.kill)  # the JVM's own one halts first
        watchdog.start()
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.flush()
            out = []
            for line in self.proc.stdout:
                if line.startswith(DONE):
                    code, _, message = line[len(DONE) :].rstrip("\n").partition(" ")
                    if code != "0":
                        raise JavaToolError(
                            f"KafkaOracle {' '.join(args)} exited {code}: {message}\n{self._tail()}"
                        )
                    return "".join(out)
                out.append(line)
        except OSError:
            pass  # the JVM is gone: said below
        finally:
            watchdog.cancel()
        self.close()
        raise JavaToolError(f"KafkaOracle {' '.join(args)}: the JVM ended\n{self._tail()}")

    def _tail(self) -> str:
        return "".join(self.stderr)[-3000:]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # the end of its stdin ends the JVM
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class JavaTools:
    def __init__(self, libs: Path, classes: Path) -> None:
        self.libs, self.classes = libs, classes
        self._local = threading.local()  # this thread's KafkaOracle server
        self._servers: list[_Server] = []
        self._lock = threading.Lock()

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
        if program != "KafkaOracle":
            return self.main(program, command, *args, classpath=classpath)
        server: _Server | None = getattr(self._local, "server", None)
        if server is None or not server.alive:
            server = self._local.server = _Server(classpath)
            with self._lock:
                self._servers.append(server)
        return server.call([command, *args])

    def close(self) -> None:
        """Every KafkaOracle server ends (each also ends with this process)."""
        with self._lock:
            servers, self._servers = self._servers, []
        for server in servers:
            server.close()

    def __enter__(self) -> JavaTools:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def main(self, main: str, *args: str, classpath: str | None = None) -> str:
        """Any main class on Kafka's jars (DumpLogSegments, ...); its standard output."""
        command = [
            *JVM,
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
