"""Reader options of ``spark.read.format("tiered-kafka")``, parsed once on the driver.

The names are those of Spark's Kafka source wherever the meaning is the same, so a job switches
by changing the format name (and swapping ``kafka.bootstrap.servers`` for ``store``):

==================================  ============================================================
``store`` (or the load path)        ``file:///abs/dir`` or ``s3://bucket`` (required)
``s3.endpointUrl``, ``s3.region``,  the S3 endpoint, region, path-style addressing
``s3.pathStyle``
``keyPrefix``                       object key prefix of the plugin (``rsm.config.key.prefix``)
``keyPairs``                        ``ID=PEM_PATH`` pairs, comma-separated (paths readable on
                                    every executor)
``catalog``                         a ``--state-dir`` catalog to plan from instead of a scan
``topic`` / ``subscribe`` /         one topic; ``assign`` as Spark's JSON ``{"t":[0,1]}``
``assign``
``topicId``                         one incarnation of a re-created topic
``partitions``                      ``0,1,5`` (default: every partition with remote data)
``startingOffsets``                 ``earliest`` (default), ``latest``, ``{"t":{"0":23,"1":-2}}``,
                                    or one offset N for every partition (an extension)
``endingOffsets``                   ``latest`` (default), JSON or N; exclusive; -1 = latest
``startingTimestamp`` / ``ending``  ms, every partition (takes precedence, as in Spark)
``startingOffsetsByTimestamp`` /    ``{"t":{"0":1700000000000}}``
``endingOffsetsByTimestamp``
``startingOffsetsBy``               ``error`` (default) or ``latest``: what a starting timestamp
``TimestampStrategy``               with no record at or after it means
``includeHeaders``                  ``true`` adds the ``headers`` column
``isolation.level``                 ``read_uncommitted`` (default) or ``read_committed``; Kafka's
(``kafka.isolation.level``)         consumer name is accepted too
``maxBytesPerPartition``            segment bytes per Spark partition (default 128 MiB)
``maxRowsPerBatch``                 rows per Arrow batch an executor yields (default 65536)
``failOnDataLoss``                  ``true`` (default): offsets the remote tier should hold but
                                    does not (a hole in the lineage, an unreadable manifest)
                                    fail the read with a typed error; ``false`` skips them with
                                    a warning in the driver's log
==================================  ============================================================

Partitions a per-partition JSON does not name take the default bound (earliest, latest); Spark
requires every partition instead. Other ``kafka.*`` options and Spark Kafka-source options that
have no meaning here (``maxOffsetsPerTrigger``, ``minPartitions``, ...) are accepted and
ignored; anything else is a :class:`~gateway.errors.ConfigurationError` naming the option.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gateway.errors import ConfigurationError
from gateway.kafka.uuids import parse_topic_id
from gateway.service.types import IsolationLevel
from gateway.storage.sync import SyncStoreSpec

DEFAULT_MAX_BYTES_PER_PARTITION: Final = 128 * 1024 * 1024
DEFAULT_MAX_ROWS_PER_BATCH: Final = 65536
EARLIEST_OFFSET: Final = -2  # Spark's JSON offsets
LATEST_OFFSET: Final = -1

_KNOWN: Final = frozenset(
    {
        "store", "path", "s3.endpointurl", "s3.region", "s3.pathstyle", "keyprefix", "keypairs",
        "catalog", "topic", "subscribe", "assign", "topicid", "partitions", "startingoffsets",
        "endingoffsets", "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "includeheaders",
        "isolation.level", "kafka.isolation.level", "maxbytesperpartition", "maxrowsperbatch",
        "failondataloss",
    }
)  # fmt: skip
_IGNORED: Final = frozenset(
    {
        "minpartitions", "maxoffsetspertrigger", "minoffsetspertrigger",
        "maxtriggerdelay", "fetchoffset.numretries", "fetchoffset.retryintervalms",
        "groupidprefix", "subscribepattern",
    }
)  # fmt: skip


class BoundKind(StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a partition's range before the driver resolves it to an offset."""

    kind: BoundKind
    value: int = 0


