"""``tiered-gateway demo-segment``: write a demo partition folder, as a broker would."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    g = sub.add_parser("demo-segment", help="write a demo segment folder, as a broker would")
    g.add_argument("--out", type=Path, required=True, help="folder to write the segment files to")


def run(args: argparse.Namespace) -> int:
    from gateway.kafka.demo import write_demo_segment  # noqa: PLC0415 - keep startup light

    files = write_demo_segment(args.out)
    print(f"wrote demo segment {files.log}", file=sys.stderr)
    return 0
