"""Reader options of ``spark.read.format("tiered-kafka")``, parsed once on the driver into the
typed values of :mod:`gateway.spark.read_options`.

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
``metadataBootstrap``               plan from the cluster's ``__remote_log_metadata`` (read to
                                    its end on the driver; security from the driver's
                                    ``TIERED_GATEWAY_METADATA_*`` variables) instead of a scan
``topic`` / ``subscribe``           one topic / topics, comma-separated
``subscribePattern``                topics whose whole name matches a regular expression
``assign``                          Spark's JSON ``{"t":[0,1],"u":[2]}``
``topicId``                         one incarnation of a re-created topic (one topic only)
``partitions``                      ``0,1,5`` of every topic (default: every partition with
                                    remote data)
``minPartitions``                   at least this many Spark partitions: segments are cut
                                    into more splits until there are (some may be empty)
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
                                    does not (a hole in the lineage, an unreadable manifest,
                                    a segment deleted under a running query) fail the read with
                                    a typed error; ``false`` skips them with a warning in the
                                    driver's log
``maxOffsetsPerTrigger``,           streaming only (:mod:`gateway.spark.stream`): at most /
``minOffsetsPerTrigger``,           at least this many new offsets per micro-batch, the latter
``maxTriggerDelay``                 waited for at most the delay (``15m``, ``30s``, ``500ms``)
==================================  ============================================================

Partitions a per-partition JSON does not name take the default bound (earliest, latest); Spark
requires every partition instead. A per-partition JSON may name only topics the read
subscribes to. Options that only tune the connection to brokers (``kafka.bootstrap.servers``,
``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``, ``groupIdPrefix``,
``fetchOffset.*``, ...: :data:`BROKER_ONLY`) have no meaning without brokers and are accepted
and ignored, so a job switches by changing the format name and adding ``store``. Any other
option, ``kafka.*`` ones included, is a :class:`~gateway.errors.ConfigurationError` naming it:
an option that would change which records are read is never silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from gateway.errors import ConfigurationError
from gateway.kafka.uuids import parse_topic_id
from gateway.service.types import IsolationLevel
from gateway.spark.option_values import bool_option, duration_option, int_option, json_option
from gateway.spark.read_options import (
    DEFAULT_MAX_BYTES_PER_PARTITION,
    DEFAULT_MAX_ROWS_PER_BATCH,
    EARLIEST,
    LATEST,
    Bound,
    BoundKind,
    Bounds,
    ReadOptions,
    StreamLimits,
    Subscription,
)
from gateway.storage.sync import SyncStoreSpec

EARLIEST_OFFSET: Final = -2  # Spark's JSON offsets
LATEST_OFFSET: Final = -1

_KNOWN: Final = frozenset(
    {
        "store", "path", "s3.endpointurl", "s3.region", "s3.pathstyle", "keyprefix", "keypairs",
        "catalog", "metadatabootstrap", "topic", "subscribe", "subscribepattern", "assign",
        "topicid", "partitions", "minpartitions", "startingoffsets", "endingoffsets",
        "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "includeheaders",
        "isolation.level", "kafka.isolation.level", "maxbytesperpartition", "maxrowsperbatch",
        "failondataloss", "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
        "keyformat", "valueformat", "keysubject", "valuesubject", "keymessage", "valuemessage",
        "schemaregistryurl", "schemadir",
    }
)  # fmt: skip
BROKER_ONLY: Final = frozenset(
    {
        "kafka.bootstrap.servers", "kafka.security.protocol", "kafka.client.id",
        "kafka.client.dns.lookup", "kafka.request.timeout.ms", "kafka.default.api.timeout.ms",
        "kafka.retry.backoff.ms", "kafka.reconnect.backoff.ms", "kafka.metadata.max.age.ms",
        "kafka.group.id", "groupidprefix", "fetchoffset.numretries",
        "fetchoffset.retryintervalms", "kafkaconsumer.polltimeoutms",
    }
)  # fmt: skip
"""Options that only tune the connection to brokers: no meaning here, accepted and ignored
(with ``kafka.sasl.*`` and ``kafka.ssl.*``)."""
_BROKER_ONLY_PREFIXES: Final = ("kafka.sasl.", "kafka.ssl.")


def _per_partition(name: str, text: str, sub: Subscription) -> list[tuple[str, int, int]]:
    """``{"topic": {"0": n, ...}, ...}`` as (topic, partition, n), sorted."""
    top = json_option(name, text)
    others = sorted(t for t in top if not sub.includes(t))
    if others:
        raise ConfigurationError(
            f"option {name} names topics {others}; this reads {sub.describe()}"
        )
    out: list[tuple[str, int, int]] = []
    for topic, inner in sorted(top.items()):
        if not isinstance(inner, dict):
            raise ConfigurationError(f"option {name}: {topic!r} must map partitions to numbers")
        for key, value in inner.items():
            if not key.isdigit() or isinstance(value, bool) or not isinstance(value, int):
                raise ConfigurationError(f"option {name}: {key!r}: {value!r} is not partition: int")
            out.append((topic, int(key), value))
    return sorted(out)


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


def _offset_bounds(name: str, text: str, sub: Subscription, *, ending: bool) -> Bounds:
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
        (topic, p, _offset_bound(name, f"{topic} partition {p} ", offset, ending=ending))
        for topic, p, offset in _per_partition(name, text, sub)
    )
    return Bounds(LATEST if ending else EARLIEST, listed)


def _bounds(opts: Mapping[str, str], sub: Subscription, *, ending: bool) -> Bounds:
    """Spark's precedence: a global timestamp, then per-partition timestamps, then offsets."""
    side = "ending" if ending else "starting"
    default = LATEST if ending else EARLIEST
    if (text := opts.get(f"{side}timestamp")) is not None:
        ts = int_option(f"{side}Timestamp", text, 0)
        return Bounds(Bound(BoundKind.TIMESTAMP, ts))
    if (text := opts.get(f"{side}offsetsbytimestamp")) is not None:
        name = f"{side}OffsetsByTimestamp"
        listed = []
        for topic, p, ts in _per_partition(name, text, sub):
            if ts < 0:
                raise ConfigurationError(f"option {name}: {topic} partition {p}: {ts} < 0")
            listed.append((topic, p, Bound(BoundKind.TIMESTAMP, ts)))
        return Bounds(default, tuple(listed))
    text = opts.get(f"{side}offsets")
    if text is None:
        return Bounds(default)
    return _offset_bounds(f"{side}Offsets", text, sub, ending=ending)


