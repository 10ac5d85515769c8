"""What starting the Kafka listener takes, beside the server (:mod:`gateway.listener.server`):

* :func:`check_listener` refuses what ``serve`` refuses for HTTP: a non-loopback address with
  no authentication configured (unless ``allow_anonymous``); and a wildcard address with no
  advertised address;
* :func:`server_tls`: the listener's TLS context, from the HTTP API's TLS settings;
* :func:`bind_listener`: with ``serve --workers N`` (:mod:`gateway.commands.workers`) the
  listener follows the HTTP model: the supervisor binds its sockets, every worker inherits
  them and serves them (``listening(..., sockets=...)``), and the kernel hands each
  connection to one of the workers blocked in ``accept``. The port advertised is the one
  bound (the same in every worker, port 0 included); ``max_connections`` is then each
  worker's share (:func:`~gateway.commands.worker_budgets.per_worker`), as for its HTTP connections.
"""

from __future__ import annotations

import socket
import ssl

from gateway.config import Settings, is_loopback, parse_listener
from gateway.errors import ConfigurationError


def check_listener(settings: Settings) -> None:
    """Raise :class:`ConfigurationError` for a Kafka listener ``serve`` does not start: off
    loopback with no authentication (the rule of :func:`gateway.security.startup.check_start`
    for HTTP), or on a wildcard address with no advertised address."""
    if settings.kafka_listener is None:
        return
    host, _ = parse_listener(settings.kafka_listener)
    if not is_loopback(host) and not settings.authentication and not settings.allow_anonymous:
        raise ConfigurationError(
            f"kafka_listener {settings.kafka_listener}: not a loopback address, with no "
            "authentication: anyone who reaches the port could read every topic. Configure "
            "authentication (api_keys_file for SASL/PLAIN, jwt_issuer for SASL/OAUTHBEARER, "
            "tls_client_ca, with an acl_file), listen on a loopback address only (e.g. "
            "127.0.0.1:9092), or say that anonymous reads are meant with --allow-anonymous"
        )
    wildcard = host in ("0.0.0.0", "::", "")
    if wildcard and settings.kafka_advertised_listener is None:
        raise ConfigurationError(
            f"kafka_listener {settings.kafka_listener} binds every address: give the HOST:PORT "
            "clients connect to with --kafka-advertised-listener (Metadata answers name it, "
            "and a client told to connect to 0.0.0.0 cannot)"
        )


def server_tls(settings: Settings) -> ssl.SSLContext | None:
    """The listener's TLS context from the HTTP API's settings (none without
    ``tls_certfile``): its certificate and key; with ``tls_client_ca``, client certificates
    verified against it (required unless ``tls_client_cert_required`` is off)."""
    if settings.tls_certfile is None or settings.tls_keyfile is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_certfile, settings.tls_keyfile)
        if settings.tls_client_ca is not None:
            context.load_verify_locations(cafile=str(settings.tls_client_ca))
            required = settings.tls_client_cert_required
            context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"the Kafka listener's TLS files: {exc}") from exc
    return context


def bind_listener(settings: Settings, backlog: int) -> list[socket.socket]:
    """The listening sockets of ``kafka_listener``, bound by the supervisor of ``serve
    --workers N`` for its workers to inherit (inheritable, listening with ``backlog``): one per
    address its host resolves to, as :func:`asyncio.start_server` binds them (IPv6 ones
    IPv6-only), all on the same port (with port 0: the one the first took). Raises
    :class:`OSError` (:class:`socket.gaierror` included) when the host does not resolve or an
    address cannot be bound."""
    if settings.kafka_listener is None:
        raise ConfigurationError("bind_listener: no kafka_listener configured")
    host, port = parse_listener(settings.kafka_listener)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    addresses = list(dict.fromkeys((family, address) for family, _, _, _, address in infos))
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            taken = sockets[0].getsockname()[1] if len(sockets) > 1 else port
            sock.bind((address[0], taken, *address[2:]))
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
