"""``export --format iceberg``: the table's schema and partition spec, and the check of an
existing table's (no pyspark imported here).

The table has the export's columns with fixed field ids, partitioned by ``identity(partition)``
and ``day(timestamp)``; the Parquet files carry no field ids, so the table's default name
mapping (``schema.name-mapping.default``) maps them by name. An existing table must have
exactly this schema and spec (a typed one may gain the fields a new subject version adds).
"""

from __future__ import annotations

from typing import Final

from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from gateway.errors import ConfigurationError
from gateway.spark.columns import arrow_schema
from gateway.spark.typed import TypedSide, typed_arrow_schema

NAME_MAPPING_KEY: Final = "schema.name-mapping.default"


def table_schema(include_headers: bool, typed: tuple[TypedSide, ...] = ()) -> Schema:
    """The table's columns: :func:`gateway.spark.columns.arrow_schema` with field ids (all
    optional, as the Parquet files have them; the ids are those the catalog assigns to a new
    table: the top-level columns in order, then the nested ones); with ``typed`` sides, their
    typed columns (:mod:`gateway.spark.typed`)."""
    if typed:
        arrow = typed_arrow_schema(arrow_schema(include_headers), typed)
        return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(arrow))
    fields = [
        NestedField(1, "key", BinaryType(), required=False),
        NestedField(2, "value", BinaryType(), required=False),
        NestedField(3, "topic", StringType(), required=False),
        NestedField(4, "partition", IntegerType(), required=False),
        NestedField(5, "offset", LongType(), required=False),
        NestedField(6, "timestamp", TimestamptzType(), required=False),
        NestedField(7, "timestampType", IntegerType(), required=False),
    ]
    if include_headers:
        header = StructType(
            NestedField(11, "key", StringType(), required=False),
            NestedField(12, "value", BinaryType(), required=False),
        )
        fields.append(
            NestedField(8, "headers", ListType(10, header, element_required=False), required=False)
        )
    fields.append(NestedField(len(fields) + 1, "leaderEpoch", IntegerType(), required=False))
    return Schema(*fields)


def partition_spec(schema: Schema) -> PartitionSpec:
    """``identity(partition), day(timestamp)``."""
    return PartitionSpec(
        PartitionField(schema.find_field("partition").field_id, 1000, IdentityTransform(),
                       "partition"),
        PartitionField(schema.find_field("timestamp").field_id, 1001, DayTransform(),
                       "timestamp_day"),
    )  # fmt: skip


def map_names(table: Table) -> Table:
    """The files carry no field ids: readers map their columns by name, with the ids the
    catalog gave (taken from the table, not assumed)."""
    mapping = table.schema().name_mapping.model_dump_json()
    return table.transaction().set_properties({NAME_MAPPING_KEY: mapping}).commit_transaction()


def check_table(table: Table, include_headers: bool, typed: tuple[TypedSide, ...] = ()) -> Table:
    """An existing table must have the export's columns (names and types) and spec; a typed
    table whose export now has more fields (a new version added them) gains them first, the
    rows it holds reading them as null."""
    name = ".".join(table.name())
    want = table_schema(include_headers, typed)
    have = table.schema()
    if typed and not _same_columns(have, want) and _adds_only(have, want):
        with table.update_schema() as update:
            update.union_by_name(want)
        table = map_names(table)
        have = table.schema()
    if not _same_columns(have, want):
        if typed:
            raise ConfigurationError(
                f"table {name}: its columns do not merge with the export's (the same "
                "--include-headers and formats, and subject versions that only add fields): "
                f"{', '.join(have.column_names)}"
            )
        headers = "with" if include_headers else "without"
        raise ConfigurationError(
            f"table {name}: its schema is not the export's {headers} headers "
            f"(--include-headers must be as when it was created): {', '.join(have.column_names)}"
        )
    spec = table.spec()
    got = [(have.find_column_name(f.source_id), str(f.transform)) for f in spec.fields]
    if got != [("partition", "identity"), ("timestamp", "day")]:
        raise ConfigurationError(
            f"table {name}: partitioned by {got}, not identity(partition), day(timestamp)"
        )
    return table


def _shape(kind: IcebergType) -> str:
    """A type with its field ids left out (a table's ids and a new schema's differ)."""
    if isinstance(kind, StructType):
        return "struct<" + ",".join(f"{f.name}:{_shape(f.field_type)}" for f in kind.fields) + ">"
    if isinstance(kind, ListType):
        return f"list<{_shape(kind.element_type)}>"
    if isinstance(kind, MapType):
        return f"map<{_shape(kind.key_type)},{_shape(kind.value_type)}>"
    return str(kind)


def _leaves(schema: Schema) -> dict[str, str]:
    """Every column not a struct (nested ones by dotted name), by its shape."""
    found = {name: schema.find_type(name) for name in schema.column_names}
    return {n: _shape(t) for n, t in found.items() if not isinstance(t, StructType)}


def _same_columns(have: Schema, want: Schema) -> bool:
    """Names and types, nested ones included, ids aside."""
    return _leaves(have) == _leaves(want)


def _adds_only(have: Schema, want: Schema) -> bool:
    """``want`` has every column of ``have`` with the same type, and more."""
    old, new = _leaves(have), _leaves(want)
    return old.items() < new.items()