EARLIEST: Final = Bound(BoundKind.EARLIEST)
LATEST: Final = Bound(BoundKind.LATEST)


@dataclass(frozen=True, slots=True)
class Bounds:
    """A bound for every partition: the listed ones, else ``default``."""

    default: Bound
    per_partition: tuple[tuple[int, Bound], ...] = ()

    def for_partition(self, partition: int) -> Bound:
        for p, bound in self.per_partition:
            if p == partition:
                return bound
        return self.default


@dataclass(frozen=True, slots=True)
class ReadOptions:
    store: SyncStoreSpec
    key_prefix: str
    key_pairs: tuple[str, ...]
    topic: str
    topic_id: uuid.UUID | None = None
    partitions: tuple[int, ...] | None = None
    start: Bounds = Bounds(EARLIEST)
    end: Bounds = Bounds(LATEST)
    start_timestamp_strategy: str = "error"
    include_headers: bool = False
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH
    catalog: str | None = None
    fail_on_data_loss: bool = True


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"option {name}={text!r}: expected true or false")


def _int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigurationError(f"option {name}={text!r}: expected an integer") from None
    if value < minimum:
        raise ConfigurationError(f"option {name}={value}: must be >= {minimum}")
    return value


def _json_object(name: str, text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"option {name}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"option {name}: expected a JSON object")
    return value


def _per_partition(name: str, text: str, topic: str) -> dict[int, int]:
    """``{"topic": {"0": n, ...}}`` as {partition: n}."""
    top = _json_object(name, text)
    others = sorted(set(top) - {topic})
    if others:
        raise ConfigurationError(f"option {name} names topics {others}; this reads {topic!r}")
    inner = top.get(topic, {})
    if not isinstance(inner, dict):
        raise ConfigurationError(f"option {name}: {topic!r} must map partitions to numbers")
    out: dict[int, int] = {}
    for key, value in inner.items():
        if not key.isdigit() or isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"option {name}: {key!r}: {value!r} is not partition: int")
        out[int(key)] = value
    return out


def _offset_bound(name: str, where: str, offset: int, *, ending: bool) -> Bound:
    if offset == LATEST_OFFSET:
        return LATEST
    if offset == EARLIEST_OFFSET and not ending:
        return EARLIEST
    if offset >= 0:
        return Bound(BoundKind.OFFSET, offset)
    raise ConfigurationError(
        f"option {name}: {where}offset {offset} is not allowed "
        f"({'-1 = latest' if ending else '-2 = earliest, -1 = latest'}, or >= 0)"
    )


def _offset_bounds(name: str, text: str, topic: str, *, ending: bool) -> Bounds:
    lowered = text.strip().lower()
    if lowered == "earliest" and not ending:
        return Bounds(EARLIEST)
    if lowered == "latest":
        return Bounds(LATEST)
    if lowered.lstrip("-").isdigit():  # an extension: one offset for every partition
        return Bounds(_offset_bound(name, "", int(lowered), ending=ending))
    if not lowered.startswith("{"):
        allowed = "latest, N or JSON" if ending else "earliest, latest, N or JSON"
        raise ConfigurationError(f"option {name}={text!r}: expected {allowed}")
    listed = tuple(
        (partition, _offset_bound(name, f"partition {partition} ", offset, ending=ending))
        for partition, offset in sorted(_per_partition(name, text, topic).items())
    )
    return Bounds(LATEST if ending else EARLIEST, listed)


def _bounds(opts: Mapping[str, str], topic: str, *, ending: bool) -> Bounds:
    """Spark's precedence: a global timestamp, then per-partition timestamps, then offsets."""
    side = "ending" if ending else "starting"
    default = LATEST if ending else EARLIEST
    if (text := opts.get(f"{side}timestamp")) is not None:
        ts = _int(f"{side}Timestamp", text, 0)
        return Bounds(Bound(BoundKind.TIMESTAMP, ts))
    if (text := opts.get(f"{side}offsetsbytimestamp")) is not None:
        name = f"{side}OffsetsByTimestamp"
        listed = []
        for partition, ts in sorted(_per_partition(name, text, topic).items()):
            if ts < 0:
                raise ConfigurationError(f"option {name}: partition {partition}: {ts} < 0")
            listed.append((partition, Bound(BoundKind.TIMESTAMP, ts)))
        return Bounds(default, tuple(listed))
    text = opts.get(f"{side}offsets")
    if text is None:
        return Bounds(default)
    return _offset_bounds(f"{side}Offsets", text, topic, ending=ending)


