"""``tiered-gateway schemas snapshot``: save a registry's schemas into a folder ``serve
--schema-dir`` reads (:mod:`gateway.schemas.snapshot`).

``--topic T`` reads every record of the topic's remote tier from the store (as ``serve`` would)
and saves every schema id its keys and values reference; ``--subject S`` every version of a
subject; ``--id N`` one id; ``--all-subjects`` everything the registry lists. Prints one JSON
summary line; exit 2 when an asked id or reference is not in the registry.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any, Final

from gateway.commands.common import add_key_pair_arg, add_state_dir_arg, add_store_args
from gateway.config import env_name

PAGE_BYTES: Final = 8 * 1024 * 1024
REGISTRY_FLAGS: Final = (
    ("schema_registry_url", "URL", "the registry to snapshot"),
    ("schema_registry_username", "USER", "its basic-auth user"),
    ("schema_registry_ca", "FILE", "CA bundle of its TLS certificate"),
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("schemas", help="schema registry tools: snapshot")
    verbs = p.add_subparsers(dest="verb", required=True)
    s = verbs.add_parser(
        "snapshot",
        help="save schemas into a folder serve --schema-dir reads without a registry",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name, metavar, text in REGISTRY_FLAGS:
        s.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            metavar=metavar,
            help=f"{text} (env {env_name(name)})",
        )
    s.add_argument("--out", type=Path, required=True, metavar="DIR", help="the snapshot folder")
    s.add_argument("--subject", action="append", default=[], help="every version of a subject")
    s.add_argument("--id", action="append", type=int, default=[], help="one schema id")
    s.add_argument("--all-subjects", action="store_true", help="every subject of the registry")
    s.add_argument(
        "--topic", action="append", default=[], help="every id the topic's records reference"
    )
    add_store_args(s, required=False)
    add_key_pair_arg(s)
    add_state_dir_arg(s, "where the catalog of remote segments is kept")


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from gateway.config import load_command_settings  # noqa: PLC0415
    from gateway.errors import ConfigurationError  # noqa: PLC0415
    from gateway.schemas.cache import registry_options  # noqa: PLC0415
    from gateway.schemas.registry import RegistryClient  # noqa: PLC0415
    from gateway.schemas.snapshot import snapshot  # noqa: PLC0415

    given = {n: getattr(args, n) for n, _, _ in REGISTRY_FLAGS if getattr(args, n) is not None}
    settings = load_command_settings(given, args.config)
    if settings.schema_registry_url is None:
        raise ConfigurationError(
            "schemas snapshot needs --schema-registry-url (or the environment variable "
            f"{env_name('schema_registry_url')})"
        )
    if not (args.subject or args.id or args.all_subjects or args.topic):
        raise ConfigurationError(
            "nothing to snapshot: give --topic, --subject, --id or --all-subjects"
        )
    ids = set(args.id)
    if args.topic:
        if args.store is None:
            raise ConfigurationError("--topic needs --store: its records are read from the bucket")
        ids |= await _topic_ids(args, args.topic)
    client = RegistryClient(registry_options(settings, settings.schema_registry_url))
    try:
        done = await snapshot(
            client,
            args.out,
            subjects=args.subject,
            ids=ids,
            all_subjects=args.all_subjects,
            topics=args.topic,
        )
    finally:
        await client.aclose()
    print(
        json.dumps(
            {
                "out": str(args.out),
                "ids": sorted(done.ids),
                "versions": done.versions,
                "missing": sorted(done.missing),
            }
        )
    )
    return 2 if done.missing else 0


async def _topic_ids(args: argparse.Namespace, topics: list[str]) -> set[int]:
    """Every schema id the keys and values of ``topics``' remote records reference."""
    from gateway.config import load_command_settings  # noqa: PLC0415
    from gateway.deadline import Deadline  # noqa: PLC0415
    from gateway.schemas.wire import schema_id  # noqa: PLC0415
    from gateway.service.open import open_service  # noqa: PLC0415
    from gateway.service.types import IsolationLevel  # noqa: PLC0415

    store = {
        "store": args.store,
        "key_prefix": args.key_prefix,
        "key_pairs": args.key_pair,
        "s3_endpoint_url": args.s3_endpoint_url,
        "s3_region": args.s3_region,
        "s3_path_style": args.s3_path_style,
        "state_dir": args.state_dir,
    }
    settings = load_command_settings({k: v for k, v in store.items() if v is not None}, args.config)
    found: set[int] = set()
    isolation = IsolationLevel.READ_UNCOMMITTED
    async with open_service(settings) as service:
        await service.wait_ready()
        for topic in topics:
            for info in await service.partitions(topic):
                offset = info.remote_log_start_offset
                while offset < info.remote_log_end_offset:
                    result = await service.fetch(
                        topic,
                        info.partition,
                        offset,
                        max_bytes=PAGE_BYTES,
                        isolation=isolation,
                        deadline=Deadline.after(300),
                    )
                    for record in await service.decode(result, offset, isolation):
                        for data in (record.record.key, record.record.value):
                            if data is not None and (i := schema_id(data)) is not None:
                                found.add(i)
                    if result.next_offset <= offset:
                        break
                    offset = result.next_offset
    return found
