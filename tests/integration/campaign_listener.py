"""The corruption campaign through the Kafka listener (issue 19): what a Kafka consumer gets
from a damaged bucket is the records as written, or an error code, never other records.

The harness is :mod:`tests.integration.campaign`'s (each flip XORs one byte of one object of a
copy of the small bucket; a worker that overruns ``flip_timeout`` is killed and its flip called
``hang``); per flip, :func:`check_listener` opens a fresh service over the damaged copy, starts
a :class:`~gateway.listener.server.KafkaListener` on it (loopback, port 0) and speaks the wire
protocol to it as a consumer does: kafka-python's request and response classes, and
kafka-python's record reader for the batches (not the gateway's decoder), with the batch CRC
checked (librdkafka's default is not to check it: a batch with a bad CRC served is a wrong
answer here, whatever the client would do).

For every partition of the flipped topic, in both isolation levels: Fetch v12 from the log
start, at the flip's ``max_bytes``, to the written end, moving by the last batch's next offset
as a consumer does, dropping records before its position in the first batch, and for
read_committed dropping control batches and the batches of aborted transactions by the
answer's ``aborted_transactions`` (the Java consumer's algorithm). Each answer must hold the
written records in ``[offset, next)``, with the written log bounds (``high_watermark``, the
log start). Then ListOffsets v7 (what librdkafka negotiates): EARLIEST, LATEST, MAX_TIMESTAMP
and the flip's probe timestamps, each against the oracle (offset, timestamp, leader epoch).

Verdicts: ``same``; ``typed_error`` (a partition answered a Kafka error code other than
``UNKNOWN_SERVER_ERROR``: a consumer sees the error, nothing silently wrong); ``wrong`` (other
records, a bad CRC, wrong bounds, no progress before the end, ``OFFSET_OUT_OF_RANGE`` at an
offset inside the written log: a consumer acts on it silently, by ``auto.offset.reset``);
``untyped``
(``UNKNOWN_SERVER_ERROR``, the connection closed, an exception in the check); ``hang``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.record.memory_records import MemoryRecords

from gateway.config import Settings
from gateway.listener import codes
from gateway.listener.context import Context
from gateway.listener.server import KafkaListener
from gateway.service.admission import ByteBudget
from gateway.service.protocol import Service
from gateway.service.types import IsolationLevel, OffsetResult
from tests.integration.campaign import (
    _SEVERITY,
    _WARNINGS,
    Expected,
    Flip,
    Outcome,
    PartitionOracle,
    Problem,
    _error_problem,
    _page_problem,
    fresh_service,
    service_settings,
)

FETCH_VERSION: Final = 12
LIST_OFFSETS_VERSION: Final = 7  # librdkafka 2.16's
_CODE_NAMES: Final = {v: k for k, v in vars(codes).items() if k.isupper() and isinstance(v, int)}
_ABORT: Final = 0  # a control record's type (its key: version int16, type int16)


class ConnectionClosedError(Exception):
    """The listener closed the connection instead of answering."""


class Wire:
    """One consumer connection to the listener: a request, then its response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int) -> Wire:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def ask(self, message: Any, response_class: Any, version: int) -> Any:
        message.with_header(correlation_id=next(self._ids), client_id="campaign")
        payload = bytes(message.encode(header=True))
        self._writer.write(struct.pack(">i", len(payload)) + payload)
        await self._writer.drain()
        try:
            (size,) = struct.unpack(">i", await self._reader.readexactly(4))
            body = await self._reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise ConnectionClosedError("the listener closed the connection") from exc
        return response_class.decode(body, version=version, header=True)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


async def fetch(
    wire: Wire, part: PartitionOracle, offset: int, max_bytes: int, isolation: IsolationLevel
) -> Any:
    """One partition's answer to a consumer's Fetch v12 (``max_wait_ms`` 0: the listener then
    waits for the first answer, never sending nothing while data is on its way)."""
    r = FetchRequest[FETCH_VERSION]
    entry = r.FetchTopic.FetchPartition(
        partition=part.partition, current_leader_epoch=-1, fetch_offset=offset,
        last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes,
    )  # fmt: skip
    message = r(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
        isolation_level=1 if isolation is IsolationLevel.READ_COMMITTED else 0,
        session_id=0, session_epoch=-1,
        topics=[r.FetchTopic(topic=part.topic, partitions=[entry])],
        forgotten_topics_data=[], rack_id="",
    )  # fmt: skip
    response = await wire.ask(message, FetchResponse[FETCH_VERSION], FETCH_VERSION)
    (topic,) = response.responses
    (answer,) = topic.partitions
    return answer


