"""The asyncio server of the Kafka listener, run by the app's lifespan (:func:`listening`).

One task per connection reads frames in order and answers each before reading the next
(Kafka's clients match answers by correlation id, in order). A frame that is not a request
this listener takes (:class:`~gateway.listener.framing.MalformedRequestError`: oversized,
undecodable, an API key or version not advertised) closes that connection only; so does a
connection idle for :data:`IDLE_TIMEOUT_S` or slower than :data:`FRAME_TIMEOUT_S` to send a
frame it announced. Beyond ``max_connections`` open connections, a new one is closed at once.

For this round the listener has no authentication: :func:`check_listener` refuses a
non-loopback address (as ``serve`` refuses anonymous HTTP off loopback), and more than one
worker process (each would be a separate listener on the same port).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator
from typing import Final

from gateway.config import Settings, parse_listener
from gateway.errors import ConfigurationError
from gateway.listener import framing
from gateway.listener.context import Context
from gateway.listener.handlers import HANDLERS, VERSIONS, unsupported_api_versions
from gateway.service.admission import ByteBudget
from gateway.service.protocol import Service

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S: Final = 600.0
"""A connection with no request for this long is closed (Kafka's connections.max.idle.ms)."""
FRAME_TIMEOUT_S: Final = 30.0
"""The time a client has to send the rest of a frame it began."""
_DRAIN_AT: Final = 256 * 1024


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listener(settings: Settings) -> None:
    """Raise :class:`ConfigurationError` for a Kafka listener this round cannot serve."""
    if settings.kafka_listener is None:
        return
    host, _ = parse_listener(settings.kafka_listener)
    if not is_loopback(host):
        raise ConfigurationError(
            f"kafka_listener {settings.kafka_listener}: the Kafka listener has no "
            "authentication yet (SASL is to come), so it listens on a loopback address only "
            "(e.g. 127.0.0.1:9092)"
        )
    if settings.workers > 1:
        raise ConfigurationError(
            "kafka_listener needs one process: serve with --workers 1 (TIERED_GATEWAY_WORKERS=1)"
        )


async def answer(ctx: Context, payload: bytes) -> framing.Reply | None:
    """The response frame to one request frame (without its size prefix); ``None`` when the
    request wants none. Raises :class:`~gateway.listener.framing.MalformedRequestError`."""
    key, version, correlation = framing.peek(payload)
    if key == framing.API_VERSIONS and version > VERSIONS[key][1]:
        return unsupported_api_versions(correlation)
    request = framing.decode(payload, VERSIONS)
    return await HANDLERS[request.api_key](ctx, request)


class KafkaListener:
    """The server; :meth:`start`, then :meth:`close`."""

    def __init__(
        self,
        ctx: Context,
        bind_host: str,
        max_connections: int,
        *,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.ctx = ctx
        self._idle_timeout_s = idle_timeout_s
        self._bind_host = bind_host
        self._max_connections = max_connections
        self._connections: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = ctx.port

    @property
    def connections(self) -> int:
        """The connections open now."""
        return len(self._connections)

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._connected, self._bind_host, self.ctx.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("Kafka listener on %s:%d", self._bind_host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if len(self._connections) >= self._max_connections:
            log.warning("Kafka listener: %d connections open; closing one from %s",
                        len(self._connections), peer)  # fmt: skip
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except framing.MalformedRequestError as exc:
            log.info("Kafka listener: closing the connection from %s: %s", peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass  # the client went away, or was too slow
        except asyncio.CancelledError:
            pass  # the listener is closing
        except Exception:
            log.exception("Kafka listener: the connection from %s failed", peer)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                prefix = await asyncio.wait_for(reader.readexactly(4), self._idle_timeout_s)
            except asyncio.IncompleteReadError:
                return  # closed between requests
            size = framing.frame_size(prefix)
            payload = await asyncio.wait_for(reader.readexactly(size), FRAME_TIMEOUT_S)
            reply = await answer(self.ctx, payload)
            if reply is None:
                continue
            try:
                pending = 0
                for buffer in reply.buffers:
                    writer.write(buffer)
                    pending += len(buffer)
                    if pending >= _DRAIN_AT:
                        await writer.drain()
                        pending = 0
                await writer.drain()
            finally:
                reply.release()


@contextlib.asynccontextmanager
async def listening(
    service: Service, settings: Settings, budget: ByteBudget
) -> AsyncIterator[KafkaListener | None]:
    """The Kafka listener of ``settings`` (none when ``kafka_listener`` is not set), serving
    ``service`` for the block."""
    if settings.kafka_listener is None:
        yield None
        return
    check_listener(settings)
    host, port = parse_listener(settings.kafka_listener)
    ctx = Context(service, settings, budget, host, port)
    listener = KafkaListener(ctx, host, settings.max_connections)
    await listener.start()
    if port == 0:  # advertise the port taken
        listener.ctx = Context(service, settings, budget, host, listener.port)
    try:
        yield listener
    finally:
        await listener.close()
        log.info("Kafka listener closed")
