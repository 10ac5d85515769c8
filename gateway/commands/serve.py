"""``tiered-gateway serve`` and ``tiered-gateway demo``: run the HTTP gateway.

``serve`` takes every setting of :class:`gateway.config.Settings` as a flag (generated from the
settings, so flags, environment variables and TOML keys never drift apart), plus ``--config
FILE``. ``demo`` writes the demo bucket under ``--root`` (default ``build/demo-bucket``,
recreated each run), prints example requests and serves it on 127.0.0.1.

A ``--root`` that exists is deleted only when it holds the marker file ``demo`` writes
(:data:`DEMO_MARKER`); any other non-empty folder is refused, never deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlparse

from gateway.config import (
    LIST_FIELDS,
    Settings,
    env_name,
    flag_name,
    load_settings,
    settings_for,
)
from gateway.errors import ConfigurationError

if TYPE_CHECKING:
    from gateway.api.app import ServiceFactory
    from gateway.demo import DemoBucket

log = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_NOT_STARTED: Final = 3
DEMO_ROOT: Final = Path("build/demo-bucket")
DEMO_HOST: Final = "127.0.0.1"
DEMO_PORT: Final = 8080
DEMO_MARKER: Final = ".tiered-gateway-demo"
_LIST_METAVARS: Final = {
    "key_pairs": "ID=PATH",
    "allowed_hosts": "NAME",
    "forwarded_allow_ips": "ADDRESS",
    "cors_origins": "ORIGIN",
    "super_users": "PRINCIPAL",
    "jwt_algorithms": "ALG",
}


def add_setting_flags(p: argparse.ArgumentParser) -> None:
    """One flag per setting; a flag not given stays out of the namespace (so the environment
    and the TOML file can supply it)."""
    for name, field in Settings.model_fields.items():
        help_text = f"{field.description} (env {env_name(name)})"
        common: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_text}
        if field.annotation in {bool, bool | None}:
            p.add_argument(flag_name(name), action=argparse.BooleanOptionalAction, **common)
        elif name in LIST_FIELDS:
            metavar = _LIST_METAVARS.get(name, "VALUE")
            p.add_argument(flag_name(name), action="append", metavar=metavar, **common)
        else:
            metavar = "URL" if name == "store" else name.split("_")[-1].upper()
            p.add_argument(flag_name(name), metavar=metavar, **common)


def add_parser(sub: Any) -> None:
    s = sub.add_parser(
        "serve",
        help="serve a bucket over HTTP",
        description="Serve a bucket's tiered Kafka history over HTTP. Every flag is also an "
        "environment variable and a key of the --config TOML file; precedence: flag > "
        "environment > file > default. See docs/configuration.md.",
    )
    s.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a TOML settings file (env TIERED_GATEWAY_CONFIG)",
    )
    add_setting_flags(s)
    d = sub.add_parser("demo", help="write a demo bucket and serve it on 127.0.0.1")
    d.add_argument(
        "--root",
        type=Path,
        default=DEMO_ROOT,
        help=f"folder of the demo bucket, recreated each run (default: {DEMO_ROOT})",
    )
    d.add_argument("--port", type=int, default=DEMO_PORT, help=f"default: {DEMO_PORT}")


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields}
    return load_settings(overrides, args.config)


def preflight(settings: Settings) -> None:
    """The configuration errors worth one clear ``error:`` line before the server starts
    (inside the lifespan they would come out as a traceback): unreadable key files, a file
    store that is not a folder."""
    from gateway.remote.keyring import KeyRing  # noqa: PLC0415

    KeyRing.from_specs(settings.key_pairs)
    url = urlparse(settings.store)
    if url.scheme == "file" and not Path(unquote(url.path)).is_dir():
        raise ConfigurationError(f"store {settings.store}: no such folder")


def serve(settings: Settings, service_factory: ServiceFactory | None = None) -> int:
    """Run the gateway until interrupted: in this process, or with ``settings.workers``
    worker processes (:mod:`gateway.commands.workers`) when more than one (and no
    ``service_factory``, which only this process could use). The Kafka listener
    (``kafka_listener``) runs beside the HTTP API in this process or in every worker, on
    sockets the supervisor binds then."""

    from gateway.api.app import create_app  # noqa: PLC0415
    from gateway.api.hosts import allowed_hosts  # noqa: PLC0415
    from gateway.api.logs import configure_logging  # noqa: PLC0415
    from gateway.commands.server import DrainingServer, uvicorn_config  # noqa: PLC0415
    from gateway.commands.workers import supervise  # noqa: PLC0415
    from gateway.security.startup import check_start  # noqa: PLC0415
    from gateway.service.memory import limit_arenas  # noqa: PLC0415

    check_start(settings)
    limit_arenas(settings.malloc_arenas)  # before any thread: the workers inherit it
    companion = None
    if settings.kafka_listener is not None:  # kafka-python's protocol only when it is on
        from gateway.listener.server import listening  # noqa: PLC0415
        from gateway.listener.startup import check_listener  # noqa: PLC0415

        check_listener(settings)
        companion = listening
    allowed_hosts(settings)  # a non-loopback address needs its names
    if service_factory is None:
        preflight(settings)
    configure_logging(settings.log_level, settings.log_format)
    if not settings.authentication and not settings.loopback:  # allow_anonymous said so
        log.warning(
            "listening on %s, not a loopback address, with anonymous access allowed: anyone "
            "who can reach it can read every topic the ACLs (if any) allow User:ANONYMOUS",
            settings.host,
        )
    if settings.workers > 1 and service_factory is None:
        started = supervise(settings) != EXIT_NOT_STARTED
    else:
        drain = threading.Event()
        app = create_app(
            settings,
            service_factory,
            drain=drain,
            companion=companion,
            own_process=service_factory is None,
        )
        server = DrainingServer(uvicorn_config(app, settings), drain)
        server.run()
        started = server.started
    if not started:
        print("error: the gateway did not start (the log above says why)", file=sys.stderr)
        return EXIT_NOT_STARTED
    return EXIT_OK


def clear_demo_root(root: Path) -> None:
    """Make ``root`` absent or empty: delete it only if an earlier demo wrote it."""
    if root.is_symlink():
        raise ConfigurationError(f"{root} is a symbolic link; give the demo a real folder")
    if not root.exists():
        return
    if not root.is_dir():
        raise ConfigurationError(f"{root} exists and is not a folder")
    if (root / DEMO_MARKER).is_file():
        shutil.rmtree(root)
    elif any(root.iterdir()):
        raise ConfigurationError(
            f"{root} exists and was not written by `tiered-gateway demo` (no {DEMO_MARKER} "
            "file): not deleting it; remove it yourself or pick another --root"
        )


def write_demo(root: Path) -> DemoBucket:
    """A fresh demo bucket under ``root``, marked as the demo's own."""
    from gateway.demo import write_demo_bucket_async  # noqa: PLC0415

    clear_demo_root(root)
    try:
        bucket = asyncio.run(write_demo_bucket_async(root))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)  # absent or empty before: all of it is ours
        raise
    (root / DEMO_MARKER).write_text(
        "Written by `tiered-gateway demo`, which deletes and rewrites this folder each run.\n",
        encoding="utf-8",
    )
    return bucket


def demo_text(bucket: DemoBucket, base_url: str) -> str:
    lines = [
        f"demo bucket: {bucket.root} (store {bucket.store_url}, key prefix {bucket.key_prefix!r})",
        "topics:",
    ]
    for topic in bucket.topics:
        lines.append(
            f"  {topic.name}: {len(topic.partitions)} partition(s), {topic.records} records"
            f" - {topic.description}"
        )
    lines += [
        f"serving on {base_url} (ready once {base_url}/readyz answers 200); try:",
        *(f"  {request}" for request in bucket.example_requests(base_url)),
        f"  curl -H 'Accept: application/x-ndjson' '{base_url}/v1/topics/orders/partitions/0/"
        "records?offset=0'",
        f"  curl '{base_url}/v1/topics'",
        f"or open the history console in a browser: {base_url}/ui/",
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        bucket = write_demo(args.root)
        settings = settings_for(
            store=bucket.store_url,
            key_prefix=bucket.key_prefix,
            key_pairs=[bucket.key_pair_spec],
            host=DEMO_HOST,
            port=args.port,
        )
        print(demo_text(bucket, f"http://{DEMO_HOST}:{settings.port}"), flush=True)
        return serve(settings)
    return serve(settings_from_args(args))
