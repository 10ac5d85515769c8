"""``serve --workers N``: N worker processes serving one listening socket.

The gateway's work is mostly Python under the GIL, so one process uses one core. The
supervisor (:func:`supervise`, the ``serve`` process itself) binds the socket, loads what every
worker runs (the app, the service, uvicorn, and the compiled record loops: numba and LLVM,
~110 MiB) once, then forks N workers: the code and the loops are pages the workers share with
the supervisor and with each other (issue 30: a worker's own memory is what it allocates), and
the resolved :class:`~gateway.config.Settings` reach them as they are, so flags, environment
and TOML file are parsed once. The kernel hands each connection to one of the workers blocked
in ``accept``.

Each worker is a whole gateway (its service, caches, catalog and metrics) with
:func:`~gateway.commands.worker_budgets.per_worker` budgets: the memory, in-flight and GET
budgets configured are the server's total; of the chunk cache's budget, ``shared_runs_share`` is
one ring of verified runs that the supervisor maps before it forks and every worker reads
(:mod:`gateway.cache.shared_runs`), the rest divided. The disk tiers share their directories
(:mod:`indexcache.share`); with a ``state_dir``, worker 0 keeps its catalog in ``state_dir``
itself and worker ``i`` in ``state_dir/worker-i`` (one SQLite writer per file). Responses carry
``X-Served-By: worker I pid P``. Workers other than 0 take connections only once their first
bucket scan is done, so a request never meets a sibling that is still loading while worker 0
answers ``/healthz`` and says in ``/readyz`` why the server is not ready yet.

With ``--kafka-listener`` the Kafka listener follows the same model: the supervisor binds its
sockets too (:func:`gateway.listener.server.bind_listener`; port 0: the port taken, which every
worker advertises in its Metadata answers), every worker inherits them and serves them beside
its HTTP API on its own service, and a worker other than 0 starts it only once its first
bucket scan is done (its lifespan enters the listener after the service factory of
:func:`~gateway.commands.worker_process._run_worker` waited). Its ``max_connections`` is
the worker's share, as for HTTP.

SIGTERM or SIGINT to the supervisor stops every worker gracefully (a second one kills them);
a worker that dies is logged and started again (at most once a second); a worker that could
not start (exit code 3: its service did not open) stops the server.

This module is the supervisor: it binds, preloads (:func:`preload`) and keeps the workers
running (:class:`Supervisor`). One worker process, from its fork to its exit, is
:mod:`gateway.commands.worker_process`; the budgets each worker gets are
:mod:`gateway.commands.worker_budgets`; uvicorn's configuration, shared with the one-process
``serve``, is :mod:`gateway.commands.server`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from types import FrameType
from typing import Final

from gateway.cache.shared_runs import SharedRunArena
from gateway.commands.worker_budgets import arena_bytes
from gateway.commands.worker_process import WORKER_NOT_STARTED, Forked, WorkerSpec, fork_worker
from gateway.config import Settings
from gateway.errors import ConfigurationError
from indexcache.share import DiskShare

log = logging.getLogger(__name__)

RESTART_INTERVAL_S: Final = 1.0
MAX_RESTART_INTERVAL_S: Final = 30.0  # the longest wait between failing restarts
POLL_S: Final = 0.1
STOP_MARGIN_S: Final = 5.0  # past shutdown_grace_s, a worker still running is killed
BACKLOG: Final = 2048  # uvicorn's default


def preload(settings: Settings) -> None:
    """Load, in the supervisor, what every worker runs, so the forked workers share its pages:
    the app, the service and uvicorn; the compiled record loops when they are on (a platform
    where they fail does not start, as in one process)."""
    from gateway.api.app import create_app, warm_up  # noqa: PLC0415, F401
    from gateway.api.transport import guarded_protocol  # noqa: PLC0415, F401
    from gateway.service.open import open_service  # noqa: PLC0415, F401

    if settings.kafka_listener is not None:
        from gateway.listener.server import listening  # noqa: PLC0415, F401
    if settings.compiled_records:
        warm_up()
    gc.collect()
    gc.freeze()  # the collector leaves the shared objects' pages alone in the workers


def bind(settings: Settings) -> socket.socket:
    """The listening socket of ``settings.host``/``port``, as uvicorn binds it."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.host, settings.port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Starts the workers, starts again those that die, stops them all on a signal."""

    def __init__(
        self,
        settings: Settings,
        sock: socket.socket,
        kafka_sockets: Sequence[socket.socket] = (),
    ) -> None:
        self._settings = settings
        self._sock = sock
        self._kafka_fds = tuple(k.fileno() for k in kafka_sockets)
        self._since = time.time()
        arena = arena_bytes(settings)
        self._arena = SharedRunArena(arena) if arena else None
        self._procs: dict[int, Forked] = {}
        self._started_at: dict[int, float] = {}
        self._started_pipes: dict[int, int] = {}  # read ends, until the worker says it serves
        self._serving: set[int] = set()
        self._served: set[int] = set()  # indexes whose worker served at least once
        self._backoff: dict[int, float] = {}  # seconds before the next start of an index
        self._signals = 0
        # worker 0's first scan gates its siblings at the start (WorkerSpec.gate_fd): the
        # ends, each closed here once the workers that hold it are forked
        self._gate: dict[str, int] = {}
        if settings.workers > 1:
            self._gate["read"], self._gate["write"] = os.pipe()
            os.set_blocking(self._gate["read"], False)

    def _start(self, index: int, gate_fd: int | None = None) -> None:
        share = DiskShare(index, self._settings.workers, self._since)
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        spec = WorkerSpec(
            self._settings, share, self._sock.fileno(), write_end, os.getpid(),
            restarted=index in self._served, kafka_fds=self._kafka_fds, arena=self._arena,
            gate_fd=gate_fd,
        )  # fmt: skip
        gate = [fd for fd in self._gate.values() if fd != gate_fd]
        try:
            proc = fork_worker(spec, close=[read_end, *self._started_pipes.values(), *gate])
        finally:
            os.close(write_end)
        self._procs[index] = proc
        self._started_at[index] = time.monotonic()
        self._started_pipes[index] = read_end
        self._serving.discard(index)
        log.info("worker %d starting (pid %d)", index, proc.pid)

    def _close_gate(self, end: str) -> None:
        fd = self._gate.pop(end, None)
        if fd is not None:
            os.close(fd)

    def _has_started(self, index: int) -> bool:
        """Whether worker ``index`` said it serves (its pipe is closed from then on)."""
        fd = self._started_pipes.get(index)
        if fd is not None:
            try:
                said = os.read(fd, 1)
            except BlockingIOError:
                return False
            os.close(fd)
            del self._started_pipes[index]
            if said:
                self._serving.add(index)
                self._served.add(index)
                self._backoff.pop(index, None)
                log.info("worker %d (pid %d) serves", index, self._procs[index].pid)
        return index in self._serving

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        # worker 0 gets the gate's write end, the others its read end; replacements neither
        self._start(0, self._gate.get("write"))
        self._close_gate("write")
        for index in range(1, self._settings.workers):
            self._start(index, self._gate.get("read"))
        self._close_gate("read")
        status = 0
        while not self._signals and status == 0:
            time.sleep(POLL_S)
            status = self._reap()
        self._stop_all()
        return status

    def _reap(self) -> int:
        """Restart the workers that died; ``WORKER_NOT_STARTED`` if one could not start."""
        for index, proc in list(self._procs.items()):
            started = self._has_started(index)
            code = proc.poll()
            if code is None:
                continue
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            if not started and index not in self._served:
                log.error(
                    "worker %d (pid %d) exited (%s) before it served: stopping the server",
                    index, proc.pid, how,
                )  # fmt: skip
                return WORKER_NOT_STARTED
            wait = self._backoff.get(index, RESTART_INTERVAL_S)
            if time.monotonic() - self._started_at[index] < wait:
                continue  # not again so soon
            if not started:  # a replacement failed (e.g. the store is unreachable): back off
                self._backoff[index] = min(wait * 2, MAX_RESTART_INTERVAL_S)
            log.error("worker %d (pid %d) died (%s): starting it again", index, proc.pid, how)
            self._start(index)
        return 0

    def _stop_all(self) -> None:
        alive = [p for p in self._procs.values() if p.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        signals = self._signals
        # The workers drain for shutdown_grace_s; past it (and a margin) they are killed.
        kill_at = time.monotonic() + self._settings.shutdown_grace_s + STOP_MARGIN_S
        for proc in alive:
            while proc.poll() is None:
                if self._signals > max(signals, 1) or time.monotonic() > kill_at:
                    proc.kill()  # asked again, or past the grace: do not wait
                time.sleep(POLL_S)
        log.info("all %d workers stopped", len(self._procs))


def supervise(settings: Settings) -> int:
    """Serve with ``settings.workers`` processes until SIGTERM or SIGINT."""
    try:
        sock = bind(settings)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", settings.host, settings.port, exc)
        return WORKER_NOT_STARTED
    with contextlib.ExitStack() as stack:
        stack.callback(sock.close)
        kafka_sockets: list[socket.socket] = []
        if settings.kafka_listener is not None:
            from gateway.listener.server import bind_listener  # noqa: PLC0415

            try:
                kafka_sockets = bind_listener(settings, BACKLOG)
            except OSError as exc:
                log.error("cannot listen for Kafka on %s: %s", settings.kafka_listener, exc)
                return WORKER_NOT_STARTED
            for kafka_sock in kafka_sockets:
                stack.callback(kafka_sock.close)
        host, port = sock.getsockname()[:2]
        try:
            preload(settings)
        except ConfigurationError as exc:
            log.error("%s", exc)
            return WORKER_NOT_STARTED
        log.info("listening on %s:%d with %d workers", host, port, settings.workers)
        for kafka_sock in kafka_sockets:
            kafka_host, kafka_port = kafka_sock.getsockname()[:2]
            log.info("Kafka listener on %s:%d for %d workers", kafka_host, kafka_port,
                     settings.workers)  # fmt: skip
        return Supervisor(settings, sock, kafka_sockets).run()


__all__ = ["WORKER_NOT_STARTED", "Supervisor", "bind", "preload", "supervise"]
