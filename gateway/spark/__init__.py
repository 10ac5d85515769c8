"""PySpark data source ``tiered-kafka`` and the export job (the optional ``spark`` extra).

Layout, driver to executor:

* :mod:`gateway.spark.options` parses the reader options (Spark's Kafka-source names) into a
  frozen :class:`~gateway.spark.read_options.ReadOptions` (:mod:`gateway.spark.read_options`,
  the typed values a read is planned from); pure, no pyspark;
* :mod:`gateway.spark.driver` builds the plan on the driver from the metadata (a bucket scan
  into an in-memory RLMM, or a catalog: :mod:`gateway.spark.rlmm`) and resolves offset and
  timestamp bounds; :mod:`gateway.spark.walk` is the lineage walk of one partition;
* :mod:`gateway.spark.plan` cuts segments into splits (pure, picklable values);
* :mod:`gateway.spark.read` reads one split on an executor into Arrow record batches;
* :mod:`gateway.spark.stream` plans a streaming query's micro-batches on the driver (offsets,
  triggers, data loss), with :mod:`gateway.spark.stable` for read_committed's remote LSO;
* :mod:`gateway.spark.source` is the only module importing ``pyspark.sql.datasource``;
* :mod:`gateway.spark.export` is the job (run by :mod:`gateway.commands.export`: the CLI,
  ``python -m`` or spark-submit, which describes it as a typed
  :class:`~gateway.spark.job.ExportJob`); the Iceberg job is :mod:`gateway.spark.iceberg_export`,
  the output folder's modes and cleanup :mod:`gateway.spark.output`.

Only :mod:`~gateway.spark.source`, :mod:`~gateway.spark.session` and the export's modules
(:mod:`~gateway.spark.export`, :mod:`~gateway.spark.iceberg_export`,
:mod:`~gateway.spark.output`) import pyspark, so nothing outside this package needs the extra
installed.
"""

from __future__ import annotations

FORMAT_NAME = "tiered-kafka"

__all__ = ["FORMAT_NAME"]
