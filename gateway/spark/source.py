"""The PySpark 4 Python data source ``tiered-kafka`` (the only place importing its API).

    from gateway.spark.source import TieredKafkaDataSource
    spark.dataSource.register(TieredKafkaDataSource)
    df = (spark.read.format("tiered-kafka")
          .option("store", "s3://bucket").option("keyPrefix", "tiered/")
          .option("topic", "orders").option("startingOffsets", "earliest")
          .load())

The schema is Spark's Kafka source's (so existing jobs switch by changing the format name)
plus ``leaderEpoch``. Planning (:func:`gateway.spark.driver.build_plan`) runs when Spark asks
for the reader, in its planning worker on the driver: Spark pickles the reader for the tasks
before it asks for the partitions, so the plan must exist by then. Each task reads one split
(:func:`gateway.spark.read.read_split`) and yields Arrow batches.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from gateway.errors import ConfigurationError
from gateway.spark import FORMAT_NAME
from gateway.spark.driver import ReadPlan, build_plan
from gateway.spark.options import parse_options
from gateway.spark.plan import Split
from gateway.spark.read_options import ReadOptions, StreamLimits
from gateway.spark.segments import ReadContext
from gateway.spark.ship import ship_package
from gateway.spark.stream import StreamPlanner
from gateway.spark.typed_request import SideRequest, TypedRequest

if TYPE_CHECKING:
    import pyarrow as pa

    from gateway.spark.typed import TypedSide

# Spark runs each planning step (the schema, the plan, a stream's offsets) in a Python worker of
# its own, forked and importing this module anew: what only reading a split or typing a column
# needs (Arrow, the compiled record loops, the schema decoders: about a second of imports) is
# imported where it is used, not here.


def spark_schema(include_headers: bool) -> StructType:
    """``key, value, topic, partition, offset, timestamp, timestampType[, headers],
    leaderEpoch``; every field nullable, as Spark's Kafka source declares them."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    fields.append(StructField("leaderEpoch", IntegerType()))
    return StructType(fields)


class SplitPartition(InputPartition):
    """One split (:class:`gateway.spark.plan.Split`) as Spark's input partition."""

    def __init__(self, split: Split) -> None:
        super().__init__(split)


def typed_options(options: Mapping[str, str], topic: str) -> tuple[TypedSide, ...]:
    """The typed sides the ``keyFormat`` / ``valueFormat`` options ask for (with
    ``keySubject``, ``valueSubject``, ``keyMessage``, ``valueMessage``, ``schemaRegistryUrl``
    or ``schemaDir``; credentials from the ``TIERED_GATEWAY_SCHEMA_REGISTRY_*`` variables),
    resolved on the driver (:mod:`gateway.spark.typed`)."""
    from gateway.spark.typed import for_spark  # noqa: PLC0415
    from gateway.spark.typed_plan import typed_sides  # noqa: PLC0415

    o = {k.lower(): v for k, v in options.items()}
    schema_dir = o.get("schemadir")
    request = TypedRequest(
        sides=tuple(
            SideRequest(side, fmt, o.get(f"{side}subject"), o.get(f"{side}message"))
            for side in ("key", "value")
            if (fmt := o.get(f"{side}format"))
        ),
        schema_registry_url=o.get("schemaregistryurl"),
        schema_dir=None if schema_dir is None else Path(schema_dir),
    )
    return tuple(for_spark(side) for side in typed_sides(request, topic))


def typed_schema(include_headers: bool, typed: tuple[TypedSide, ...]) -> StructType:
    """:func:`spark_schema` with the typed sides' columns (and their ``*_schema_id``)."""
    schema = spark_schema(include_headers)
    if not typed:
        return schema
    from pyspark.sql.pandas.types import from_arrow_type  # noqa: PLC0415

    from gateway.spark.columns import arrow_schema  # noqa: PLC0415
    from gateway.spark.typed import typed_arrow_schema  # noqa: PLC0415

    arrow = typed_arrow_schema(arrow_schema(include_headers), typed)
    ours = {t.side for t in typed} | {f"{t.side}_schema_id" for t in typed}
    return StructType(
        [
            StructField(n, from_arrow_type(arrow.field(n).type)) if n in ours else schema[n]
            for n in arrow.names
        ]
    )


def _read(
    split: Split, context: ReadContext, typed: tuple[TypedSide, ...]
) -> Iterator[pa.RecordBatch]:
    """The split's Arrow batches, typed as ``typed`` asks."""
    from gateway.spark.read import read_split  # noqa: PLC0415

    batches = read_split(split, context)
    if not typed:
        return batches
    from gateway.spark.typed import typed_batch  # noqa: PLC0415

    return (typed_batch(b, typed) for b in batches)


