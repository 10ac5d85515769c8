"""The ``tiered-gateway`` console script: the dispatcher over :mod:`gateway.commands`.

Each command module has ``add_parser(sub)`` and ``run(args) -> int``. Here, once for all of
them: the shared settings (``--store``, ``--key-prefix``, ...) are filled from the environment
and the ``--config`` file as ``serve`` reads its own
(:func:`~gateway.commands.common.apply_settings`); a domain or OS error is one ``error:`` line
and exit code 2; and a reader that goes away (``... | head``) ends the command quietly with
exit code 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final

from gateway import __version__
from gateway.commands import (
    api_key,
    catalog,
    demo_segment,
    dump,
    export,
    probe,
    schemas,
    scrub,
    serve,
    tier,
)
from gateway.commands.common import apply_settings
from gateway.errors import GatewayError

EXIT_OK: Final = 0
EXIT_BAD_INPUT: Final = 2

_COMMANDS: Final = (
    dump, tier, catalog, export, scrub, serve, demo_segment, api_key, probe, schemas,
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tiered-gateway",
        description="Serve Kafka tiered-storage history straight from the bucket.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in _COMMANDS:
        module.add_parser(sub)
    return p


def _runner(command: str) -> Callable[[argparse.Namespace], int]:
    runners: dict[str, Callable[[argparse.Namespace], int]] = {
        "dump": dump.run,
        "tier": tier.run,
        "catalog": catalog.run,
        "export": export.run,
        "scrub": scrub.run,
        "serve": serve.run,
        "demo": serve.run,
        "demo-segment": demo_segment.run,
        "api-key": api_key.run,
        "probe": probe.run,
        "schemas": schemas.run,
    }
    return runners[command]  # argparse rejects unknown commands


def _reader_gone() -> int:
    """stdout's reader closed the pipe: the output is not wanted, which is not an error. Point
    stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        apply_settings(args)
        code = _runner(args.command)(args)
        sys.stdout.flush()  # inside the try: a closed pipe shows up here as often as in print
    except BrokenPipeError:
        return _reader_gone()
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
