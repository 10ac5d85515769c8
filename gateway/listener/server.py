"""The asyncio server of the Kafka listener, run by the app's lifespan (:func:`listening`).

One task per connection reads frames in order and answers each before reading the next
(Kafka's clients match answers by correlation id, in order). A frame that is not a request
this listener takes (:class:`~gateway.listener.framing.MalformedRequestError`: oversized,
undecodable, an API key or version not advertised) closes that connection only; so does a
connection idle for :data:`IDLE_TIMEOUT_S` or slower than :data:`FRAME_TIMEOUT_S` to send a
frame it announced; so does a client that does not take an answer within
``request_timeout_ms`` (its share of ``inflight_bytes`` is given back then), and an acks=0
Produce (as Kafka: the only way to tell such a producer its request failed). Beyond
``max_connections`` open connections, a new one is closed at once.

Who a connection is comes from :mod:`gateway.listener.sasl` (SASL/PLAIN with the gateway's API
keys, SASL/OAUTHBEARER with its JWTs, a TLS client certificate), over TLS when ``tls_certfile``
is set (the HTTP API's certificate, client CA and principal mapping). Before a connection
authenticated, a request other than ApiVersions and SASL closes it; so does a request past
the end of its SASL session (``kafka_reauth_ms``, a JWT's ``exp``) unless it re-authenticates
on the connection (KIP-368, in :mod:`~gateway.listener.sasl`). Each answer is counted in
:class:`~gateway.listener.metrics.ListenerMetrics` and each data request (Metadata,
ListOffsets, Fetch) gets an audit line when ``audit_log`` is set.

What starting it takes (the check ``serve`` runs, the TLS context, the sockets the supervisor
of ``serve --workers N`` binds for its workers) is in :mod:`gateway.listener.startup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from typing import Final

from prometheus_client.registry import Collector

from gateway.config import Settings, parse_listener
from gateway.errors import RateLimitedError
from gateway.listener import codes, framing, sasl
from gateway.listener.context import Context
from gateway.listener.dispatch import answer
from gateway.listener.metrics import ListenerMetrics
from gateway.listener.startup import bind_listener, check_listener, server_tls
from gateway.security.access import Access
from gateway.security.audit import AuditEvent, AuditLog
from gateway.service.admission import ByteBudget
from gateway.service.protocol import Service

__all__ = [  # bind_listener and check_listener: where gateway.commands imports them from
    "KafkaListener",
    "bind_listener",
    "check_listener",
    "listening",
    "within_rate",
]

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S: Final = 600.0
"""A connection with no request for this long is closed (Kafka's connections.max.idle.ms)."""
FRAME_TIMEOUT_S: Final = 30.0
"""The time a client has to send the rest of a frame it began."""
TLS_HANDSHAKE_TIMEOUT_S: Final = 30.0
CLOSE_TIMEOUT_S: Final = 5.0
"""The time a connection closed while the listener serves has to flush its last bytes and,
over TLS, for the client to answer the close_notify; then it is dropped. Once the listener is
closing (SIGTERM), connections are dropped at once: a TLS client that never answers would
otherwise hold the worker's shutdown for asyncio's 30 s TLS shutdown timeout."""
_DRAIN_AT: Final = 256 * 1024
_AUDITED: Final = frozenset({framing.METADATA, framing.LIST_OFFSETS, framing.FETCH})
_SASL_KEYS: Final = frozenset({-1, framing.SASL_HANDSHAKE, framing.SASL_AUTHENTICATE})
_UNCOUNTED: Final = _SASL_KEYS | {framing.API_VERSIONS}  # not counted against the rate
MIN_THROTTLE_S: Final = 0.001


async def within_rate(access: Access, principal: str) -> float:
    """Wait until ``principal`` may send one more request (:meth:`Access.limit`, which takes
    it); the seconds waited (0 within its rate, or with no limit configured)."""
    waited = 0.0
    while True:
        try:
            access.limit(principal)
        except RateLimitedError as exc:
            pause = max(exc.retry_after_s, MIN_THROTTLE_S)
            await asyncio.sleep(pause)
            waited += pause
        else:
            return waited


class KafkaListener:
    """The server; :meth:`start`, then :meth:`close`."""

    def __init__(
        self,
        ctx: Context,
        bind_host: str,
        max_connections: int,
        *,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        tls: ssl.SSLContext | None = None,
        metrics: ListenerMetrics | None = None,
        audit: AuditLog | None = None,
        bind_port: int | None = None,
        sockets: Sequence[socket.socket] = (),
    ) -> None:
        self.ctx = ctx
        self.metrics = metrics if metrics is not None else ListenerMetrics()
        self._audit = audit
        self._tls = tls
        self._ids = itertools.count(1)
        self._idle_timeout_s = idle_timeout_s
        self._bind_host = bind_host
        self._max_connections = max_connections
        self._connections: set[asyncio.Task[None]] = set()
        self._sockets = tuple(sockets)
        self._servers: list[asyncio.Server] = []
        self._closing = False
        self.port = ctx.port if bind_port is None else bind_port  # the one bound, once started

    @property
    def connections(self) -> int:
        """The connections open now."""
        return len(self._connections)

    async def start(self) -> None:
        """Accept connections: on ``sockets`` when given (already bound and listening, e.g.
        inherited from the supervisor of ``serve --workers N``; ``bind_host`` and
        ``bind_port`` then only name them), else on a socket bound to ``bind_host`` and
        ``bind_port``. :attr:`port` is then the port bound."""
        tls, handshake = self._tls, TLS_HANDSHAKE_TIMEOUT_S if self._tls is not None else None
        if self._sockets:
            for sock in self._sockets:
                server = await asyncio.start_server(
                    self._connected, sock=sock, ssl=tls, ssl_handshake_timeout=handshake
                )
                self._servers.append(server)
            shared = f" (pid {os.getpid()}, on sockets shared by the workers)"
        else:
            server = await asyncio.start_server(
                self._connected, self._bind_host, self.port, reuse_address=True,
                ssl=tls, ssl_handshake_timeout=handshake,
            )  # fmt: skip
            self._servers.append(server)
            shared = ""
        self.port = self._servers[0].sockets[0].getsockname()[1]
        log.info("Kafka listener on %s:%d%s", self._bind_host, self.port, shared)

    async def close(self) -> None:
        self._closing = True
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if len(self._connections) >= self._max_connections:
            log.warning("Kafka listener: %d connections open; closing one from %s",
                        len(self._connections), peer)  # fmt: skip
            self.metrics.refused.inc()
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.metrics.accepted.inc()
        self.metrics.connections.inc()
        try:
            host = peer[0] if isinstance(peer, tuple) else ""
            session = await sasl.open_session(
                self.ctx.access, host, writer.get_extra_info("peercert")
            )
            await self._serve(reader, writer, session, next(self._ids))
        except sasl.SaslFailedError as exc:
            log.info("Kafka listener: closing the connection from %s: %s", peer, exc)
            self.metrics.auth_failures.labels(exc.mechanism).inc()
        except sasl.SessionExpiredError as exc:
            log.info("Kafka listener: closing the connection from %s: %s", peer, exc)
            self.metrics.session_expiries.labels(exc.mechanism).inc()
        except framing.MalformedRequestError as exc:
            log.info("Kafka listener: closing the connection from %s: %s", peer, exc)
            self.metrics.malformed.inc()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass  # the client went away, or was too slow
        except asyncio.CancelledError:
            pass  # the listener is closing
        except Exception:
            log.exception("Kafka listener: the connection from %s failed", peer)
        finally:
            self.metrics.connections.dec()
            self._connections.discard(task)
            writer.close()
            if not self._closing:  # else cancelled by close(): no wait
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT_S)
            writer.transport.abort()  # a no-op once closed; else what is left is dropped

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: sasl.Session,
        connection: int,
    ) -> None:
        while True:
            try:
                prefix = await asyncio.wait_for(reader.readexactly(4), self._idle_timeout_s)
            except asyncio.IncompleteReadError:
                return  # closed between requests
            size = framing.frame_size(prefix)
            payload = await asyncio.wait_for(reader.readexactly(size), FRAME_TIMEOUT_S)
            raw, renewing = session.raw_token_next, session.reauthenticating
            if not raw and session.principal is not None:
                await self._within_rate(session.principal, framing.peek(payload)[0])
            started = time.monotonic()
            mechanism = session.mechanism
            reply = await answer(self.ctx, payload, session)
            if reply is not None:
                await self._send(writer, reply)
            key, version, correlation = (-1, 0, 0) if raw else framing.peek(payload)
            self._observe(session=session, mechanism=mechanism, renewing=renewing, key=key,
                          version=version, reply=reply, started=started)  # fmt: skip
            if key in _AUDITED and self._audit is not None:
                request_id = f"kafka-{connection}-{correlation}"
                self._audit_line(session=session, request_id=request_id, key=key,
                                 version=version, reply=reply)  # fmt: skip
            if reply is not None and reply.close:
                return

    async def _within_rate(self, principal: str, key: int) -> None:
        """Hold this connection until ``principal`` may send one more request under
        ``rate_limit_per_s`` (the HTTP API's limiter: one budget per principal for both).
        As a broker throttles a client over its quota by muting its connection (KIP-219), the
        request waits and the connection's next one is not read meanwhile; the answer then
        says ``throttle_time_ms`` 0, the throttle being served already (a client told more
        would wait again). ApiVersions and SASL are not counted."""
        if key in _UNCOUNTED:
            return
        waited = await within_rate(self.ctx.access, principal)
        if waited > 0:
            self.metrics.throttled.labels(framing.API_NAMES.get(key, str(key))).inc()
            self.metrics.throttle_seconds.inc(waited)

    def _observe(
        self,
        *,
        session: sasl.Session,
        mechanism: str | None,
        renewing: bool,
        key: int,
        version: int,
        reply: framing.Reply | None,
        started: float,
    ) -> None:
        m = self.metrics
        if mechanism is not None and session.mechanism is None and session.authenticated:
            done = m.reauthentications if renewing else m.authentications
            done.labels(mechanism).inc()  # this frame completed the exchange
        elif reply is not None and reply.close and key in _SASL_KEYS:
            m.auth_failures.labels(session.mechanism or mechanism or "none").inc()
        if key < 0:
            return  # a bare v0 SASL token
        api = framing.API_NAMES.get(key, str(key))
        error = codes.name_of(reply.error) if reply is not None else "NONE"
        m.requests.labels(api, str(version), error).inc()
        m.latency.labels(api).observe(time.monotonic() - started)
        if reply is not None:
            m.response_bytes.labels(api).inc(reply.size)

    def _audit_line(
        self,
        *,
        session: sasl.Session,
        request_id: str,
        key: int,
        version: int,
        reply: framing.Reply | None,
    ) -> None:
        assert self._audit is not None
        error = reply.error if reply is not None else codes.NONE
        self._audit.write(
            AuditEvent(
                principal=session.principal,
                source=session.host,
                method="KAFKA",
                path=f"{framing.API_NAMES[key]} v{version}",
                status=error,
                bytes=reply.size if reply is not None else 0,
                request_id=request_id,
                topic=reply.topic if reply is not None else None,
                error_code=codes.name_of(error) if error else None,
            )
        )

    async def _send(self, writer: asyncio.StreamWriter, reply: framing.Reply) -> None:
        """Write ``reply``, each wait for the client to take the bytes bounded by
        ``request_timeout_ms`` (:class:`TimeoutError` then: the connection closes), and give
        back its share of ``inflight_bytes`` in any case: a client that stops reading cannot
        hold it."""
        timeout = self.ctx.settings.request_timeout_ms / 1000
        try:
            pending = 0
            for buffer in reply.buffers:
                writer.write(buffer)
                pending += len(buffer)
                if pending >= _DRAIN_AT:
                    await asyncio.wait_for(writer.drain(), timeout)
                    pending = 0
            await asyncio.wait_for(writer.drain(), timeout)
        finally:
            reply.release()


