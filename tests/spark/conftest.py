"""One real local SparkSession (``local[2]``, bound to 127.0.0.1) for the Spark tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Set when the suite is collected, not when the fixture first runs: Python workers get the
# environment the JVM started with, and the first Spark of a test process may be a command's own
# (``main(["scrub", ...])`` in a test that takes no fixture), whose JVM the fixture then reuses.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # moto's credentials
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Imported here: each module that needs it skips without the `spark` extra, this file can't.
    from pyspark.sql import SparkSession  # noqa: PLC0415

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tiered-gateway-tests")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