def _topic_name(option: str, name: str) -> str:
    topic = name.strip()
    if not topic:
        raise ConfigurationError(f"option {option}: an empty topic name")
    return topic


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("topic", "subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise ConfigurationError(
            "options: give exactly one of topic, subscribe, subscribePattern, assign"
        )
    (kind,) = given
    text = opts[kind]
    if kind == "subscribepattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise ConfigurationError(f"option subscribePattern={text!r}: {exc}") from None
        return Subscription(pattern=text)
    if kind == "topic":
        if "," in text:
            raise ConfigurationError(
                f"option topic={text!r}: expected one topic name (subscribe takes several)"
            )
        return Subscription((_topic_name("topic", text),))
    if kind == "subscribe":
        names = [_topic_name("subscribe", n) for n in text.split(",")]
        return Subscription(tuple(sorted(set(names))))
    top = json_option("assign", text)
    if not top:
        raise ConfigurationError("option assign: name at least one topic")
    assigned = []
    for topic, parts in sorted(top.items()):
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise ConfigurationError('option assign: expected {"topic": [partition, ...]}')
        assigned.append((_topic_name("assign", topic), tuple(sorted(set(parts)))))
    return Subscription(tuple(t for t, _ in assigned), assigned=tuple(assigned))


def _partitions(text: str) -> tuple[int, ...]:
    try:
        parts = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise ConfigurationError(f"option partitions={text!r}: expected 0,1,2") from None
    if not parts or parts[0] < 0:
        raise ConfigurationError(f"option partitions={text!r}: expected partitions >= 0")
    return tuple(parts)


