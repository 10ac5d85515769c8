"""The corruption campaign of issue 13: flip one byte of one object, walk, compare, classify.

A small bucket (:func:`build_fixture`: every chunk transform combination, all producer codecs,
LogAppendTime, committed and aborted transactions, three leader epochs, a re-upload) is built by
the independent encoders of :mod:`tests.integration.independent_bucket`, one folder per topic.
What a reader must get back (:class:`PartitionOracle`) comes from the ``Written`` inputs, never
from decoding the bucket.

One flip XORs one byte of one object (``.log``, ``.indexes`` or ``.rsm-manifest``, the three
objects of a segment in the Aiven layout, :class:`gateway.remote.keys.Suffix`), opens a fresh
in-process service over the damaged bucket (fresh caches, fresh catalog: nothing is shared
between flips), walks every partition of that topic by ``next_offset`` from the log start in
both isolation levels (``max_bytes`` of a few KiB, so a walk takes several pages) and asks
ListOffsets (earliest, latest, max_timestamp and a few timestamps), then classifies:

``same``        every walk and every probe equals the oracle;
``typed_error`` some call raised a typed :class:`~gateway.errors.GatewayError` (not the base,
                not ``internal_error``), and everything returned before it was right;
``wrong``       a returned record or answer differs from the oracle (missing, extra, changed,
                an aborted record under read_committed, wrong log bounds, a walk that does not
                move forward);
``hang``        the flip did not finish within ``flip_timeout`` (its worker is killed);
``untyped``     any other exception, a bare ``GatewayError``/``internal_error``, or a worker
                that died.

Flips run in worker processes (``spawn``), one flip at a time per worker, each on its own copy
of the bucket: the damaged object is written in place and its bytes restored after the flip. A
flip that blocks its event loop (an endless loop in the read path) cannot time itself out, so
the parent kills the worker when a flip overruns and classifies the flip ``hang``; a new worker
takes over on a fresh copy. The timeout only detects hangs: no verdict depends on timing
otherwise (request deadlines are far beyond it).

Event-loop lag: a ticker task sleeps 10 ms in a loop during each flip and records the largest
overshoot (wall clock, what a client feels; machine load inflates it) and the largest CPU time
the loop's thread spent between two ticks (only code on the loop inflates it); both are
reported per flip (the issue asks for no lag above 100 ms). Workers freeze what is alive after
their setup out of the garbage collector's sight (``gc.freeze``), so a full collection does not
add ~50 ms of the harness's own objects to some flip's lag.

``python -m tests.integration.campaign --help`` runs a campaign and prints the outcome table.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import dataclasses
import functools
import gc
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import random
import shutil
import struct
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway.api.statuses import http_status
from gateway.config import Settings
from gateway.deadline import Deadline
from gateway.errors import GatewayError
from gateway.remote import keyring
from gateway.remote.keys import Suffix
from gateway.remote.tiering import SegmentObjects, TieringOptions, upload_segment
from gateway.service.core import GatewayService
from gateway.service.open import open_service
from gateway.service.protocol import OffsetSpec
from gateway.service.types import FetchedRecord, IsolationLevel, OffsetResult
from gateway.storage.filesystem import FilesystemStore
from tests.integration.independent_bucket import (
    KEY_ID,
    KEY_PREFIX,
    IndependentBucket,
    Shape,
    TopicSpec,
    Written,
    WrittenPartition,
    write_independent_bucket,
)

KINDS: Final = (Suffix.LOG.value, Suffix.INDEXES.value, Suffix.MANIFEST.value)
VERDICTS: Final = ("same", "typed_error", "wrong", "hang", "untyped")
_SEVERITY: Final = {v: i for i, v in enumerate(VERDICTS)}
MASKS: Final = (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF)
MAX_BYTES: Final = (1024, 1500, 2048, 3072, 4096)  # a walk of a partition takes 3-12 pages
REQUEST_DEADLINE_S: Final = 600.0  # never reached: a hang is the flip timeout's business
LAG_TICK_S: Final = 0.010
LAG_LIMIT_MS: Final = 100.0  # the issue: no request blocks the event loop longer
BATCH_HEADER: Final = 61  # v2 record batch header, offset field included
BUILD_SEED: Final = "issue-13"


def _topic_id(name: str) -> uuid.UUID:
    return uuid.UUID(bytes=random.Random(f"topic-id/{name}").randbytes(16))


# One topic per chunk transform combination, small chunks so every segment has several.
SMALL_TOPICS: Final = (
    TopicSpec("plain.v1-raw", TieringOptions(chunk_size=700), 2, _topic_id("plain.v1-raw")),
    TopicSpec(
        "zstd-chunks.v2",
        TieringOptions(chunk_size=512, compression=True),
        topic_id=_topic_id("zstd-chunks.v2"),
    ),
    TopicSpec(
        "sealed.eu-1",
        TieringOptions(chunk_size=1024, encrypt_with=KEY_ID),
        topic_id=_topic_id("sealed.eu-1"),
    ),
    TopicSpec(
        "sealed-zstd.v3",
        TieringOptions(chunk_size=400, compression=True, encrypt_with=KEY_ID),
        topic_id=_topic_id("sealed-zstd.v3"),
    ),
)
# Every case of the end-to-end bucket (codecs, transactions, epochs, a re-upload, a record
# larger than any max_bytes used here) in ~12 KB per partition and four segments.
SMALL_SHAPE: Final = Shape(big_value=5000, max_value=40, index_interval_bytes=256)


# --- the oracle: what a reader must get, from the inputs -------------------------------------


@dataclass(frozen=True, slots=True)
class Expected:
    """One data record as a consumer must see it."""

    offset: int
    timestamp: int
    log_append_time: bool
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class PartitionOracle:
    topic: str
    partition: int
    start: int  # the log start offset
    end: int  # one past the last offset (control records included)
    uncommitted: tuple[Expected, ...]  # every data record
    committed: tuple[Expected, ...]  # aborted ones dropped
    aborted: frozenset[int]  # offsets of aborted data records
    stamps: tuple[tuple[int, int, int], ...]  # (offset, timestamp, epoch) of every record
    first_epoch: int
    last_epoch: int

    def records(self, isolation: IsolationLevel) -> tuple[Expected, ...]:
        if isolation is IsolationLevel.READ_COMMITTED:
            return self.committed
        return self.uncommitted

    def page(self, isolation: IsolationLevel, lo: int, hi: int) -> tuple[Expected, ...]:
        """The records a fetch at ``lo`` answering ``next_offset = hi`` must return."""
        records = self.records(isolation)
        offsets = [r.offset for r in records]
        return records[bisect.bisect_left(offsets, lo) : bisect.bisect_left(offsets, hi)]

    def for_timestamp(self, timestamp: int) -> OffsetResult:
        """Kafka's ``findOffsetByTimestamp`` by brute force: the first record (control records
        count) whose timestamp is at least ``timestamp``."""
        for offset, ts, epoch in self.stamps:
            if ts >= timestamp:
                return OffsetResult(offset, ts, epoch)
        return OffsetResult(-1, -1, None)

    def max_timestamp(self) -> OffsetResult:
        top = max(ts for _, ts, _ in self.stamps)
        return self.for_timestamp(top)

    @classmethod
    def of(cls, written: WrittenPartition) -> PartitionOracle:
        def expected(w: Written) -> Expected:
            return Expected(
                w.offset, w.timestamp, w.log_append_time, w.key, w.value, tuple(w.headers), w.epoch
            )

        stamps = tuple(sorted((s.offset, s.timestamp, s.epoch) for s in written.stamps))
        return cls(
            written.topic,
            written.partition,
            0,
            written.next_offset,
            tuple(expected(w) for w in written.records),
            tuple(expected(w) for w in written.committed()),
            frozenset(w.offset for w in written.records if w.aborted),
            stamps,
            stamps[0][2],
            stamps[-1][2],
        )


# --- the fixture -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BucketObject:
    """One object of the fixture: ``key`` is relative to its topic's bucket folder."""

    topic: str
    partition: int
    start_offset: int
    key: str
    kind: str
    size: int
    displaced: bool  # the first upload of the re-uploaded segment
    objects: SegmentObjects


