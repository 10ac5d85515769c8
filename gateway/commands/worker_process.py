"""One worker process of ``serve --workers N`` (:mod:`gateway.commands.workers`): what the
supervisor hands it (:class:`WorkerSpec`), how it is forked (:func:`fork_worker`, whose
:class:`Forked` handle the supervisor polls), and what it runs: a whole gateway on the
inherited socket, with its budgets (:func:`~gateway.commands.worker_budgets.worker_settings`),
its ``X-Served-By`` header, and the Kafka listener on the inherited Kafka sockets. A worker
other than 0, or a replacement, takes connections only once its first bucket scan is done, and
at the server's start also only once worker 0's is (:attr:`WorkerSpec.gate_fd`): worker 0 takes
connections while it loads, to say in ``/readyz`` why the server is not ready, so a sibling that
answered ``/readyz`` 200 before it would send a client that trusted it to a worker answering
503 ``not_ready``. A worker whose supervisor is gone stops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gateway.cache import shared_runs
from gateway.cache.shared_runs import SharedRunArena
from gateway.commands.worker_budgets import worker_settings
from gateway.config import Settings
from gateway.service.protocol import Service
from indexcache.share import DiskShare, set_current

if TYPE_CHECKING:
    import uvicorn
    from prometheus_client.registry import Collector

    from gateway.api.app import Companion
    from gateway.security.access import Access
    from gateway.security.audit import AuditLog
    from gateway.service.admission import ByteBudget

log = logging.getLogger(__name__)

WORKER_NOT_STARTED: Final = 3
READY_POLL_S: Final = 0.05
ORPHAN_POLL_S: Final = 1.0

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Message, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker is handed when it is forked."""

    settings: Settings
    share: DiskShare
    fd: int
    started_fd: int
    """Written one byte once the worker serves (its service is open)."""
    supervisor: int
    """The supervisor's pid: once it is no longer the parent, the worker stops."""
    restarted: bool = False
    """A replacement: it takes connections only once its catalog is loaded (its siblings
    answer meanwhile)."""
    kafka_fds: tuple[int, ...] = ()
    """The Kafka listener's sockets (``--kafka-listener``), bound by the supervisor."""
    arena: SharedRunArena | None = None
    """The verified runs every worker shares (mapped by the supervisor)."""
    gate_fd: int | None = None
    """At the server's start, with several workers: worker 0 holds the write end of a pipe and
    closes it once its first bucket scan is done; the other workers hold the read end and take
    connections only once it reads end-of-file (worker 0 ready, or gone)."""


def served_by(app: Any, value: str) -> ASGIApp:
    """``app`` with an ``X-Served-By: value`` header on every HTTP response."""
    header = (b"x-served-by", value.encode("latin-1"))

    async def wrapped(scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await app(scope, receive, send_with_header)

    return wrapped


# --- the worker ------------------------------------------------------------------------------


def _run_worker(spec: WorkerSpec) -> int:

    from gateway.api.app import create_app  # noqa: PLC0415
    from gateway.api.logs import configure_logging  # noqa: PLC0415
    from gateway.service.open import open_service  # noqa: PLC0415

    share = spec.share
    set_current(share)
    shared_runs.set_current(spec.arena)
    settings = worker_settings(spec.settings, share.index)
    configure_logging(settings.log_level, settings.log_format)
    sock = socket.socket(fileno=spec.fd)
    server: uvicorn.Server | None = None

    async def exit_when_orphaned() -> None:  # the supervisor was killed: do not serve alone
        while os.getppid() == spec.supervisor:
            await asyncio.sleep(ORPHAN_POLL_S)
        log.error("the supervisor (pid %d) is gone: stopping", spec.supervisor)
        if server is not None:
            server.should_exit = True

    def exiting() -> bool:
        return server is not None and server.should_exit

    async def until_ready(service: Service, gate_fd: int | None = None) -> None:
        """Until the service's first scan is done (and the gate, if any, is open), or exit."""
        while not (service.readiness().ready and gate_open(gate_fd)) and not exiting():
            await asyncio.sleep(READY_POLL_S)

    async def open_gate_when_ready(service: Service, fd: int) -> None:  # worker 0
        try:
            await until_ready(service)
        finally:
            os.close(fd)

    @contextlib.asynccontextmanager
    async def opened(s: Settings) -> AsyncIterator[Service]:
        watch = asyncio.create_task(exit_when_orphaned(), name="orphan-watch")
        gate: asyncio.Task[None] | None = None
        try:
            async with open_service(s) as service:
                if share.index > 0 or spec.restarted:  # once loaded (worker 0 says why not)
                    await until_ready(service, spec.gate_fd)
                elif spec.gate_fd is not None:
                    gate = asyncio.create_task(open_gate_when_ready(service, spec.gate_fd))
                with contextlib.suppress(OSError):
                    os.write(spec.started_fd, b"s")
                    os.close(spec.started_fd)
                yield service
        finally:
            watch.cancel()
            if gate is not None:
                gate.cancel()

    from gateway.commands.server import DrainingServer, uvicorn_config  # noqa: PLC0415

    drain = threading.Event()
    app = create_app(
        settings,
        opened,
        drain=drain,
        companion=kafka_companion(spec.kafka_fds),
        own_process=True,
    )
    config = uvicorn_config(served_by(app, f"worker {share.index} pid {os.getpid()}"), settings)
    server = DrainingServer(config, drain)
    server.run(sockets=[sock])
    return 0 if server.started else WORKER_NOT_STARTED


def gate_open(fd: int | None) -> bool:
    """Whether the gate read end ``fd`` (non-blocking) is at end-of-file; no gate: open."""
    if fd is None:
        return True
    try:
        return os.read(fd, 1) == b""
    except BlockingIOError:
        return False


def kafka_companion(fds: tuple[int, ...]) -> Companion | None:
    """The Kafka listener serving the inherited sockets ``fds`` (none without them), as the
    app lifespan's companion: entered once the worker's service is open, so a worker other than
    0 takes Kafka connections only once its first bucket scan is done, as HTTP ones."""
    if not fds:
        return None
    from gateway.listener.server import listening  # noqa: PLC0415

    sockets = [socket.socket(fileno=fd) for fd in fds]

    def companion(  # noqa: PLR0917 - gateway.api.app.Companion's positional call
        service: Service,
        settings: Settings,
        budget: ByteBudget,
        access: Access,
        audit: AuditLog | None,
        collectors: list[Collector],
    ) -> contextlib.AbstractAsyncContextManager[object]:
        return listening(service, settings, budget, access, audit, collectors, sockets=sockets)

    return companion


class Forked:
    """A forked worker, with the part of :class:`subprocess.Popen`'s interface the supervisor
    uses (``pid``, :meth:`poll`, :meth:`send_signal`, :meth:`kill`)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_worker(spec: WorkerSpec, close: Sequence[int] = ()) -> Forked:
    """Fork a worker that runs ``spec`` and exits with its status (``close``: the supervisor's
    descriptors the worker must not hold)."""
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 1
    try:  # the worker: never returns into the supervisor's code
        for fd in close:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)  # uvicorn installs its own as it starts
        random.seed()  # not the sibling's sequence (retry jitter)
        code = _run_worker(spec)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("worker %d failed", spec.share.index)
    finally:
        with contextlib.suppress(Exception):
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
