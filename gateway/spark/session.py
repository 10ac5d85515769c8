"""The Spark session a command runs on: the one that exists, else one it starts and owns.

``export`` and ``scrub`` (and ``register()``'s callers through them) share the rules:

* an active session (spark-submit, a notebook, the tests) is used as it is, with the package
  shipped to its executors when they need it (:mod:`gateway.spark.ship`), and never stopped;
* else a new one: ``master`` (``local[*]`` when none is given and spark-submit did not set
  one), Spark's own log in ``log_path`` rather than the terminal (:mod:`gateway.spark.logs`),
  and for a local master the Python workers run this interpreter (its venv has the package;
  SparkContext reads only the environment for it). The caller owns it and stops it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from gateway.spark.logs import quiet_session_conf
from gateway.spark.ship import ship_package


def spark_session(
    master: str | None, app_name: str, log_path: Path | None = None
) -> tuple[SparkSession, bool]:
    """The session to run on, and whether this call started it (see the module docstring)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        ship_package(active)
        return active, False
    builder = SparkSession.builder.appName(app_name)
    if log_path is not None:
        for key, value in quiet_session_conf(log_path).items():
            builder = builder.config(key, value)
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):  # a cluster's executors run their own Python
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    ship_package(spark)
    return spark, True