@dataclass(frozen=True, slots=True)
class Fixture:
    root: Path
    buckets: Path  # <buckets>/<topic>/ is one file:// bucket per topic
    key_pair_spec: str
    objects: tuple[BucketObject, ...]
    oracles: dict[str, tuple[PartitionOracle, ...]]  # by topic
    written: IndependentBucket

    def topics(self) -> list[str]:
        return list(self.oracles)

    def __repr__(self) -> str:
        return f"Fixture({str(self.root)!r}, {len(self.objects)} objects)"

    def object(self, topic: str, key: str) -> BucketObject:
        return next(o for o in self.objects if o.topic == topic and o.key == key)


def build_fixture(
    root: Path,
    *,
    topics: tuple[TopicSpec, ...] = SMALL_TOPICS,
    shape: Shape = SMALL_SHAPE,
    seed: str = BUILD_SEED,
) -> Fixture:
    """Write the small bucket under ``root`` (the same seed gives the same bytes, but for
    the mtime in the header of gzip batches)."""
    written = write_independent_bucket(root, topics=topics, shape=shape, seed=seed)
    buckets = root / "buckets"

    async def upload() -> None:
        for objects in written.uploads:
            folder = buckets / objects.key.topic
            folder.mkdir(parents=True, exist_ok=True)
            await upload_segment(FilesystemStore(folder), objects)

    asyncio.run(upload())
    latest: dict[tuple[str, int, int], int] = {}
    for objects in written.uploads:
        meta = objects.manifest.remote_log_segment_metadata
        assert meta is not None
        k = (meta.topic, meta.partition, meta.start_offset)
        latest[k] = max(latest.get(k, -1), meta.event_timestamp_ms)
    found: list[BucketObject] = []
    for objects in written.uploads:
        meta = objects.manifest.remote_log_segment_metadata
        assert meta is not None
        displaced = (
            meta.event_timestamp_ms < latest[(meta.topic, meta.partition, meta.start_offset)]
        )
        for suffix in Suffix:
            key = objects.key.with_suffix(suffix).key
            size = (buckets / meta.topic / key).stat().st_size
            found.append(
                BucketObject(
                    meta.topic,
                    meta.partition,
                    meta.start_offset,
                    key,
                    suffix.value,
                    size,
                    displaced,
                    objects,
                )
            )
    oracles: dict[str, list[PartitionOracle]] = defaultdict(list)
    for (topic, _), part in sorted(written.partitions.items()):
        oracles[topic].append(PartitionOracle.of(part))
    return Fixture(
        root,
        buckets,
        written.key_pair_spec,
        tuple(found),
        {t: tuple(v) for t, v in oracles.items()},
        written,
    )


# --- flips ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Flip:
    index: int
    topic: str
    key: str  # relative to the topic's bucket folder
    kind: str
    position: int
    mask: int  # 0: a control run, nothing changed
    max_bytes: int
    probes: tuple[int, ...]  # ListOffsets timestamps
    sabotage: str = ""  # the harness's self-test only: "block" the loop, "raise", "exit"


