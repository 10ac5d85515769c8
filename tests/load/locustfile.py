"""Locust scenarios against a running gateway (``tests/load/run.py`` starts one; any will do).

    locust -f tests/load/locustfile.py --host http://127.0.0.1:8080 --headless -u 200 -r 50 \
        -t 60s [WarmPages ColdReads Streams Offsets | Mix]

Scenarios (one user class each; ``Mix`` weighs the same tasks in one user):

* ``WarmPages``: a reader walks a hot region of a partition page by page (JSON, following
  ``next_offset``), starting over at its start: after the first pass, served from the caches.
* ``ColdReads``: one small raw page at a random offset of a random partition: mostly cache misses
  when the bucket is larger than the chunk cache.
* ``Streams``: an NDJSON stream of ``LOAD_STREAM_BYTES`` (default 8 MiB) of batches from a random
  offset, read to its end line and checked (an error line is a failure).
* ``Offsets``: ListOffsets by a random timestamp of the partition.

Pacing: every user waits ``constant_throughput(LOAD_RATE)`` (tasks per second per user), so the
intended arrival rate is users x rate. Locust users are still closed loop (a user does not send
while it waits for an answer), so ``run.py`` also reports latencies corrected for coordinated
omission from the samples this file writes to ``LOAD_SAMPLES`` (name, start, ms, bytes, outcome).

A 503 whose body says ``overloaded`` (the deliberate admission answer) is reported as the
failure ``overloaded``, apart from every other failure.

Only locust and the standard library are imported here: ``import locust`` fails in a process
that imported httpx or botocore first.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
import urllib.request
from typing import Any, Final

from locust import FastHttpUser, constant_throughput, events, task
from locust.contrib.fasthttp import ResponseContextManager

PLAN: Final = os.environ.get("LOAD_PLAN")
SAMPLES: Final = os.environ.get("LOAD_SAMPLES")
RATE: Final = float(os.environ.get("LOAD_RATE", "0.5"))
STREAM_BYTES: Final = int(os.environ.get("LOAD_STREAM_BYTES", str(8 << 20)))
PAGE_BYTES: Final = int(os.environ.get("LOAD_PAGE_BYTES", str(256 << 10)))
COLD_BYTES: Final = int(os.environ.get("LOAD_COLD_BYTES", str(64 << 10)))
HOT_RECORDS: Final = int(os.environ.get("LOAD_HOT_RECORDS", "20000"))  # ~4 MiB
NDJSON: Final = {"Accept": "application/x-ndjson"}
RAW: Final = {"Accept": "application/octet-stream"}

_partitions: list[dict[str, Any]] = []
_samples: list[tuple[str, float, float, int, str]] = []
_started = [0]  # requests begun; those not in _samples were cut off at the stop


def _get_json(host: str, path: str) -> Any:
    with urllib.request.urlopen(host.rstrip("/") + path, timeout=30) as answer:
        return json.load(answer)


def _discover(host: str) -> list[dict[str, Any]]:
    """The partitions of ``LOAD_TOPIC``, from the server (when no plan file is given)."""
    topic = os.environ.get("LOAD_TOPIC", "bench.http")
    out = []
    for info in _get_json(host, f"/v1/topics/{topic}/partitions")["partitions"]:
        p = info["partition"]
        segments = _get_json(host, f"/v1/topics/{topic}/partitions/{p}/segments")["segments"]
        stamps = [s["max_timestamp_ms"] for s in segments]
        out.append(
            {
                "topic": topic,
                "partition": p,
                "end_offset": info["remote_log_end_offset"],
                "first_timestamp": min(stamps),
                "last_timestamp": max(stamps),
            }
        )
    return out


def _load_plan(environment: Any, **_: Any) -> None:
    if PLAN:
        with open(PLAN) as f:
            plan = json.load(f)
        _partitions[:] = [{"topic": plan["topic"], **p} for p in plan["partitions"]]
    else:
        _partitions[:] = _discover(environment.host)


def _record(
    name: str,
    response_time: float,
    response_length: int,
    exception: BaseException | None,
    start_time: float,
    **_: Any,
) -> None:
    outcome = "ok" if exception is None else str(exception)
    _samples.append((name, start_time, response_time, response_length, outcome))


def _write_samples(**_: Any) -> None:
    if SAMPLES:
        with open(SAMPLES, "w") as f:
            json.dump({"rate_per_user": RATE, "started": _started[0], "samples": _samples}, f)


for _hook, _listener in (
    (events.test_start, _load_plan),
    (events.request, _record),
    (events.test_stop, _write_samples),
):
    _hook.add_listener(_listener)  # type: ignore[no-untyped-call]


def _base(p: dict[str, Any]) -> str:
    return f"/v1/topics/{p['topic']}/partitions/{p['partition']}"


def _judge(response: ResponseContextManager) -> bool:
    """Mark a non-200 as a failure (``overloaded`` apart); True when the answer is a 200."""
    if response.status_code == 200:
        return True
    code = ""
    with contextlib.suppress(ValueError):
        code = json.loads(response.content or b"{}").get("error_code", "")
    if response.status_code == 503 and code == "overloaded":
        _fail(response, "overloaded")
    else:
        _fail(response, f"HTTP {response.status_code} {code}".strip())
    return False


def _fail(response: ResponseContextManager, reason: str) -> None:
    response.failure(reason)  # type: ignore[no-untyped-call]


class _Reader(FastHttpUser):
    """The tasks; subclasses pick them."""

    abstract = True
    wait_time = constant_throughput(RATE)
    network_timeout = 120.0
    connection_timeout = 30.0

    def on_start(self) -> None:
        self.rng = random.Random()
        self.hot = self.rng.choice(_partitions)
        self.hot_start = self.rng.randrange(max(1, self.hot["end_offset"] - HOT_RECORDS))
        self.position = self.hot_start

    def warm_page(self) -> None:
        _started[0] += 1
        p = self.hot
        url = f"{_base(p)}/records?offset={self.position}&max_bytes={PAGE_BYTES}"
        with self.client.get(url, name="warm page", catch_response=True) as response:
            if not _judge(response):
                return
            page = response.json()
            self.position = page["next_offset"]
        if page["end_of_remote_log"] or self.position >= self.hot_start + HOT_RECORDS:
            self.position = self.hot_start

    def cold_read(self) -> None:
        _started[0] += 1
        p = self.rng.choice(_partitions)
        offset = self.rng.randrange(p["end_offset"])
        url = f"{_base(p)}/records?offset={offset}&max_bytes={COLD_BYTES}"
        with self.client.get(url, name="cold raw", headers=RAW, catch_response=True) as response:
            if _judge(response) and not response.content:
                _fail(response, "empty raw page")

    def stream(self) -> None:
        _started[0] += 1
        p = self.rng.choice(_partitions)
        offset = self.rng.randrange(p["end_offset"])
        url = f"{_base(p)}/records?offset={offset}&max_bytes={STREAM_BYTES}"
        started = time.perf_counter()
        with self.client.get(
            url, name="ndjson stream", headers=NDJSON, stream=True, catch_response=True
        ) as response:
            if response.status_code != 200:
                response.content  # noqa: B018 - the error body, for _judge
                _judge(response)
                return
            size, tail = 0, b""
            for chunk in response.iter_content(1 << 16, decode_content=False):
                size += len(chunk)
                tail = (tail + chunk)[-4096:]
            response.request_meta["response_time"] = (time.perf_counter() - started) * 1000
            response.request_meta["response_length"] = size
            last = json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1] or b"{}")
            if "error_code" in last or "next_offset" not in last:
                _fail(response, f"stream ended with {last.get('error_code', 'no end line')}")

    def list_offsets(self) -> None:
        _started[0] += 1
        p = self.rng.choice(_partitions)
        stamp = self.rng.randint(p["first_timestamp"], p["last_timestamp"])
        url = f"{_base(p)}/offsets?timestamp={stamp}"
        with self.client.get(url, name="list offsets", catch_response=True) as response:
            if _judge(response) and response.json()["offset"] < 0:
                _fail(response, "no offset for a timestamp inside the log")


class WarmPages(_Reader):
    @task
    def go(self) -> None:
        self.warm_page()


class ColdReads(_Reader):
    @task
    def go(self) -> None:
        self.cold_read()


class Streams(_Reader):
    @task
    def go(self) -> None:
        self.stream()


class Offsets(_Reader):
    @task
    def go(self) -> None:
        self.list_offsets()


class Mix(_Reader):
    """Readers as a gateway sees them: mostly page walks, some streams, cold reads, lookups."""

    @task(4)
    def warm(self) -> None:
        self.warm_page()

    @task(2)
    def cold(self) -> None:
        self.cold_read()

    @task(2)
    def streams(self) -> None:
        self.stream()

    @task(2)
    def offsets(self) -> None:
        self.list_offsets()