@contextlib.asynccontextmanager
async def listening(  # noqa: PLR0917 - gateway.api.app.Companion's positional call
    service: Service,
    settings: Settings,
    budget: ByteBudget,
    access: Access,
    audit: AuditLog | None,
    collectors: list[Collector],
    *,
    sockets: Sequence[socket.socket] = (),
) -> AsyncIterator[KafkaListener | None]:
    """The Kafka listener of ``settings`` (none when ``kafka_listener`` is not set), serving
    ``service`` for the block with the HTTP API's access rules and audit log; its metrics join
    ``collectors`` (what ``/metrics`` shows) while it runs. ``sockets``: those of
    :func:`bind_listener`, already bound (a worker of ``serve --workers N``), which it serves
    instead of binding its own; the port advertised (with port 0) is theirs."""
    if settings.kafka_listener is None:
        yield None
        return
    check_listener(settings)
    host, port = parse_listener(settings.kafka_listener)
    advertised = settings.kafka_advertised_listener
    shown_host, shown_port = (host, port) if advertised is None else parse_listener(advertised)
    ctx = Context(service, settings, budget, shown_host, shown_port, access)
    listener = KafkaListener(ctx, host, settings.max_connections, tls=server_tls(settings),
                             audit=audit, bind_port=port, sockets=sockets)  # fmt: skip
    await listener.start()
    if shown_port == 0:  # advertise the port taken
        listener.ctx = dataclasses.replace(listener.ctx, port=listener.port)
    collectors.append(listener.metrics)
    try:
        yield listener
    finally:
        collectors.remove(listener.metrics)
        await listener.close()
        log.info("Kafka listener closed")
