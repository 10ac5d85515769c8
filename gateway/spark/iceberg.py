"""``export --format iceberg``, the driver's part: the catalog, the table and its one commit.

Executors write Parquet files with the Arrow writer (:func:`gateway.spark.sink.
write_split_by_day`) under the table's ``data/`` folder; the driver then adds all of them to
the table in one transaction (pyiceberg's ``add_files``: it reads each file's footer for its
statistics and partition, nothing is rewritten). No pyspark is imported here.

Catalogs: an embedded SQLite catalog (``sqlite:///path/catalog.db``; the default, in the
warehouse folder, when only a local ``--warehouse`` is given) or a REST catalog URL.

The table (created with its namespace when missing) has the export's columns with fixed field
ids, partitioned by ``identity(partition)`` and ``day(timestamp)``
(:mod:`gateway.spark.iceberg_schema`, which checks an existing table's).

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
from pyiceberg.table import Table

from gateway.errors import ConfigurationError
from gateway.spark.iceberg_schema import map_names, partition_spec, table_schema
from gateway.spark.typed import TypedSide

RANGES_KEY: Final = "tiered-gateway.ranges"
COMMITTED_KEY: Final = "tiered-gateway.committed"
TOPICS_KEY: Final = "tiered-gateway.topics"
DEFAULT_NAMESPACE: Final = "kafka"
CATALOG_NAME: Final = "tiered-gateway"
SQLITE_FILE: Final = "catalog.db"
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
    return map_names(table)


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
