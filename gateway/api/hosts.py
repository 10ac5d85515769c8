"""The ``Host`` allow-list: DNS rebinding cannot reach a gateway through a name it was not given.

A web page on ``evil.example`` whose DNS answer is switched to ``127.0.0.1`` makes the browser
send requests to a loopback gateway with ``Host: evil.example``; answering only the names the
gateway is known by stops that. Bound to a loopback address the list defaults to the loopback
names and addresses (:data:`LOOPBACK_HOSTS`); on any other address the operator names them
(``allowed_hosts``), ``*`` accepting any. A name may start with ``*.`` for its subdomains.

A ``Host`` that is an IP address (``10.1.2.3:8080``, ``[::1]``) is always accepted: rebinding
needs a name the attacker controls, and the kubelet's probes and Prometheus' scrapes name a pod
by its address. A request whose ``Host`` is missing, given twice (RFC 9112: 400) or a name not on
the list is answered 400 ``invalid_host`` before any route or authentication runs. The port in
``Host`` is ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.errors import error_response
from gateway.config import Settings
from gateway.errors import ConfigurationError, InvalidRequestError

LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1", "::1")


class InvalidHostError(InvalidRequestError):
    """The ``Host`` header names no host this gateway answers to."""

    code = "invalid_host"


def host_name(header: str) -> str:
    """The host of a ``Host`` header value, without its port and brackets, lower-cased."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8080
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if value.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def allowed_hosts(settings: Settings) -> list[str]:
    """The configured names, or the loopback ones on a loopback address; on any other address
    the names must be configured (a :class:`ConfigurationError` says how)."""
    if settings.allowed_hosts:
        return list(settings.allowed_hosts)
    if settings.loopback:
        return [*LOOPBACK_HOSTS, settings.host]
    raise ConfigurationError(
        f"listening on {settings.host}, not a loopback address: name the hosts clients reach "
        "the gateway by with --allowed-host NAME (repeatable; TIERED_GATEWAY_ALLOWED_HOSTS), "
        "or --allowed-host '*' to accept any Host header"
    )


class HostAllowList:
    """Which ``Host`` names are accepted."""

    __slots__ = ("_any", "_exact", "_suffixes")

    def __init__(self, names: Iterable[str]) -> None:
        cleaned = [n.strip().lower().rstrip(".") for n in names if n.strip()]
        self._any = "*" in cleaned
        self._exact = frozenset(n.strip("[]") for n in cleaned if not n.startswith("*."))
        self._suffixes = tuple(n[1:] for n in cleaned if n.startswith("*."))  # ".example.com"

    def allows(self, header: str | None) -> bool:
        if self._any:
            return True
        if not header:
            return False
        name = host_name(header)
        if name in self._exact or any(name.endswith(s) for s in self._suffixes):
            return True
        return _is_address(name)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostMiddleware:
    """Answers 400 ``invalid_host`` to a request whose ``Host`` is not allowed."""

    def __init__(self, app: ASGIApp, allowed: HostAllowList) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hosts = [v for k, v in scope["headers"] if k == b"host"]
            text = hosts[0].decode("latin-1") if len(hosts) == 1 else None
            if text is None or not self.allowed.allows(text):  # one Host, even with '*'
                shown = (
                    f"Host {text[:100]!r}"
                    if text is not None
                    else f"{len(hosts)} Host headers"
                    if hosts
                    else "no Host header"
                )
                error = InvalidHostError(
                    f"{shown} is not one this gateway answers to (the allowed_hosts setting)",
                    "Host",
                )
                await error_response(error)(scope, receive, send)
                return
        await self.app(scope, receive, send)