def _check_keys(opts: Mapping[str, str]) -> None:
    for key in opts:
        if key in _KNOWN or key in BROKER_ONLY or key.startswith(_BROKER_ONLY_PREFIXES):
            continue
        if key.startswith("kafka."):
            raise ConfigurationError(
                f"option {key!r} is not supported by format tiered-kafka: it reads the remote "
                "tier from the bucket with no consumer, and only kafka.isolation.level and "
                "options that tune the connection to brokers (ignored) are accepted"
            )
        raise ConfigurationError(f"unknown option {key!r} for format tiered-kafka")


def _limits(opts: Mapping[str, str]) -> StreamLimits:
    def optional(name: str) -> int | None:
        text = opts.get(name.lower())
        return None if text is None else int_option(name, text, 1)

    delay = opts.get("maxtriggerdelay")
    low, high = optional("minOffsetsPerTrigger"), optional("maxOffsetsPerTrigger")
    if low is not None and high is not None and low > high:
        raise ConfigurationError(
            f"option minOffsetsPerTrigger={low} is above maxOffsetsPerTrigger={high}"
        )
    return StreamLimits(
        max_offsets=high,
        min_offsets=low,
        max_trigger_delay_ms=(
            StreamLimits().max_trigger_delay_ms
            if delay is None
            else duration_option("maxTriggerDelay", delay)
        ),
    )


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """The options of one read (keys are case-insensitive, as Spark passes them)."""
    opts = {k.lower(): v for k, v in options.items()}
    _check_keys(opts)
    url = opts.get("store") or opts.get("path")
    if not url:
        raise ConfigurationError("option store is required (file:///abs/dir or s3://bucket)")
    store = SyncStoreSpec(
        url,
        endpoint_url=opts.get("s3.endpointurl") or None,
        region=opts.get("s3.region") or None,
        path_style=bool_option("s3.pathStyle", opts.get("s3.pathstyle", "false")),
    )
    sub = _subscription(opts)
    partitions = None
    if "partitions" in opts:
        if sub.assigned:
            raise ConfigurationError("options assign and partitions cannot both be given")
        partitions = _partitions(opts["partitions"])
    topic_id = None
    if "topicid" in opts:
        if sub.pattern is not None or len(sub.topics) != 1:
            raise ConfigurationError("option topicId needs exactly one topic")
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
    min_partitions = opts.get("minpartitions")
    return ReadOptions(
        store=store,
        key_prefix=opts.get("keyprefix", ""),
        key_pairs=pairs,
        subscription=sub,
        topic_id=topic_id,
        partitions=partitions,
        start=_bounds(opts, sub, ending=False),
        end=_bounds(opts, sub, ending=True),
        start_timestamp_strategy=strategy,
        include_headers=bool_option("includeHeaders", opts.get("includeheaders", "false")),
        isolation=isolation,
        max_bytes_per_partition=int_option(
            "maxBytesPerPartition",
            opts.get("maxbytesperpartition", str(DEFAULT_MAX_BYTES_PER_PARTITION)),
            1,
        ),
        max_rows_per_batch=int_option(
            "maxRowsPerBatch", opts.get("maxrowsperbatch", str(DEFAULT_MAX_ROWS_PER_BATCH)), 1
        ),
        catalog=opts.get("catalog") or None,
        metadata_bootstrap=opts.get("metadatabootstrap") or None,
        fail_on_data_loss=bool_option("failOnDataLoss", opts.get("failondataloss", "true")),
        min_partitions=None
        if min_partitions is None
        else int_option("minPartitions", min_partitions, 1),
        limits=_limits(opts),
        ending_given=any(
            k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
        ),
    )