def _topic(opts: Mapping[str, str]) -> tuple[str, tuple[int, ...] | None]:
    given = [k for k in ("topic", "subscribe", "assign") if k in opts]
    if len(given) != 1:
        raise ConfigurationError("options: give exactly one of topic, subscribe, assign")
    if given[0] == "assign":
        top = _json_object("assign", opts["assign"])
        if len(top) != 1:
            raise ConfigurationError("option assign: name exactly one topic")
        ((topic, parts),) = top.items()
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise ConfigurationError('option assign: expected {"topic": [partition, ...]}')
        return topic, tuple(sorted(set(parts)))
    topic = opts[given[0]].strip()
    if not topic or "," in topic:
        raise ConfigurationError(f"option {given[0]}={topic!r}: expected one topic name")
    return topic, None


def _partitions(text: str) -> tuple[int, ...]:
    try:
        parts = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise ConfigurationError(f"option partitions={text!r}: expected 0,1,2") from None
    if not parts or parts[0] < 0:
        raise ConfigurationError(f"option partitions={text!r}: expected partitions >= 0")
    return tuple(parts)


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """The options of one read (keys are case-insensitive, as Spark passes them)."""
    opts = {k.lower(): v for k, v in options.items()}
    for key in opts:
        if key not in _KNOWN and key not in _IGNORED and not key.startswith("kafka."):
            raise ConfigurationError(f"unknown option {key!r} for format tiered-kafka")
    url = opts.get("store") or opts.get("path")
    if not url:
        raise ConfigurationError("option store is required (file:///abs/dir or s3://bucket)")
    store = SyncStoreSpec(
        url,
        endpoint_url=opts.get("s3.endpointurl") or None,
        region=opts.get("s3.region") or None,
        path_style=_bool("s3.pathStyle", opts.get("s3.pathstyle", "false")),
    )
    topic, assigned = _topic(opts)
    partitions = assigned
    if "partitions" in opts:
        if assigned is not None:
            raise ConfigurationError("options assign and partitions cannot both be given")
        partitions = _partitions(opts["partitions"])
    topic_id = None
    if "topicid" in opts:
        topic_id = parse_topic_id(opts["topicid"], "option topicId")
    isolation_text = opts.get("isolation.level", opts.get("kafka.isolation.level"))
    isolation = IsolationLevel.READ_UNCOMMITTED
    if isolation_text is not None:
        try:
            isolation = IsolationLevel(isolation_text.strip().lower())
        except ValueError:
            raise ConfigurationError(
                f"option isolation.level={isolation_text!r}: read_committed or read_uncommitted"
            ) from None
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigurationError(
            f"option startingOffsetsByTimestampStrategy={strategy!r}: error or latest"
        )
    pairs = tuple(p.strip() for p in opts.get("keypairs", "").split(",") if p.strip())
    return ReadOptions(
        store=store,
        key_prefix=opts.get("keyprefix", ""),
        key_pairs=pairs,
        topic=topic,
        topic_id=topic_id,
        partitions=partitions,
        start=_bounds(opts, topic, ending=False),
        end=_bounds(opts, topic, ending=True),
        start_timestamp_strategy=strategy,
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        isolation=isolation,
        max_bytes_per_partition=_int(
            "maxBytesPerPartition",
            opts.get("maxbytesperpartition", str(DEFAULT_MAX_BYTES_PER_PARTITION)),
            1,
        ),
        max_rows_per_batch=_int(
            "maxRowsPerBatch", opts.get("maxrowsperbatch", str(DEFAULT_MAX_ROWS_PER_BATCH)), 1
        ),
        catalog=opts.get("catalog") or None,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
    )