def _batch_starts(log: bytes) -> list[int]:
    """Batch positions of an unchanged log (independent framing: offset, then length)."""
    starts, pos = [], 0
    while pos + 12 <= len(log):
        starts.append(pos)
        (length,) = struct.unpack_from(">i", log, pos + 8)
        pos += 12 + length
    return starts


def _probes(rng: random.Random, oracles: Sequence[PartitionOracle]) -> tuple[int, ...]:
    stamps = sorted({ts for o in oracles for _, ts, _ in o.stamps})
    picks = [rng.choice(stamps) + rng.choice((-1, 0, 0, 1)) for _ in range(3)]
    picks.append(rng.choice((stamps[0] - 1, stamps[-1] + 1, rng.randrange(stamps[0], stamps[-1]))))
    return tuple(picks)


def _flip(
    fixture: Fixture, index: int, obj: BucketObject, position: int, mask: int, rng: random.Random
) -> Flip:
    return Flip(
        index,
        obj.topic,
        obj.key,
        obj.kind,
        position,
        mask,
        rng.choice(MAX_BYTES),
        _probes(rng, fixture.oracles[obj.topic]),
    )


def sample_flips(fixture: Fixture, count: int, seed: int = 13) -> list[Flip]:
    """``count`` flips, round robin over (topic, kind) so every cell gets its share; the
    object of a cell at random; the byte at random, except that half the ``.log`` flips of an
    untransformed log land in a batch header (the bytes the CRC does not protect, or that
    frame the batches)."""
    rng = random.Random(seed)
    cells = [(t, k) for t in fixture.topics() for k in KINDS]
    by_cell: dict[tuple[str, str], list[BucketObject]] = defaultdict(list)
    for obj in fixture.objects:
        by_cell[(obj.topic, obj.kind)].append(obj)
    flips: list[Flip] = []
    for i in range(count):
        obj = rng.choice(by_cell[cells[i % len(cells)]])
        objects = obj.objects
        transformed = objects.manifest.compression or objects.manifest.encryption is not None
        if obj.kind == Suffix.LOG.value and not transformed and rng.random() < 0.5:
            start = rng.choice(_batch_starts(objects.log))
            position = min(start + rng.randrange(BATCH_HEADER), obj.size - 1)
        else:
            position = rng.randrange(obj.size)
        flips.append(_flip(fixture, i, obj, position, rng.choice(MASKS), rng))
    return flips


def every_byte_flips(
    fixture: Fixture, objects: Iterable[BucketObject], masks: Sequence[int], seed: int = 13
) -> list[Flip]:
    rng = random.Random(seed)
    flips: list[Flip] = []
    for obj in objects:
        for position in range(obj.size):
            for mask in masks:
                flips.append(_flip(fixture, len(flips), obj, position, mask, rng))
    return flips


def control_flips(fixture: Fixture, seed: int = 13) -> list[Flip]:
    """One unchanged run (mask 0) per topic and max_bytes: the oracle's own check."""
    rng = random.Random(seed)
    flips: list[Flip] = []
    for topic in fixture.topics():
        obj = next(o for o in fixture.objects if o.topic == topic)
        for max_bytes in MAX_BYTES:
            flip = _flip(fixture, len(flips), obj, 0, 0, rng)
            flips.append(dataclasses.replace(flip, max_bytes=max_bytes))
    return flips


def smallest_segment(fixture: Fixture, topic: str) -> list[BucketObject]:
    """The three objects of the topic's smallest interior segment that is read: neither the
    first nor the last of its partition (those are in the sampled flips), not displaced."""
    sizes: Counter[tuple[int, int]] = Counter()
    for o in fixture.objects:
        if o.topic == topic and not o.displaced:
            sizes[(o.partition, o.start_offset)] += o.size
    for partition in {p for p, _ in sizes}:
        starts = sorted(s for p, s in sizes if p == partition)
        del sizes[(partition, starts[0])], sizes[(partition, starts[-1])]
    partition, start = min(sizes, key=lambda k: (sizes[k], k))
    return [
        o
        for o in fixture.objects
        if (o.topic, o.partition, o.start_offset, o.displaced) == (topic, partition, start, False)
    ]


# --- one flip, in a worker ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    verdict: str
    label: str  # the class, e.g. "missing records", "typed:crc_mismatch"
    detail: str


@dataclass(frozen=True, slots=True)
class Outcome:
    flip: Flip
    verdict: str
    problems: tuple[Problem, ...]
    lag_ms: float  # the largest event-loop lag (wall) during the flip (-1: not measured)
    loop_cpu_ms: float  # the largest loop-thread CPU time between two ticks (-1: idem)
    seconds: float
    log: str = ""  # the first warnings the gateway logged

    @property
    def label(self) -> str:
        worst = [p for p in self.problems if p.verdict == self.verdict]
        return worst[0].label if worst else "same records"