@dataclass(frozen=True, slots=True)
class Decoded:
    records: list[Expected]  # what a consumer returns, before its position dropped
    next_offset: int | None  # past the last batch; None: no batch
    bad: str = ""  # a batch that fails its CRC: the answer is wrong


def consume(data: bytes | None, aborted: Sequence[Any] | None, committed: bool) -> Decoded:
    """What a consumer makes of a partition's record bytes (kafka-python's reader): every
    batch's CRC checked; control batches dropped; with ``committed``, the batches of the
    aborted transactions dropped (a producer is aborted from its ``first_offset`` in
    ``aborted`` to its ABORT marker)."""
    records: list[Expected] = []
    pending = sorted(aborted or [], key=lambda t: t.first_offset)
    aborting: set[int] = set()
    next_offset = None
    try:
        batches = MemoryRecords(data or b"")
        while (batch := batches.next_batch()) is not None:
            if not batch.validate_crc():
                return Decoded(records, next_offset, f"batch at {batch.base_offset}: bad CRC")
            next_offset = _batch(batch, records, pending, aborting, committed)
    except Exception as exc:  # kafka-python cannot read what was served
        return Decoded(records, next_offset, f"undecodable records: {exc!r}")
    return Decoded(records, next_offset)


def _batch(
    batch: Any, records: list[Expected], pending: list[Any], aborting: set[int], committed: bool
) -> int:
    """One batch into ``records`` as a consumer takes it (:func:`consume`); its next offset."""
    if committed:
        while pending and pending[0].first_offset <= batch.last_offset:
            aborting.add(pending.pop(0).producer_id)
    if batch.is_control_batch:
        for marker in batch:
            if struct.unpack(">hh", marker.key)[1] == _ABORT:
                aborting.discard(batch.producer_id)
        return int(batch.next_offset)
    if committed and batch.is_transactional and batch.producer_id in aborting:
        return int(batch.next_offset)
    append_time = batch.timestamp_type == 1
    for r in batch:
        headers = tuple((k, v) for k, v in r.headers)
        records.append(Expected(r.offset, r.timestamp, append_time, r.key, r.value, headers,
                                batch.leader_epoch))  # fmt: skip
    return int(batch.next_offset)


def code_problem(code: int, where: str) -> Problem:
    """A partition answered ``code``: typed (the consumer sees it), but for
    ``UNKNOWN_SERVER_ERROR``, which says nothing of what went wrong."""
    name = _CODE_NAMES.get(code, str(code))
    verdict = "untyped" if code == codes.UNKNOWN_SERVER_ERROR else "typed_error"
    return Problem(verdict, f"kafka:{name}", f"{where}: error {code} {name}")


async def walk(
    wire: Wire,
    part: PartitionOracle,
    isolation: IsolationLevel,
    max_bytes: int,
    step: Callable[[str], None],
) -> list[Problem]:
    """A consumer's walk from the log start to the written end (module docstring); it ends at
    the first error or wrong answer. Wrong bounds are noted once and the walk goes on."""
    offset = part.start
    committed = isolation is IsolationLevel.READ_COMMITTED
    name = f"{part.topic}-{part.partition}"
    problems: list[Problem] = []
    while offset < part.end:
        where = f"Fetch {name} {isolation.value} max_bytes={max_bytes} offset={offset}"
        step(where)
        answer = await fetch(wire, part, offset, max_bytes, isolation)
        if answer.error_code == codes.OFFSET_OUT_OF_RANGE:  # inside the log: a consumer resets
            said = f"[{answer.log_start_offset}, {answer.high_watermark})"
            detail = f"{where}: OFFSET_OUT_OF_RANGE, log {said}, written [{part.start}, {part.end})"
            return [*problems, Problem("wrong", "out of range inside the log", detail)]
        if answer.error_code != codes.NONE:
            return [*problems, code_problem(answer.error_code, where)]
        got = consume(answer.records, answer.aborted_transactions, committed)
        if got.bad:
            return [*problems, Problem("wrong", "bad CRC served", f"{where}: {got.bad}")]
        bounds = (answer.log_start_offset, answer.high_watermark)
        if bounds != (part.start, part.end) and not problems:
            written = f"[{part.start}, {part.end})"
            detail = f"{where}: log [{bounds[0]}, {bounds[1]}) != written {written}"
            problems.append(Problem("wrong", "wrong log bounds", detail))
        nxt = got.next_offset
        if nxt is None:  # nothing: only at a last stable offset with nothing more to read
            rest = part.page(isolation, offset, part.end)
            if committed and answer.last_stable_offset == offset and not rest:
                return problems
            return [*problems, Problem("wrong", "no progress", f"{where}: no records, no "
                                       f"error; {len(rest)} written records left")]  # fmt: skip
        records = [r for r in got.records if r.offset >= offset]  # as a consumer at `offset`
        want = part.page(isolation, offset, nxt)
        if tuple(records) != want:
            return [*problems, _page_problem(part, isolation, records, want, f"{where} next={nxt}")]
        if nxt <= offset:
            return [*problems, Problem("wrong", "no progress", f"{where}: next offset {nxt}")]
        if nxt > part.end:
            return [*problems, Problem("wrong", "next offset past the log end",
                                       f"{where}: next offset {nxt}")]  # fmt: skip
        offset = nxt
    return problems


