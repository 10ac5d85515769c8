"""``export --format iceberg``, the driver's part: the catalog, the table and its one commit.

Executors write Parquet files with the Arrow writer (:func:`gateway.spark.sink.
write_split_by_day`) under the table's ``data/`` folder; the driver then adds all of them to
the table in one transaction (pyiceberg's ``add_files``: it reads each file's footer for its
statistics and partition, nothing is rewritten). No pyspark is imported here.

Catalogs: an embedded SQLite catalog (``sqlite:///path/catalog.db``; the default, in the
warehouse folder, when only a local ``--warehouse`` is given) or a REST catalog URL.

The table (created with its namespace when missing) has the export's columns with fixed field
ids, partitioned by ``identity(partition)`` and ``day(timestamp)``; the Parquet files carry no
field ids, so the table's default name mapping (``schema.name-mapping.default``) maps them by
name. An existing table must have exactly this schema and spec.

Incremental backfill. Every commit records in its snapshot summary:

* ``tiered-gateway.ranges``: the offsets this commit covers, ``{"topic": {"partition":
  [[lo, hi], ...]}}`` with ``hi`` exclusive (records of a range that are aborted or markers
  are covered without a row);
* ``tiered-gateway.committed``: the same map, cumulative (every range committed so far, merged);
* ``tiered-gateway.topics``: per topic its id and the isolation level and headers it was read
  with; a later run must read the same topic id and isolation level.

A re-run takes the cumulative map of the newest snapshot in the current snapshot's ancestry
that carries one (snapshots of other writers, a compaction say, are passed over), so expiring
older snapshots loses nothing. A table with records but no such snapshot is refused: which
offsets it holds is unknown. The commit is optimistic and not retried: if another writer committed
since the table was loaded, the commit fails and the export's files are removed, so no offset
is ever added twice (a re-run then appends what is still missing).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ValidationException,
)
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

RANGES_KEY: Final = "tiered-gateway.ranges"
COMMITTED_KEY: Final = "tiered-gateway.committed"
TOPICS_KEY: Final = "tiered-gateway.topics"
DEFAULT_NAMESPACE: Final = "kafka"
CATALOG_NAME: Final = "tiered-gateway"
SQLITE_FILE: Final = "catalog.db"
NAME_MAPPING_KEY: Final = "schema.name-mapping.default"
COMMIT_RETRIES_KEY: Final = "commit.retry.num-retries"

COMMIT_ERRORS: Final = (CommitFailedException, ValidationException, ValueError, OSError)
"""A commit that failed for sure, nothing committed: refused by the catalog
(:class:`CommitFailedException`, :class:`ValidationException`), or failed in ``add_files``
before anything was sent (a file's footer unreadable, a file spanning two partitions).
Anything else while the commit is sent (a timeout, a reset connection, a 5xx, an interrupt)
may have landed: :func:`commit` raises :class:`CommitStateUnknownException` for it."""

__all__ = ["COMMIT_ERRORS", "CommitStateUnknownException", "Table"]

Ranges = dict[int, list[tuple[int, int]]]
"""Offset ranges ``[lo, hi)`` by partition, sorted and merged."""


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


def table_identifier(text: str | None, topic: str) -> tuple[str, ...]:
    """``--table ns.name`` (the last dot separates the name; nested namespaces allowed), by
    default ``kafka.<topic>`` (a topic's own dots stay in the name)."""
    if text is None:
        return (DEFAULT_NAMESPACE, topic)
    *namespace, name = text.split(".")
    if not namespace or not name or not all(namespace):
        raise ConfigurationError(f"--table {text!r}: expected namespace.name")
    return (*namespace, name)


def open_catalog(
    catalog: str | None, warehouse: str | None, properties: Mapping[str, str] = {}
) -> Catalog:
    """The catalog of ``--catalog`` (``sqlite:///path`` or ``http(s)://``), by default an
    SQLite catalog in the local ``warehouse`` folder."""
    props = dict(properties)
    if warehouse is not None:
        props["warehouse"] = _warehouse_uri(warehouse)
    if catalog is None:
        if warehouse is None:
            raise ConfigurationError("--format iceberg needs --warehouse or --catalog")
        if urlsplit(props["warehouse"]).scheme != "file":
            raise ConfigurationError(
                f"--warehouse {warehouse}: the default catalog lives in the warehouse and needs "
                "a local folder; give --catalog sqlite:///path/catalog.db or a REST catalog URL"
            )
        folder = Path(urlsplit(props["warehouse"]).path)
        folder.mkdir(parents=True, exist_ok=True)
        catalog = f"sqlite:///{folder / SQLITE_FILE}"
    scheme = urlsplit(catalog).scheme.lower()
    if scheme == "sqlite":
        db = catalog.removeprefix("sqlite:///")
        if db != ":memory:":
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        return SqlCatalog(CATALOG_NAME, uri=catalog, **props)
    if scheme in ("http", "https"):
        return RestCatalog(CATALOG_NAME, uri=catalog, **props)
    raise ConfigurationError(
        f"--catalog {catalog!r}: expected sqlite:///path/catalog.db or an http(s):// REST URL"
    )


def _warehouse_uri(warehouse: str) -> str:
    if "://" in warehouse:
        return warehouse.rstrip("/")
    return Path(os.path.abspath(warehouse)).as_uri()


def load_table(catalog: Catalog, identifier: tuple[str, ...]) -> Table | None:
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def create_table(
    catalog: Catalog,
    identifier: tuple[str, ...],
    include_headers: bool,
    typed: tuple[TypedSide, ...] = (),
) -> Table:
    """Create the table (and its namespace) with the export's schema and partition spec."""
    schema = table_schema(include_headers, typed)
    if "warehouse" not in catalog.properties and isinstance(catalog, SqlCatalog):
        raise ConfigurationError(
            f"table {'.'.join(identifier)} does not exist: give --warehouse to create it"
        )  # before the namespace: a refused run creates nothing
    catalog.create_namespace_if_not_exists(identifier[:-1])
    spec = partition_spec(schema)
    table = catalog.create_table(identifier, schema=schema, partition_spec=spec)
    return _map_names(table)


def _map_names(table: Table) -> Table:
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
        table = _map_names(table)
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


@dataclass
class Committed:
    """What the table already holds, from its newest summary map."""

    ranges: dict[str, Ranges] = field(default_factory=dict)
    topics: dict[str, dict[str, object]] = field(default_factory=dict)
    snapshot_id: int | None = None


def committed(table: Table) -> Committed:
    """The cumulative map of the newest snapshot in the current ancestry carrying one."""
    head = snapshot = table.current_snapshot()
    if head is None:
        return Committed()
    current = head.snapshot_id
    while snapshot is not None:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if COMMITTED_KEY in props:
            return Committed(
                _parse_map(props[COMMITTED_KEY], table),
                json.loads(props.get(TOPICS_KEY, "{}")),
                current,
            )
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)
    records = head.summary.additional_properties.get("total-records") if head.summary else None
    if records not in (None, "0"):  # another writer's snapshot may lack the field
        raise ConfigurationError(
            f"table {'.'.join(table.name())} holds records but no snapshot of its history "
            f"records which offsets ({COMMITTED_KEY}): it was not written by this export, or "
            "those snapshots were expired; export to a new table"
        )
    return Committed(snapshot_id=current)


def _parse_map(text: str, table: Table) -> dict[str, Ranges]:
    try:
        raw = json.loads(text)
        return {
            topic: {int(p): [(int(lo), int(hi)) for lo, hi in rs] for p, rs in parts.items()}
            for topic, parts in raw.items()
        }
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigurationError(
            f"table {'.'.join(table.name())}: unreadable {COMMITTED_KEY} summary: {exc}"
        ) from exc


def merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, overlapping and touching ranges joined, empty ones dropped."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] < r[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def missing(lo: int, hi: int, done: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[lo, hi)`` minus the ranges in ``done`` (merged), in order."""
    gaps = []
    cursor = lo
    for a, b in merge(done):
        if b <= cursor or a >= hi:
            continue
        if a > cursor:
            gaps.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < hi:
        gaps.append((cursor, hi))
    return gaps


def check_topic(table: Table, done: Committed, topic: str, topic_id: str, isolation: str) -> None:
    """A re-run must read the topic the table's offsets came from, at the same isolation."""
    seen = done.topics.get(topic)
    if seen is None:
        return
    name = ".".join(table.name())
    if seen.get("topicId") != topic_id:
        raise ConfigurationError(
            f"table {name} holds topic {topic} with id {seen.get('topicId')}; the bucket's "
            f"{topic} is {topic_id} (re-created?): its offsets are not the same records; "
            "export to a new table"
        )
    if seen.get("isolation") != isolation:
        raise ConfigurationError(
            f"table {name} holds {topic} read {seen.get('isolation')}; this export reads "
            f"{isolation}: give --isolation-level {seen.get('isolation')}"
        )


def ranges_json(ranges: Mapping[str, Ranges]) -> str:
    return json.dumps(
        {t: {str(p): [[lo, hi] for lo, hi in rs] for p, rs in sorted(parts.items())}
         for t, parts in sorted(ranges.items())},
        separators=(",", ":"),
    )  # fmt: skip


def summary_properties(
    done: Committed, topic: str, new: Ranges, topic_info: dict[str, object]
) -> dict[str, str]:
    """The snapshot summary of a commit adding ``new`` to what ``done`` holds."""
    cumulative = {t: {p: list(rs) for p, rs in parts.items()} for t, parts in done.ranges.items()}
    mine = cumulative.setdefault(topic, {})
    for p, rs in new.items():
        mine[p] = merge([*mine.get(p, []), *rs])
    topics = {**done.topics, topic: topic_info}
    return {
        RANGES_KEY: ranges_json({topic: new}),
        COMMITTED_KEY: ranges_json(cumulative),
        TOPICS_KEY: json.dumps(topics, separators=(",", ":"), sort_keys=True),
    }


def commit(table: Table, files: list[str], properties: dict[str, str]) -> int:
    """Add ``files`` (URIs) to ``table`` in one transaction with ``properties`` in the
    snapshot summary; the new snapshot's id. Fails (nothing committed) when another writer
    committed since ``table`` was loaded. No duplicate check against the table's files: the
    names carry this export's job id."""
    tx = _without_retries(table).transaction()
    tx.add_files(files, snapshot_properties=properties, check_duplicate_files=False)
    try:
        updated = tx.commit_transaction()
    except (CommitFailedException, ValidationException):
        raise  # refused: nothing committed
    except BaseException as exc:  # sent, outcome unknown: the files must stay
        raise CommitStateUnknownException(f"{type(exc).__name__}: {exc}") from exc
    snapshot = updated.current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id


def _without_retries(table: Table) -> Table:
    """``table`` whose commits are not retried. pyiceberg retries a commit that lost a race by
    rebasing it onto the new snapshot, but this commit's summary map and the offsets it adds
    were computed from the snapshot it loaded: on top of another export's commit that would
    add offsets twice. Only this in-memory copy changes, the table's properties do not."""
    metadata = table.metadata.model_copy(
        update={"properties": {**table.metadata.properties, COMMIT_RETRIES_KEY: "0"}}
    )
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog)


def data_location(table: Table) -> str:
    """Where the executors write the table's data files."""
    return f"{table.location().rstrip('/')}/data"