def _ranges(offsets: Sequence[int]) -> str:
    out: list[str] = []
    for o in offsets:
        if out and o == int(out[-1].rsplit("-", 1)[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{o}"
        else:
            out.append(str(o))
    return ", ".join(out[:6]) + (" ..." if len(out) > 6 else "")


def _as_expected(r: FetchedRecord) -> Expected:
    rec = r.record
    return Expected(
        r.offset,
        r.timestamp,
        r.log_append_time,
        rec.key,
        rec.value,
        tuple((k, v) for k, v in rec.headers),
        r.leader_epoch,
    )


def _page_problem(
    part: PartitionOracle,
    isolation: IsolationLevel,
    got: Sequence[Expected],
    want: Sequence[Expected],
    where: str,
) -> Problem:
    got_offsets, want_offsets = [r.offset for r in got], [r.offset for r in want]
    missing = sorted(set(want_offsets) - set(got_offsets))
    extra = sorted(set(got_offsets) - set(want_offsets))
    labels, notes = [], []
    if missing:
        labels.append("missing records")
        notes.append(f"missing {len(missing)} ({_ranges(missing)})")
    if extra:
        aborted = [o for o in extra if o in part.aborted]
        if aborted and isolation is IsolationLevel.READ_COMMITTED:
            labels.append("aborted records under read_committed")
            notes.append(f"aborted {len(aborted)} ({_ranges(aborted)})")
        if len(aborted) < len(extra):
            labels.append("extra records")
            notes.append(f"extra {len(extra) - len(aborted)} ({_ranges(extra)})")
    if not labels and got_offsets != want_offsets:
        labels.append("repeated or reordered records")
        notes.append(f"offsets {_ranges(got_offsets)}")
    if not labels:
        fields = set()
        first = None
        for g, w in zip(got, want, strict=True):
            for name in Expected.__slots__:
                if getattr(g, name) != getattr(w, name):
                    fields.add(name)
                    if first is None:
                        first = f"offset {w.offset} {name}: {getattr(g, name)!r:.60}"
                        first += f" != written {getattr(w, name)!r:.60}"
        labels.append("changed " + "/".join(sorted(fields)))
        notes.append(str(first))
    return Problem("wrong", " + ".join(labels), f"{where}: {'; '.join(notes)}")


def _error_problem(exc: BaseException, where: str) -> Problem:
    if (
        isinstance(exc, GatewayError)
        and type(exc) is not GatewayError
        and exc.code != "internal_error"
    ):
        return Problem(
            "typed_error",
            f"typed:{exc.code}",
            f"{where}: {http_status(exc)} {exc.code}: {exc}"[:400],
        )
    tb = "".join(traceback.format_exception(exc)[-4:])
    return Problem("untyped", f"untyped:{type(exc).__name__}", f"{where}: {tb}"[:1500])


class _Lag:
    """Event-loop lag while it runs, measured two ways by a task that sleeps 10 ms in a loop.

    ``wall``: the largest overshoot of the sleep (the issue's measure; on a loaded machine the
    OS alone can make it exceed 100 ms). ``cpu``: the largest CPU time the loop's thread spent
    between two wake-ups of the task, which only code running on the loop can make large (a
    thread waiting for a core or for the GIL uses none), so it is robust to machine load but
    blind to a loop blocked without using the CPU (a sleep, a lock)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before, cpu_before = loop.time(), time.thread_time()
            await asyncio.sleep(LAG_TICK_S)
            self.wall = max(self.wall, loop.time() - before - LAG_TICK_S)
            self.cpu = max(self.cpu, time.thread_time() - cpu_before)


class _Warnings(logging.Handler):
    """Keeps the gateway's warnings of the current flip (and spots a failed first scan)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def scan_failure(self) -> BaseException | None:
        """The exception the first scan failed with: while a service waits to be ready only
        its first scan runs, and ``open_service``'s module logs a warning with the exception
        when that scan fails (the scanner's own warnings, about one manifest, do not count:
        the scan goes on)."""
        for record in self.records:
            if record.name == "gateway.service.core" and isinstance(record.args, tuple):
                for arg in record.args:
                    if isinstance(arg, BaseException):
                        return arg
        return None

    def text(self) -> str:
        lines = []
        for record in self.records[:3]:
            with contextlib.suppress(Exception):
                lines.append(f"{record.name}: {record.getMessage()}"[:300])
        return "\n".join(lines)


_WARNINGS = _Warnings()


def prepare_process() -> None:
    """Once per process that runs flips: keep the gateway's warnings per flip (not on
    stderr), and parse the RSA key file once. The key file is not part of the bucket (no
    flip touches it) and a parsed key pair holds no state; pycryptodome's primality checks on
    import cost ~40 ms, half of a flip."""
    logger = logging.getLogger("gateway")
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    logger.handlers = [_WARNINGS]
    read = getattr(keyring, "_read_key_file", None)
    if read is not None and not hasattr(read, "cache_info"):
        keyring._read_key_file = functools.cache(read)


def service_settings(bucket_folder: Path, key_pair_spec: str) -> Settings:
    return Settings(
        store=bucket_folder.as_uri(),
        key_prefix=KEY_PREFIX,
        key_pairs=[key_pair_spec],
        retry_max_attempts=2,
        retry_base_delay_s=0.001,
        retry_max_delay_s=0.01,
        retry_attempt_timeout_s=REQUEST_DEADLINE_S,
    )


@contextlib.asynccontextmanager
async def fresh_service(settings: Settings) -> AsyncIterator[GatewayService | BaseException]:
    """An open service once its first scan is done, or the exception its first scan failed
    with (the service stays unready then; it retries in the background)."""
    async with open_service(settings) as svc:
        while not svc.ready():
            failed = _WARNINGS.scan_failure()
            if failed is not None:
                yield failed
                return
            await asyncio.sleep(0.002)
        yield svc


async def walk(
    svc: GatewayService,
    part: PartitionOracle,
    isolation: IsolationLevel,
    max_bytes: int,
    step: Callable[[str], None],
) -> list[Problem]:
    """Fetch from the log start by ``next_offset`` to the written log end; every page must
    hold exactly the written records in ``[offset, next_offset)``. The walk ends at the first
    error or wrong page; wrong log bounds are noted once and the walk goes on (to show what
    the offsets past a too-early log end give)."""
    offset = part.start
    name = f"{part.topic}-{part.partition}"
    problems: list[Problem] = []
    while offset < part.end:
        where = f"fetch {name} {isolation.value} max_bytes={max_bytes} offset={offset}"
        step(where)
        try:
            result = await svc.fetch(
                part.topic,
                part.partition,
                offset,
                max_bytes=max_bytes,
                isolation=isolation,
                deadline=Deadline.after(REQUEST_DEADLINE_S),
            )
            records = await svc.decode(result, offset, isolation)
        except Exception as exc:  # classified: typed or not
            return [*problems, _error_problem(exc, where)]
        got = [_as_expected(r) for r in records]
        nxt = result.next_offset
        want = part.page(isolation, offset, nxt)
        if tuple(got) != want:
            return [*problems, _page_problem(part, isolation, got, want, f"{where} next={nxt}")]
        bounds = (result.log_start_offset, result.log_end_offset)
        if bounds != (part.start, part.end) and not problems:
            problems.append(
                Problem(
                    "wrong",
                    "wrong log bounds",
                    f"{where}: log [{bounds[0]}, {bounds[1]}) != written [{part.start}, "
                    f"{part.end})",
                )
            )
        if nxt <= offset:
            return [*problems, Problem("wrong", "no progress", f"{where}: next_offset={nxt}")]
        if nxt > part.end:
            past = Problem("wrong", "next_offset past the log end", f"{where}: next_offset={nxt}")
            return [*problems, past]
        offset = nxt
    return problems


async def _probe(
    svc: GatewayService, part: PartitionOracle, probes: Sequence[int], step: Callable[[str], None]
) -> list[Problem]:
    name = f"{part.topic}-{part.partition}"
    wanted: list[tuple[OffsetSpec, OffsetResult]] = [
        ("earliest", OffsetResult(part.start, -1, part.first_epoch)),
        ("latest", OffsetResult(part.end, -1, part.last_epoch)),
        ("max_timestamp", part.max_timestamp()),
        *((t, part.for_timestamp(t)) for t in probes),
    ]
    problems: list[Problem] = []
    for spec, want in wanted:
        where = f"list_offsets {name} {spec}"
        step(where)
        try:
            got = await svc.list_offsets(
                part.topic, part.partition, spec, Deadline.after(REQUEST_DEADLINE_S)
            )
        except Exception as exc:
            problems.append(_error_problem(exc, where))
            continue
        if (got.offset, got.timestamp, got.leader_epoch) != (
            want.offset,
            want.timestamp,
            want.leader_epoch,
        ):
            label = "wrong list_offsets " + ("by timestamp" if isinstance(spec, int) else spec)
            problems.append(Problem("wrong", label, f"{where}: {got} != written {want}"))
    return problems


def _sabotage(kind: str) -> None:
    """What the harness's self-test asks a flip to do wrong, on the event loop."""
    if kind == "block":
        time.sleep(3600)  # a blocked loop: only the parent's timeout can end it
    elif kind == "raise":
        raise RuntimeError("sabotage: an exception that is not a GatewayError")
    elif kind == "exit":
        os._exit(3)


async def check_flip(
    bucket_folder: Path,
    key_pair_spec: str,
    flip: Flip,
    oracles: Sequence[PartitionOracle],
    step: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """Open a fresh service over ``bucket_folder`` (already damaged), walk and probe every
    partition in ``oracles``, classify."""
    started = time.perf_counter()
    _WARNINGS.records.clear()
    lag = _Lag()
    ticker = asyncio.create_task(lag.tick())
    problems: list[Problem] = []
    try:
        step("open the service and scan")
        async with fresh_service(service_settings(bucket_folder, key_pair_spec)) as svc:
            if isinstance(svc, BaseException):
                problem = _error_problem(svc, "first bucket scan")
                problems.append(dataclasses.replace(problem, label=problem.label + " (not ready)"))
            else:
                _sabotage(flip.sabotage)
                for part in oracles:
                    for isolation in IsolationLevel:
                        problems += await walk(svc, part, isolation, flip.max_bytes, step)
                    problems += await _probe(svc, part, flip.probes, step)
            step("close the service")
    except Exception as exc:
        problems.append(_error_problem(exc, "service"))
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    verdict = max((p.verdict for p in problems), key=_SEVERITY.__getitem__, default="same")
    return Outcome(
        flip,
        verdict,
        tuple(problems),
        lag.wall * 1000,
        lag.cpu * 1000,
        time.perf_counter() - started,
        _WARNINGS.text(),
    )


def apply_flip(path: Path, flip: Flip) -> bytes:
    """Damage the object at ``path``; its original bytes, to restore."""
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[flip.position] ^= flip.mask
    path.write_bytes(bytes(damaged))
    return original


def check_service(
    folder: Path,
    key_pair_spec: str,
    flip: Flip,
    oracles: Sequence[PartitionOracle],
    step: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """:func:`check_flip` run to its end: the service's check of one flip, as
    :func:`check_worker` calls it."""
    return asyncio.run(check_flip(folder, key_pair_spec, flip, oracles, step))


def check_worker(
    check: Callable[..., Outcome],
    conn: multiprocessing.connection.Connection,
    pristine: str,
    workdir: str,
    key_pair_spec: str,
    oracles_file: str,
    step_buffer: Any,
) -> None:
    """A worker (:func:`run_campaign` starts it with its ``check``): its own copy of the
    buckets; flips one at a time as the parent sends them, each answered by the blocking
    ``check(folder, key_pair_spec, flip, oracles, step)``.

    Large inputs come through a file: what ``spawn`` pipes to a child must stay small, or a
    child dying before it has read it all leaves the parent blocked on the pipe."""
    prepare_process()
    oracles: dict[str, tuple[PartitionOracle, ...]] = pickle.loads(Path(oracles_file).read_bytes())
    # What is alive now (imports, the oracle) lives until the end: out of the collector's
    # sight, or each gen-2 collection walks ~100k objects for 50-60 ms of the loop's time,
    # which the lag measure would pin on whichever flip it fell in.
    gc.collect()
    gc.freeze()
    shutil.copytree(pristine, workdir)
    size = len(step_buffer)

    def step(text: str) -> None:
        step_buffer.value = text.encode()[: size - 1]

    conn.send("ready")
    while True:
        flip = conn.recv()
        if flip is None:
            break
        _WARNINGS.records.clear()  # prepare_process keeps the gateway's warnings per flip
        folder = Path(workdir) / flip.topic
        path = folder / flip.key
        original = apply_flip(path, flip)
        try:
            outcome = check(folder, key_pair_spec, flip, oracles[flip.topic], step)
        finally:
            path.write_bytes(original)
        conn.send(outcome)
    conn.close()


# --- the parent: workers, hangs, the report ----------------------------------------------------


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    step: Any
    workdir: Path
    ready: bool = False
    flip: Flip | None = None
    sent_at: float = 0.0


class WorkerStartError(RuntimeError):
    pass


def run_campaign(
    fixture: Fixture,
    flips: Sequence[Flip],
    *,
    workers: int | None = None,
    flip_timeout: float = 30.0,
    start_timeout: float = 300.0,
    progress: Callable[[int, int], None] | None = None,
    check: Callable[..., Outcome] = check_service,
) -> list[Outcome]:
    """Run every flip in worker processes; one outcome per flip, in flip order.

    ``check``: what answers a flip in a worker (:func:`check_worker`), a module-level
    function (picklable) called as :func:`check_service` is: the service's by default, another
    reader of the bucket's (:mod:`tests.integration.campaign_readers`,
    :mod:`tests.integration.campaign_listener`)."""
    ctx = multiprocessing.get_context("spawn")
    count = max(1, min(workers or os.cpu_count() or 2, len(flips) or 1))
    work_root = Path(tempfile.mkdtemp(prefix="workers-", dir=fixture.root))
    oracles_file = work_root / "oracles.pickle"
    oracles_file.write_bytes(pickle.dumps(fixture.oracles))
    generation = 0

    def start() -> _Worker:
        nonlocal generation
        generation += 1
        parent, child = ctx.Pipe()
        step = ctx.Array("c", 240, lock=False)
        workdir = work_root / f"w{generation}"
        process = ctx.Process(
            target=functools.partial(check_worker, check),
            args=(
                child,
                str(fixture.buckets),
                str(workdir),
                fixture.key_pair_spec,
                str(oracles_file),
                step,
            ),
            daemon=True,
            name=f"campaign-worker-{generation}",
        )
        process.start()
        child.close()
        return _Worker(process, parent, step, workdir, sent_at=time.monotonic())

    def stop(worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(10)
        worker.conn.close()
        shutil.rmtree(worker.workdir, ignore_errors=True)

    pending = deque(flips)
    outcomes: dict[int, Outcome] = {}
    pool = [start() for _ in range(count)]
    try:
        while len(outcomes) < len(flips):
            for worker in pool:
                if worker.ready and worker.flip is None and pending:
                    worker.flip = pending.popleft()
                    worker.sent_at = time.monotonic()
                    worker.conn.send(worker.flip)
            conns = [w.conn for w in pool]
            for conn in multiprocessing.connection.wait(conns, timeout=0.25):
                worker = next(w for w in pool if w.conn is conn)
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message == "ready":
                    worker.ready = True
                elif isinstance(message, Outcome):
                    outcomes[message.flip.index] = message
                    worker.flip = None
                    if progress is not None:
                        progress(len(outcomes), len(flips))
                else:  # the worker died
                    code = worker.process.exitcode
                    if worker.flip is None:
                        raise WorkerStartError(f"a campaign worker died (exit code {code})")
                    outcomes[worker.flip.index] = Outcome(
                        worker.flip,
                        "untyped",
                        (
                            Problem(
                                "untyped",
                                "worker process died",
                                f"exit code {code}; last step: {worker.step.value.decode()}",
                            ),
                        ),
                        -1.0,
                        -1.0,
                        time.monotonic() - worker.sent_at,
                    )
                    stop(worker)
                    pool[pool.index(worker)] = start()
            now = time.monotonic()
            for i, worker in enumerate(pool):
                if worker.flip is not None and now - worker.sent_at > flip_timeout:
                    last = worker.step.value.decode(errors="replace")
                    outcomes[worker.flip.index] = Outcome(
                        worker.flip,
                        "hang",
                        (
                            Problem(
                                "hang",
                                "hang",
                                f"no answer in {flip_timeout:.0f} s; last step: {last}",
                            ),
                        ),
                        -1.0,
                        -1.0,
                        now - worker.sent_at,
                    )
                    stop(worker)
                    pool[i] = start()
                    if progress is not None:
                        progress(len(outcomes), len(flips))
                elif not worker.ready and now - worker.sent_at > start_timeout:
                    raise WorkerStartError(f"a campaign worker did not start in {start_timeout} s")
    finally:
        for worker in pool:
            if worker.process.is_alive() and worker.flip is None and worker.ready:
                with contextlib.suppress(OSError):
                    worker.conn.send(None)
                worker.process.join(5)
            stop(worker)
        shutil.rmtree(work_root, ignore_errors=True)
    return [outcomes[f.index] for f in flips]


# --- describing a byte, for the report --------------------------------------------------------

_HEADER_FIELDS: Final = (
    (0, 8, "baseOffset"),
    (8, 12, "batchLength"),
    (12, 16, "partitionLeaderEpoch"),
    (16, 17, "magic"),
    (17, 21, "crc"),
    (21, 23, "attributes"),
    (23, 27, "lastOffsetDelta"),
    (27, 35, "baseTimestamp"),
    (35, 43, "maxTimestamp"),
    (43, 51, "producerId"),
    (51, 53, "producerEpoch"),
    (53, 57, "baseSequence"),
    (57, 61, "recordCount"),
)


def describe(fixture: Fixture, flip: Flip) -> str:
    """Where the flipped byte is: which segment, and what the byte is in its object."""
    obj = fixture.object(flip.topic, flip.key)
    objects = obj.objects
    manifest = objects.manifest
    transformed = manifest.compression or manifest.encryption is not None
    meta = manifest.remote_log_segment_metadata
    assert meta is not None
    where = (
        f"{flip.topic}-{obj.partition} segment [{meta.start_offset}, {meta.end_offset}]"
        f"{' (displaced upload)' if obj.displaced else ''} .{flip.kind} byte {flip.position}/"
        f"{obj.size} ^{flip.mask:#04x}"
    )
    pos = flip.position
    if flip.kind == Suffix.LOG.value:
        if transformed:
            for chunk in manifest.chunk_index.chunks():
                if chunk.transformed_position <= pos < chunk.transformed_end:
                    return f"{where}: stored chunk {chunk.id} (+{pos - chunk.transformed_position})"
            return where
        starts = _batch_starts(objects.log)
        start = starts[bisect.bisect_right(starts, pos) - 1]
        base = struct.unpack_from(">q", objects.log, start)[0]
        rel = pos - start
        name = next(
            (n for lo, hi, n in _HEADER_FIELDS if lo <= rel < hi), f"records +{rel - BATCH_HEADER}"
        )
        return f"{where}: batch at byte {start} (base offset {base}), {name}"
    if flip.kind == Suffix.INDEXES.value:
        transformed = manifest.encryption is not None  # index pieces are never compressed
        pieces = manifest.segment_indexes
        for piece_name, piece, entry in (
            ("offset index", pieces.offset, (8, ("relativeOffset", "position"), 4)),
            ("time index", pieces.timestamp, (12, ("timestamp", "relativeOffset"), 8)),
            ("producer snapshot", pieces.producer_snapshot, None),
            ("leader-epoch checkpoint", pieces.leader_epoch, None),
            (
                "transaction index",
                pieces.transaction,
                (34, ("version+producerId", "firstOffset", "lastOffset", "lastStableOffset"), 0),
            ),
        ):
            if piece is None or not piece.position <= pos < piece.end:
                continue
            rel = pos - piece.position
            if transformed or entry is None:
                return f"{where}: {piece_name} +{rel}" + (" (transformed)" if transformed else "")
            size, names, split = entry
            n, inner = divmod(rel, size)
            if piece_name == "transaction index":
                fname = "version+producerId" if inner < 10 else names[1 + (inner - 10) // 8]
            else:
                fname = names[0] if inner < split else names[1]
            return f"{where}: {piece_name} entry {n} {fname}"
        return where
    text = objects.manifest_bytes()
    lo = max(0, pos - 24)
    was, now = bytes([text[pos]]), bytes([text[pos] ^ flip.mask])
    flipped = f"[{was.decode(errors='replace')}->{now.decode('latin-1')!r}]"
    context = text[lo:pos].decode(errors="replace") + flipped
    return f"{where}: ...{context}{text[pos + 1 : pos + 16].decode(errors='replace')}..."


# --- the report ------------------------------------------------------------------------------


def table(outcomes: Sequence[Outcome]) -> str:
    """Counts per (topic, kind) and in total, as a Markdown table; then lag and labels."""
    rows: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        rows[(o.flip.topic, o.flip.kind)][o.verdict] += 1
        rows[("all", "all")][o.verdict] += 1
    lines = [
        "| topic | object | flips | " + " | ".join(VERDICTS) + " |",
        "|---|---|---|" + "---|" * len(VERDICTS),
    ]
    for (topic, kind), counts in sorted(rows.items(), key=lambda kv: kv[0] == ("all", "all")):
        total = sum(counts.values())
        cells = " | ".join(str(counts[v]) for v in VERDICTS)
        lines.append(f"| {topic} | {kind} | {total} | {cells} |")
    lags = [o.lag_ms for o in outcomes if o.lag_ms >= 0]
    if lags:
        cpu = [o.loop_cpu_ms for o in outcomes if o.loop_cpu_ms >= 0]
        lines.append(
            f"\nevent-loop lag (wall): max {max(lags):.0f} ms, {lagging(outcomes)} flips above "
            f"{LAG_LIMIT_MS:.0f} ms; loop-thread CPU between ticks: max {max(cpu):.0f} ms, "
            f"{lagging(outcomes, cpu=True)} flips above {LAG_LIMIT_MS:.0f} ms "
            f"({len(lags)} flips measured)"
        )
    labels: Counter[tuple[str, str]] = Counter()
    for o in outcomes:
        for p in {(p.verdict, p.label) for p in o.problems}:
            labels[p] += 1
    if labels:
        lines.append("\nflips per problem class (a flip may show several):")
        for (verdict, label), n in sorted(
            labels.items(), key=lambda kv: (-_SEVERITY[kv[0][0]], -kv[1])
        ):
            lines.append(f"  {verdict:11} {n:5}  {label}")
    return "\n".join(lines)


def examples(
    fixture: Fixture,
    outcomes: Sequence[Outcome],
    verdicts: Sequence[str] = ("wrong", "hang", "untyped"),
    per_class: int = 3,
) -> str:
    """A few flips of every problem class of ``verdicts`` (a flip may be in several)."""
    by_class: dict[tuple[str, str], list[tuple[Outcome, Problem]]] = defaultdict(list)
    for o in outcomes:
        seen: set[tuple[str, str]] = set()
        for p in o.problems:
            if p.verdict in verdicts and (p.verdict, p.label) not in seen:
                seen.add((p.verdict, p.label))
                by_class[(p.verdict, p.label)].append((o, p))
    lines: list[str] = []
    for (verdict, label), found in sorted(
        by_class.items(), key=lambda kv: (-_SEVERITY[kv[0][0]], -len(kv[1]))
    ):
        lines.append(f"\n{verdict}: {label} ({len(found)} flips)")
        for o, problem in found[:per_class]:
            lines.append(f"  - flip #{o.flip.index}: {describe(fixture, o.flip)}")
            lines.append("      " + problem.detail.replace("\n", "\n      "))
    return "\n".join(lines)


def lagging(outcomes: Sequence[Outcome], *, cpu: bool = False) -> int:
    """Flips whose event-loop lag (or loop-thread CPU between ticks) exceeded 100 ms."""
    return sum(1 for o in outcomes if (o.loop_cpu_ms if cpu else o.lag_ms) > LAG_LIMIT_MS)


def summary(outcomes: Sequence[Outcome]) -> Counter[str]:
    return Counter(o.verdict for o in outcomes)


def report(fixture: Fixture, outcomes: Sequence[Outcome]) -> str:
    """The table of verdicts and an example of each problem class."""
    return f"{table(outcomes)}\n{examples(fixture, outcomes)}"


def assert_no_bad_answer(fixture: Fixture, outcomes: Sequence[Outcome]) -> Counter[str]:
    """A campaign's verdict: no wrong answer, no hang, nothing untyped (the report printed
    and in the failure); the counts per verdict."""
    text = report(fixture, outcomes)
    print(text)
    counts = summary(outcomes)
    assert (counts["wrong"], counts["hang"], counts["untyped"]) == (0, 0, 0), text
    return counts


def _json(outcome: Outcome) -> dict[str, Any]:
    return {
        "flip": dataclasses.asdict(outcome.flip),
        "verdict": outcome.verdict,
        "problems": [dataclasses.asdict(p) for p in outcome.problems],
        "lag_ms": round(outcome.lag_ms, 1),
        "loop_cpu_ms": round(outcome.loop_cpu_ms, 1),
        "seconds": round(outcome.seconds, 3),
        "log": outcome.log,
    }


@contextlib.contextmanager
def fixture_in(directory: Path | None) -> Iterator[Fixture]:
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        yield build_fixture(Path(tempfile.mkdtemp(prefix="campaign-", dir=directory)))
        return
    with tempfile.TemporaryDirectory(prefix="campaign-") as tmp:
        yield build_fixture(Path(tmp))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.integration.campaign",
        description="Issue 13's corruption campaign: flip bytes, walk, classify, print the table.",
    )
    parser.add_argument("--flips", type=int, default=2000, help="sampled flips (default 2000)")
    parser.add_argument("--seed", type=int, default=13, help="sampling seed (default 13)")
    parser.add_argument(
        "--every-byte",
        metavar="TOPIC",
        help="instead of sampling: every byte of TOPIC's smallest segment (masks 01, 80, ff)",
    )
    parser.add_argument("--only", type=int, action="append", help="run only flip #N (repeatable)")
    parser.add_argument("--workers", type=int, default=None, help="default: the CPU count")
    parser.add_argument("--flip-timeout", type=float, default=30.0)
    parser.add_argument("--examples", type=int, default=3, help="examples per failure class")
    parser.add_argument("--json", type=Path, help="write every outcome to this file")
    parser.add_argument("--keep", type=Path, help="build the bucket under this folder and keep it")
    args = parser.parse_args(argv)
    with fixture_in(args.keep) as fixture:
        if args.every_byte:
            flips = every_byte_flips(
                fixture, smallest_segment(fixture, args.every_byte), (0x01, 0x80, 0xFF), args.seed
            )
        else:
            flips = sample_flips(fixture, args.flips, args.seed)
        if args.only:
            flips = [flips[i] for i in args.only]
        started = time.monotonic()

        def progress(done: int, total: int) -> None:
            if done % 100 == 0 or done == total:
                print(
                    f"  {done}/{total} flips, {time.monotonic() - started:.0f} s", file=sys.stderr
                )

        outcomes = run_campaign(
            fixture, flips, workers=args.workers, flip_timeout=args.flip_timeout, progress=progress
        )
        elapsed = time.monotonic() - started
        print(
            f"{len(outcomes)} flips in {elapsed:.1f} s "
            f"(seed {args.seed}, bucket seed {BUILD_SEED!r})\n"
        )
        print(table(outcomes))
        print(examples(fixture, outcomes, per_class=args.examples))
        if args.json is not None:
            args.json.write_text(json.dumps([_json(o) for o in outcomes], indent=1, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