class TieredKafkaReader(DataSourceReader):
    def __init__(self, plan: ReadPlan, typed: tuple[TypedSide, ...] = ()) -> None:
        self.plan, self.typed = plan, typed

    def partitions(self) -> list[InputPartition]:
        return [SplitPartition(s) for s in self.plan.splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split = partition.value
        if split is None:  # Spark's placeholder when there are no splits
            return iter(())
        if not isinstance(split, Split):
            raise TypeError(f"not a tiered-kafka split: {split!r}")
        return _read(split, self.plan.context, self.typed)


class StreamSplit(InputPartition):
    """One split of a micro-batch with its read's context: a stream reader's ``read`` must not
    rely on the reader's state, and each micro-batch has its own transaction chains."""

    def __init__(self, split: Split, context: ReadContext) -> None:
        super().__init__((split, context))


class TieredKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("tiered-kafka")``: every call goes to the
    :class:`~gateway.spark.stream.StreamPlanner` of the query."""

    def __init__(self, planner: StreamPlanner, typed: tuple[TypedSide, ...] = ()) -> None:
        self.planner, self.typed = planner, typed

    def initialOffset(self) -> dict[str, object]:  # noqa: N802
        return self.planner.initial()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        limits = self.planner.opts.limits
        if limits.max_offsets is not None:
            return ReadMaxRows(limits.max_offsets)
        if limits.min_offsets is not None:
            return ReadMinRows(limits.min_offsets)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> dict[str, object]:  # noqa: N802
        given = self.planner.opts.limits
        if isinstance(limit, ReadMaxRows):  # minOffsetsPerTrigger from the options still holds
            limits = StreamLimits(limit.max_rows, given.min_offsets, given.max_trigger_delay_ms)
        elif isinstance(limit, ReadMinRows):
            limits = StreamLimits(None, limit.min_rows, given.max_trigger_delay_ms)
        else:  # ReadAllAvailable (Trigger.AvailableNow, ...): the options do not apply
            limits = StreamLimits()
        return dict(self.planner.latest(start, limits))

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.planner.freeze()

    def partitions(self, start: dict[str, object], end: dict[str, object]) -> list[InputPartition]:
        plan = self.planner.plan(start, end)
        return [StreamSplit(split, plan.context.for_split(split)) for split in plan.splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split, context = partition.value
        if not isinstance(split, Split) or not isinstance(context, ReadContext):
            raise TypeError(f"not a tiered-kafka stream split: {partition.value!r}")
        return _read(split, context, self.typed)

    def commit(self, end: dict[str, object]) -> None:
        """Nothing to do: the offsets are in Spark's checkpoint, the source keeps no state."""

    def stop(self) -> None:
        self.planner.close()


class TieredKafkaDataSource(DataSource):
    """``spark.read.format("tiered-kafka")``; options: :mod:`gateway.spark.options`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        opts = parse_options(self.options)
        return typed_schema(opts.include_headers, self._typed(opts))

    def _typed(self, opts: ReadOptions) -> tuple[TypedSide, ...]:
        o = {k.lower() for k in self.options}
        return typed_options(self.options, opts.topic) if {"keyformat", "valueformat"} & o else ()

    def _options(self, schema: StructType) -> tuple[ReadOptions, tuple[TypedSide, ...]]:
        opts = parse_options(self.options)
        typed = self._typed(opts)
        if schema != typed_schema(opts.include_headers, typed):
            raise ConfigurationError(
                "format tiered-kafka has a fixed schema (Spark's Kafka source columns plus "
                "leaderEpoch; keyFormat / valueFormat type key / value); do not pass .schema(...)"
            )
        return opts, typed

    def reader(self, schema: StructType) -> DataSourceReader:
        opts, typed = self._options(schema)
        return TieredKafkaReader(build_plan(opts), typed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        opts, typed = self._options(schema)
        return TieredKafkaStreamReader(StreamPlanner(opts), typed)


def register(spark: SparkSession) -> None:
    """``spark.dataSource.register(TieredKafkaDataSource)`` for a SparkSession, and on a cluster
    master the package zip for its executors (:func:`gateway.spark.ship.ship_package`)."""
    use_this_interpreter()
    ship_package(spark)
    spark.dataSource.register(TieredKafkaDataSource)


def use_this_interpreter() -> None:
    """Local Python workers run this interpreter (whose environment has ``gateway``), not the
    first ``python3`` on PATH, unless the user chose one (``PYSPARK_PYTHON``,
    ``spark.pyspark.python``): a plain ``python`` process without its venv activated reads the
    source as well as one with it. Spark reads the choice when a context starts
    (``PYSPARK_PYTHON``) and when a data source is registered (the context's ``pythonExec``),
    so both are set: on import of this module and by :func:`register`. Only for a local
    master: a cluster's workers have their own interpreter (docs/spark.md)."""
    if "PYSPARK_PYTHON" in os.environ:
        return
    from pyspark import SparkContext  # noqa: PLC0415

    context = SparkContext._active_spark_context
    if context is None:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # for the context about to start
        return
    conf = context.getConf()
    local = conf.get("spark.master", "").startswith("local")
    if local and not conf.get("spark.pyspark.python", ""):
        context.pythonExec = sys.executable


use_this_interpreter()
