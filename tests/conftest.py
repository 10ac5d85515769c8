"""Real local servers shared by the integration and Spark tests: a moto S3 server process on
127.0.0.1. The demo bucket fixtures (``tests.fixtures.demo``), the ``spark`` and
``integration`` markers (set here by path and use), and the hypothesis profile of the suite.

Hypothesis profile: ``ci`` (the default) has no per-example deadline and no ``too_slow``
health check, so a loaded 2-core machine slows the suite down but never fails it; select
another with ``HYPOTHESIS_PROFILE`` (``default`` is hypothesis' own, with its 200 ms deadline).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import boto3
import pytest
from hypothesis import HealthCheck, settings

from tests.fixtures.extras import require_spark
from tests.fixtures.ports import LOCALHOST, listening_port
from tests.fixtures.spark_home import use_spark_home_without_zips

pytest_plugins = ["tests.fixtures.demo"]

# Every JVM the tests start (Kafka brokers, Spark, Kafka's tools, the Java client) compiles with
# C1 only and collects with the serial collector: they run seconds to minutes on small heaps, where
# C2's compiling and G1's threads cost more CPU than they save (measured on a 2-core machine:
# a Spark test module 100 -> 72 CPU-s, the live broker's real-Kafka checks 112 -> 79 CPU-s).
# Each JVM says "Picked up JAVA_TOOL_OPTIONS" on its stderr; a test reading a JVM's stderr line by
# line leaves that line out, or takes the variable out of that process's environment.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
use_spark_home_without_zips()  # Spark's Python processes import pyspark with its bytecode

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_TESTS = Path(__file__).parent


# The longest modules (minutes each, measured with --durations), started first: `make test`
# runs the files on several workers (pytest-xdist, --dist loadfile; see below for tests/spark),
# which take them in collection order, so a long one started last would run alone at the end.
LONGEST_FIRST: Final = (
    "integration/test_real_kafka.py",
    "spark/test_stream.py",
    "spark/test_friction.py",
    "integration/test_image_entrypoint.py",
    "integration/test_listener_campaign.py",
    "spark/test_campaign_spark.py",
    "integration/test_campaign_readers.py",
    "integration/test_follow_security.py",
    "integration/test_console.py",
    "integration/test_catalog_faults.py",
    "spark/test_iceberg.py",
    "spark/test_export.py",
    "integration/test_schema_formats.py",
    "spark/test_integrity.py",
    "spark/test_s3.py",
    "integration/test_corruption_campaign.py",
)


# The modules under tests/spark run on two workers, not on each: each worker running one starts
# a SparkSession of its own (a JVM, its JIT's warm-up and a Python daemon, ~25 CPU-s on this
# machine), for a suite that is CPU-bound on 2 cores. Two groups of about equal length (measured
# with --durations): the rest of tests/spark is in the second.
SPARK_FIRST_GROUP: Final = frozenset(
    {
        "spark/test_stream.py",
        "spark/test_s3.py",
        "spark/test_export.py",
        "spark/test_integrity.py",
        "spark/test_scrub.py",
        "spark/test_columns.py",
        "spark/test_plan.py",
    }
)


def xdist_scope(nodeid: str) -> str:
    """What a worker takes whole under ``--dist loadfile``: a test's file, or for tests/spark
    one of two groups of files (:data:`SPARK_FIRST_GROUP`)."""
    path = nodeid.split("::", 1)[0]
    name = path.removeprefix("tests/")
    if not name.startswith("spark/"):
        return path
    return "spark-1" if name in SPARK_FIRST_GROUP else "spark-2"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with :func:`xdist_scope` as its scope (pytest 9 ignores the node ids
    that ``--dist loadgroup`` rewrites, so groups are made here)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # noqa: PLC0415

    class SparkOnTwoWorkers(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return SparkOnTwoWorkers(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``integration``: under tests/integration. ``spark``: under tests/spark, or using the
    ``spark`` session fixture, or in a module that needs the extra (``require_spark``). The
    modules of :data:`LONGEST_FIRST` are moved to the front, in that order (each module's own
    order kept)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.relative_to(_TESTS).as_posix(), len(rank)))
    for item in items:
        path = item.path
        if path.is_relative_to(_TESTS / "integration"):
            item.add_marker(pytest.mark.integration)
        module = getattr(item, "module", None)
        if (
            path.is_relative_to(_TESTS / "spark")
            or "spark" in getattr(item, "fixturenames", ())
            or getattr(module, "require_spark", None) is require_spark
        ):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(autouse=True)
def _loggers_left_as_found() -> Iterator[None]:
    """A test that configures logging (``serve`` does) leaves the loggers as it found them: a
    handler left on the root logger writes into the closed capture of every later test."""
    loggers = [logging.getLogger(n) for n in ("", "uvicorn", "uvicorn.error", "uvicorn.access")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, handlers, level, propagate in saved:
        for handler in list(lg.handlers):  # pytest's own capture handlers are its to remove
            if handler not in handlers and not type(handler).__module__.startswith("_pytest"):
                lg.removeHandler(handler)
        for handler in handlers:  # what the test cleared, back (but pytest's, gone by now)
            if handler not in lg.handlers and not type(handler).__module__.startswith("_pytest"):
                lg.addHandler(handler)
        lg.setLevel(level)
        lg.propagate = propagate


@pytest.fixture(autouse=True)
def _apps_released() -> Iterator[None]:
    """A test's FastAPI apps are freed when it ends. FastAPI keeps the endpoints it has
    classified in module-level LRU caches (``fastapi.dependencies.models``, 4,096 entries each),
    and our endpoints are closures over their app: a worker kept the last ~100 apps of the
    tests it ran, and every full collection of the cycle collector walked them. The unit tests'
    two workers ended holding 1.5 and 0.45 million objects, 0.46 and 0.42 with the caches
    cleared, and spent 15.2 CPU-s collecting, 13.4 with them cleared. A server builds one app:
    this is the tests' own doing."""
    yield
    models = sys.modules.get("fastapi.dependencies.models")
    for cached in vars(models).values() if models is not None else ():
        if callable(getattr(cached, "cache_clear", None)):
            cached.cache_clear()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """Start ``moto.server`` as its own process; yield its endpoint URL."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", LOCALHOST, "-p", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port = listening_port(proc, timeout_s=60)
    except RuntimeError as e:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"moto server did not start: {e}") from None
    try:
        yield f"http://{LOCALHOST}:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def s3_bucket(moto_endpoint: str) -> str:
    """A fresh, empty bucket on the moto server."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket=name
    )
    return name
