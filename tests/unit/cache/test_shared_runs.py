"""The verified runs the workers share: a run one process published is found by another (a real
fork) as a private copy equal to what was published; a run the ring overwrote is a miss; a copy
torn by a writer while it was taken is thrown away; and a campaign of processes publishing and
finding at once over a small ring finds only exact runs (0 wrong)."""

from __future__ import annotations

import hashlib
import os
import random
import struct
import uuid
from array import array
from typing import Any

from gateway.cache.shared_runs import SharedRunArena
from gateway.cache.verified import CacheMemory, VerifiedRun, VerifiedRuns

KiB = 1 << 10
SEGMENTS = [uuid.UUID(int=i + 1) for i in range(4)]


def _run(segment: uuid.UUID, first: int, batches: int, size: int = 1000) -> VerifiedRun:
    """A run whose every byte and table entry follows from (segment, first, batches)."""
    seed = hashlib.sha256(f"{segment}:{first}:{batches}".encode()).digest()
    data = (seed * (batches * size // len(seed) + 1))[: batches * size]
    ends = array("q", [size * (i + 1) for i in range(batches)])
    bases = array("q", [first + 10 * i for i in range(batches)])
    lasts = array("q", [first + 10 * i + 9 for i in range(batches)])
    return VerifiedRun(first * 100, memoryview(data), ends, bases, lasts, len(data) + 512)


def _same(got: VerifiedRun, want: VerifiedRun) -> bool:
    return (
        got.position == want.position
        and bytes(got.data) == bytes(want.data)
        and (got.ends, got.bases, got.lasts) == (want.ends, want.bases, want.lasts)
    )


def _in_child(work: Any) -> int:
    """Run ``work()`` in a forked child; its exit status (0: it returned True)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if work() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_run_published_by_one_process_is_found_by_another() -> None:
    arena = SharedRunArena(1 << 20)
    run = _run(SEGMENTS[0], 100, 8)

    def publish() -> bool:
        arena.forked()
        return arena.publish(SEGMENTS[0], run)

    assert _in_child(publish) == 0
    arena.forked()  # this process as a sibling
    got = arena.find(SEGMENTS[0], 135)  # inside the run's offsets 100..179
    assert got is not None and _same(got, run)
    assert bytes(got.data) is not bytes(run.data) and got.data.obj is not arena._ring  # a copy
    assert arena.find(SEGMENTS[0], 180) is None  # past its last offset
    assert arena.find(SEGMENTS[1], 135) is None  # another segment
    assert (arena.stats().hits, arena.stats().misses) == (1, 2)


async def test_verified_runs_look_in_the_arena_on_a_miss_and_keep_the_copy() -> None:
    arena = SharedRunArena(1 << 20)
    writer = VerifiedRuns(CacheMemory(1 << 20), arena)
    run = _run(SEGMENTS[1], 0, 4)
    writer.add(SEGMENTS[1], run)  # kept here
    assert arena.stats().published == 0
    writer.share(SEGMENTS[1], [run])  # and published, in the background
    assert arena.publisher.wait_idle(30)
    assert arena.stats().published == 1
    reader = VerifiedRuns(CacheMemory(1 << 20), arena)
    arena.forked()  # the arena as the reader's process sees it: nothing indexed yet
    assert reader.find(SEGMENTS[1], 5) is None  # its own runs only
    assert reader.holds(SEGMENTS[1], 5) and not reader.holds(SEGMENTS[1], 40)
    assert arena.stats().hits == 0  # holds() copies nothing
    got = await reader.lookup(SEGMENTS[1], 5)
    assert got is not None and _same(got, run)
    assert reader.find(SEGMENTS[1], 5) is got  # kept: the second look is the reader's own
    assert await reader.lookup(SEGMENTS[1], 5) is got
    assert arena.stats().hits == 1
    assert arena.stats().published == 0  # the reader did not publish the copy it found
    assert await reader.lookup(SEGMENTS[1], 40) is None
    assert arena.stats().misses == 1  # the lookup's, not the holds() before it


def test_a_run_the_ring_overwrote_is_a_miss() -> None:
    arena = SharedRunArena(64 * KiB)
    old = _run(SEGMENTS[0], 0, 4)  # 4 KB and its table
    assert arena.publish(SEGMENTS[0], old)
    for first in range(1000, 1000 + 20 * 100, 100):  # 20 runs of 4 KB: past the ring's 64 KiB
        assert arena.publish(SEGMENTS[1], _run(SEGMENTS[1], first, 4))
    arena.forked()
    assert arena.find(SEGMENTS[0], 0) is None
    newest = arena.find(SEGMENTS[1], 1000 + 19 * 100)
    assert newest is not None and _same(newest, _run(SEGMENTS[1], 1000 + 19 * 100, 4))


def test_a_run_too_large_for_its_share_of_the_ring_is_not_published() -> None:
    arena = SharedRunArena(64 * KiB)
    assert not arena.publish(SEGMENTS[0], _run(SEGMENTS[0], 0, 9))  # 9 KB > 64 KiB / 8
    assert arena.stats().published == 0


class _TearingView:
    """The ring's view, with a writer that wraps over the run being copied when the copy
    starts (as a sibling would, between the check before the copy and the one after)."""

    def __init__(self, arena: SharedRunArena) -> None:
        self._arena = arena
        self._view = arena._view
        self.tore = False

    def __getitem__(self, key: slice) -> memoryview:
        if not self.tore:
            self.tore = True
            self._arena._reserve(self._arena.size)  # the whole ring, as one writer would
        return self._view[key]

    def __setitem__(self, key: slice, value: Any) -> None:
        self._view[key] = value


def test_a_copy_a_writer_overwrote_while_it_was_taken_is_thrown_away() -> None:
    arena = SharedRunArena(1 << 20)
    assert arena.publish(SEGMENTS[0], _run(SEGMENTS[0], 0, 4))
    arena.forked()
    arena._catch_up()
    tearing = _TearingView(arena)
    arena._view = tearing  # type: ignore[assignment]
    assert arena.find(SEGMENTS[0], 0) is None
    assert tearing.tore and arena.stats().torn == 1
    arena._view = tearing._view
    assert arena.find(SEGMENTS[0], 0) is None  # forgotten: not copied again


def test_a_writer_stalled_after_its_reservation_never_tears_a_newer_run() -> None:
    """A writer reserves its bytes and stalls (descheduled on a loaded machine) while the others
    publish more than the ring holds; it then writes its bytes late. Before: those landed in a
    newer run whose head check said intact, and a sibling was served the mix (the campaign
    below found one such run). Now a reservation that would reach a write in flight a ring later
    is refused, so the late bytes overwrite nothing announced; once it is done, all goes on."""
    arena = SharedRunArena(256 * KiB)
    stalled = arena._reserve(64 * KiB)  # the stalled writer's reservation
    assert stalled is not None
    at, slot = stalled
    published = []
    for i in range(60):  # far more than the ring: 60 runs of ~5-25 KiB
        run = _run(SEGMENTS[i % 4], i * 1000, 1 + i % 5, size=5000)
        if arena.publish(SEGMENTS[i % 4], run):
            published.append((SEGMENTS[i % 4], run))
    assert published  # the ring was used until the writer in flight was in the way
    lo = at % arena.size
    arena._view[lo : lo + 64 * KiB] = 0xEE  # the late bytes
    for segment, run in published:
        got = arena.find(segment, run.first_offset)
        assert got is None or _same(got, run)
    struct.pack_into("<qq", arena._meta, slot, -1, 0)  # done: its slot freed, as publish does
    later = _run(SEGMENTS[0], 900_000, 3, size=5000)
    assert arena.publish(SEGMENTS[0], later)  # sharing goes on
    got = arena.find(SEGMENTS[0], 900_000)
    assert got is not None and _same(got, later)


def test_processes_publishing_and_finding_at_once_find_only_exact_runs() -> None:
    """Three processes over a ring of 48 runs: each publishes and looks up runs at random
    (seeded: the sequence of each process is reproducible); every run found must be exactly
    the run published under its key, the tears are thrown away, and some runs are found."""
    arena = SharedRunArena(256 * KiB)
    firsts = range(0, 200 * 1000, 1000)

    def campaign(seed: int) -> bool:
        arena.forked()
        rng = random.Random(seed)
        wrong = 0
        for _ in range(3000):
            segment = rng.choice(SEGMENTS)
            first = rng.choice(firsts)
            batches = 1 + first // 1000 % 5
            if rng.random() < 0.4:
                arena.publish(segment, _run(segment, first, batches))
            else:
                got = arena.find(segment, first + rng.randrange(10 * batches))
                if got is not None and not _same(
                    got, _run(segment, got.first_offset, len(got.ends))
                ):
                    wrong += 1
        os.write(out, f"{seed} {wrong} {arena.hits} {arena.torn}\n".encode())
        return wrong == 0

    read_end, out = os.pipe()
    pids = []
    for seed in (1, 2, 3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                code = 0 if campaign(seed) else 1
            finally:
                os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    os.close(out)
    with os.fdopen(read_end) as lines:
        report = [line.split() for line in lines.read().splitlines()]
    assert codes == [0, 0, 0], report
    assert sum(int(r[1]) for r in report) == 0
    assert sum(int(r[2]) for r in report) > 0, report  # runs were found (own or siblings')


def test_a_forked_process_starts_its_own_view_of_the_ring() -> None:
    """A worker forked after the arena was used inherits no index and no counters: it finds
    the runs through the journal (counted as its own hits), and an arena made apart (another
    server) shares nothing with it."""
    arena = SharedRunArena(1 << 20)
    run = _run(SEGMENTS[0], 0, 4)
    assert arena.publish(SEGMENTS[0], run)
    assert arena.find(SEGMENTS[0], 0) is not None and arena.stats().hits == 1

    def child() -> bool:
        arena.forked()
        fresh = (arena.stats().hits, arena.stats().published, len(arena._entries)) == (0, 0, 0)
        got = arena.find(SEGMENTS[0], 39)
        found = got is not None and _same(got, run) and arena.stats().hits == 1
        other = SharedRunArena(1 << 20)
        return (
            fresh
            and found
            and other.find(SEGMENTS[0], 0) is None
            and not other.holds(SEGMENTS[0], 0)
        )

    assert _in_child(child) == 0
