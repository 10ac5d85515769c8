"""Spark-on-Kubernetes driver entry of the ``tiered-gateway-spark`` image: run one
``tiered-gateway`` command (``export`` or ``scrub``) inside the session spark-submit made.

spark-operator and ``spark-submit --deploy-mode cluster`` need a Python file as the main
application, not a console script. This one creates the session first, from the configuration
spark-submit handed over (``--master k8s://...``, executors, images, secrets), so the command
finds it active and uses it instead of building a ``local[*]`` one of its own; then it calls
``gateway.cli.main`` with the application arguments, e.g. ``export --store s3://... --topic t
--output s3a://...``, and exits with its code (2: bad input or a Spark failure, named on one
``error:`` line). The session is stopped at the end so the executors are released.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from gateway.cli import main


def run(argv: list[str]) -> int:
    """Run ``tiered-gateway <argv>`` in the submitted session and return its exit code."""
    spark = SparkSession.builder.appName(f"tiered-gateway {' '.join(argv[:1])}").getOrCreate()
    try:
        return main(argv)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
