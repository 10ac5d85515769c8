"""``compiled_records``: on (the default), JSON pages come from the compiled loops; off, the
same bytes from the Python path, and numba is never loaded (its ~110 MiB of resident memory
is what turning it off saves)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap

from gateway.demo import DemoBucket

SCRIPT = textwrap.dedent(
    """
    import sys
    from fastapi.testclient import TestClient
    from gateway.api.app import create_app
    from gateway.config import Settings

    settings = Settings(
        store=sys.argv[1], key_prefix=sys.argv[2], key_pairs=[sys.argv[3]],
        compiled_records=sys.argv[4] == "on",
    )
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        assert client.portal is not None
        client.portal.call(client.app_state["service"].wait_ready)
        bodies = [
            client.get(
                "/v1/topics/orders/partitions/0/records",
                params={"offset": 0, "max_bytes": 1 << 20, "value_format": fmt},
                headers={"accept": accept},
            ).content
            for fmt in ("base64", "hex")
            for accept in ("application/json", "application/x-ndjson")
        ]
    print(repr(("numba" in sys.modules, bodies)))
    """
)


def _serve(demo: DemoBucket, compiled: str) -> tuple[bool, list[bytes]]:
    args = [demo.store_url, demo.key_prefix, demo.key_pair_spec, compiled]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, check=True
    )
    loaded, bodies = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    return loaded, bodies


def test_off_serves_the_same_bytes_without_loading_numba(demo: DemoBucket) -> None:
    on_loaded, on = _serve(demo, "on")
    off_loaded, off = _serve(demo, "off")
    assert (on_loaded, off_loaded) == (True, False)
    assert on == off
    assert all(json.loads(b.splitlines()[0]) for b in on)  # real pages, not errors
    assert b'"records":[{"offset":0,' in on[0]
