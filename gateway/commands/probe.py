"""``tiered-gateway probe``: is the gateway of these settings serving? (A container HEALTHCHECK.)

Reads the settings as ``serve`` does (flags, ``TIERED_GATEWAY_*``, ``--config``) and GETs
``/healthz`` on the loopback address of the configured port, over TLS when the listener has a
certificate (not verified: the probe sends nothing secret and only asks whether the process
answers). Exit 0 on 200, 1 otherwise, with one line saying why. A listener that requires client
certificates (mTLS) refuses the probe's handshake: probe it on the TCP port instead.
"""

from __future__ import annotations

import argparse
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

from gateway.commands.serve import add_setting_flags, settings_from_args
from gateway.config import Settings

TIMEOUT_S: Final = 3.0
EXIT_UNHEALTHY: Final = 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="exit 0 if the gateway of these settings answers /healthz (a HEALTHCHECK)",
        description="GET /healthz on the loopback address of the configured port (https when "
        "tls_certfile is set); exit 0 on 200, 1 otherwise. Takes serve's settings.",
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="a TOML settings file")
    add_setting_flags(p)


def url_of(settings: Settings) -> str:
    """The ``/healthz`` URL of ``settings``' listener, on loopback."""
    host = settings.host
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    scheme = "https" if settings.tls_certfile is not None else "http"
    return f"{scheme}://{host}:{settings.port}/healthz"


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    url = url_of(settings)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a liveness check, no credentials sent
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=context) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {url}: {exc}")
        return EXIT_UNHEALTHY
    if status != 200:
        print(f"unhealthy: {url} answered {status}")
        return EXIT_UNHEALTHY
    print(f"ok: {url}")
    return 0
