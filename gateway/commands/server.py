"""uvicorn's server, told to drain: :class:`DrainingServer` sets an event when it is asked to
stop (SIGTERM, SIGINT), which the app reads (``create_app(..., drain=...)``) to end its NDJSON
streams after their current page with their closing line, while uvicorn waits for the requests
in flight for ``shutdown_grace_s`` (its ``timeout_graceful_shutdown``)."""

from __future__ import annotations

import threading
from types import FrameType

import uvicorn


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: threading.Event) -> None:
        super().__init__(config)
        self.drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.drain.set()
        super().handle_exit(sig, frame)