async def probe(
    wire: Wire, part: PartitionOracle, probes: Sequence[int], step: Callable[[str], None]
) -> list[Problem]:
    """ListOffsets v7, one request per timestamp (a partition named twice in one request is
    INVALID_REQUEST): each answer against the oracle."""
    r = ListOffsetsRequest[LIST_OFFSETS_VERSION]
    name = f"{part.topic}-{part.partition}"
    wanted = [
        (-2, OffsetResult(part.start, -1, part.first_epoch)),
        (-1, OffsetResult(part.end, -1, part.last_epoch)),
        (-3, part.max_timestamp()),
        *((t, part.for_timestamp(t)) for t in probes),
    ]
    problems: list[Problem] = []
    for timestamp, want in wanted:
        where = f"ListOffsets {name} {timestamp}"
        step(where)
        entry = r.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=part.partition, current_leader_epoch=-1, timestamp=timestamp
        )
        message = r(replica_id=-1, isolation_level=0,
                    topics=[r.ListOffsetsTopic(name=part.topic, partitions=[entry])])  # fmt: skip
        response = await wire.ask(message, ListOffsetsResponse[LIST_OFFSETS_VERSION],
                                  LIST_OFFSETS_VERSION)  # fmt: skip
        (answer,) = response.topics[0].partitions
        if answer.error_code != codes.NONE:
            problems.append(code_problem(answer.error_code, where))
            continue
        epoch = -1 if want.leader_epoch is None else want.leader_epoch
        expected = (want.offset, want.timestamp, epoch)
        got = (answer.offset, answer.timestamp, answer.leader_epoch)
        if got != expected:
            label = "wrong ListOffsets " + ("by timestamp" if timestamp >= 0 else str(timestamp))
            problems.append(Problem("wrong", label, f"{where}: {got} != written {expected}"))
    return problems


async def read_through_listener(
    svc: Service,
    settings: Settings,
    oracles: Sequence[PartitionOracle],
    flip: Flip,
    step: Callable[[str], None],
) -> list[Problem]:
    """Serve ``svc`` on a loopback listener and walk and probe every partition over it."""
    ctx = Context(svc, settings, ByteBudget(settings.inflight_bytes), "127.0.0.1", 0)
    listener = KafkaListener(ctx, "127.0.0.1", 8, bind_port=0)
    await listener.start()
    problems: list[Problem] = []
    last = [""]

    def note(text: str) -> None:
        last[0] = text
        step(text)

    try:
        wire = await Wire.open(listener.port)
        try:
            for part in oracles:
                for isolation in IsolationLevel:
                    problems += await walk(wire, part, isolation, flip.max_bytes, note)
                problems += await probe(wire, part, flip.probes, note)
        except ConnectionClosedError as exc:
            problems.append(Problem("untyped", "connection closed", f"{last[0]}: {exc}"))
        finally:
            await wire.close()
    finally:
        await listener.close()
    return problems


async def _check(
    folder: Path,
    key_pair_spec: str,
    flip: Flip,
    oracles: Sequence[PartitionOracle],
    step: Callable[[str], None],
) -> Outcome:
    started = time.perf_counter()
    problems: list[Problem] = []
    try:
        step("open the service and scan")
        settings = service_settings(folder, key_pair_spec)
        async with fresh_service(settings) as svc:
            if isinstance(svc, BaseException):
                problem = _error_problem(svc, "first bucket scan")
                problems.append(Problem(problem.verdict, problem.label + " (not ready)",
                                        problem.detail))  # fmt: skip
            else:
                problems += await read_through_listener(svc, settings, oracles, flip, step)
            step("close the service")
    except Exception as exc:
        problems.append(_error_problem(exc, "service"))
    verdict = max((p.verdict for p in problems), key=_SEVERITY.__getitem__, default="same")
    seconds = time.perf_counter() - started
    return Outcome(flip, verdict, tuple(problems), -1.0, -1.0, seconds, _WARNINGS.text())


def check_listener(
    folder: Path,
    key_pair_spec: str,
    flip: Flip,
    oracles: Sequence[PartitionOracle],
    step: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """One flip read through the listener (a blocking check for
    :func:`~tests.integration.campaign.check_worker`)."""
    return asyncio.run(_check(folder, key_pair_spec, flip, oracles, step))
