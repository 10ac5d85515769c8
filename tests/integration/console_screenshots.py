"""The screenshots of docs/console.md: ``python -m tests.integration.console_screenshots``
serves the demo bucket and the hostile records of the console tests and saves each page
under ``docs/img/`` (Debian's Chromium, as the tests drive it)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from gateway.demo import write_demo_bucket
from tests.fixtures.browser import chromium
from tests.fixtures.schema_bucket import tier_records
from tests.integration.test_console import _hostile_headers, _hostile_records, _serve

OUT = Path(__file__).resolve().parents[2] / "docs" / "img"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        demo = write_demo_bucket(work / "demo")
        hostile = tier_records(work, "hostile", _hostile_records(), headers=_hostile_headers)
        args = [*demo.serve_args, "--rescan-interval-s", "0"]
        for gw in _serve(args, work / "demo.log"):
            for other in _serve(["--store", hostile, "--rescan-interval-s", "0"], work / "h.log"):
                _shoot(gw.url, other.url)


def _shoot(url: str, hostile: str) -> None:
    pages = {
        "console-topics": f"{url}/ui/",
        "console-topic": f"{url}/ui/topics/payments",
        "console-partition": f"{url}/ui/topics/orders/0?offset=120&count=12&tz=Europe/Paris",
        "console-record": f"{url}/ui/topics/payments/0/records/7",
        "console-search-plan": f"{url}/ui/topics/orders/0/search?value=customer-07",
        "console-search": f"{url}/ui/topics/orders/0/search?value=customer-07&run=1&budget=40000",
        "console-hostile": f"{hostile}/ui/topics/hostile/0?offset=0&count=12",
    }
    with chromium() as browser:
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        for name, address in pages.items():
            tab.goto(address)
            tab.wait_for_load_state("load")
            tab.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
            print(f"docs/img/{name}.png")


if __name__ == "__main__":
    main()
