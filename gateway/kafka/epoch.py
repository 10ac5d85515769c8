"""Leader-epoch checkpoint text format and the leader-epoch cache rules.

Mirrors ``org.apache.kafka.storage.internals.checkpoint.LeaderEpochCheckpointFile`` (with
``org.apache.kafka.server.common.CheckpointFile``) and
``org.apache.kafka.storage.internals.epoch.LeaderEpochFileCache``.

Format (UTF-8 text, ``\\n`` after every line, including the last, as ``BufferedWriter.newLine``
writes on Linux); the same text is uploaded as a segment's LEADER_EPOCH index::

    0                      version (CURRENT_VERSION = 0)
    3                      entry count N
    0 0                    N lines "<epoch int32> <startOffset int64>", one space written;
    3 1500                 readers split on any whitespace
    5 4000

Reading follows ``CheckpointReadBuffer`` and ``BufferedReader.readLine``: lines end at ``\\n``,
``\\r\\n`` or ``\\r``; a final line without terminator counts; an entry line split on Java ``\\s+``
must give exactly two fields (leading whitespace gives an empty first field and is malformed,
trailing whitespace is dropped). Unlike Kafka, an empty input or one without a count line is
corrupt here rather than an empty list, and numbers must be ASCII digits with an optional sign.

Cache rules: entries are strictly increasing in epoch and start offset; ``assign`` removes every
entry with epoch >= the new epoch or start offset >= the new start offset (and ignores an entry
for the latest epoch that does not move its start offset back); ``epoch_for_offset`` answers the
epoch of the last entry whose start offset is <= the offset.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from typing import NamedTuple

from gateway.errors import CorruptCheckpointError
from gateway.kafka.ints import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, check_int, short_repr

__all__ = [
    "CHECKPOINT_VERSION",
    "EpochEntry",
    "LeaderEpochCache",
    "format_leader_epoch_checkpoint",
    "parse_leader_epoch_checkpoint",
]

CHECKPOINT_VERSION = 0
"""``LeaderEpochCheckpointFile.CURRENT_VERSION``."""

_INTEGER = re.compile(r"[+-]?[0-9]+")
_MAX_INTEGER_CHARS = 40  # sign and digits; an int64 needs at most 20
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # java.util.regex \s
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine terminators


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


def _corrupt(line_no: int, line: str, what: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"leader-epoch checkpoint line {line_no}: {what} (got {short_repr(line)})"
    )


def _parse_int(line_no: int, line: str, text: str, *, what: str, lo: int, hi: int) -> int:
    if _INTEGER.fullmatch(text) is None:
        raise _corrupt(line_no, line, f"{what} is not an integer")
    if len(text) > _MAX_INTEGER_CHARS:  # also keeps int() clear of its 4300-digit limit
        raise _corrupt(line_no, line, f"{what} {short_repr(text, 30)} is out of range")
    return check_int(
        what, int(text), lo, hi, error=lambda problem: _corrupt(line_no, line, problem)
    )


def parse_leader_epoch_checkpoint(data: bytes | bytearray | memoryview) -> list[EpochEntry]:
    """Parse a leader-epoch checkpoint; raises :class:`CorruptCheckpointError` on any deviation.

    The entries are returned as written; :class:`LeaderEpochCache` checks their order.
    """
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"leader-epoch checkpoint is not valid UTF-8: {exc}") from exc
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()  # the terminator of the last line does not start another one
    if not lines:
        raise CorruptCheckpointError("leader-epoch checkpoint is empty: no version line")
    version = _parse_int(1, lines[0], lines[0], what="version", lo=INT32_MIN, hi=INT32_MAX)
    if version != CHECKPOINT_VERSION:
        raise _corrupt(1, lines[0], f"version {version} is not {CHECKPOINT_VERSION}")
    if len(lines) < 2:
        raise CorruptCheckpointError("leader-epoch checkpoint has no entry-count line (line 2)")
    count = _parse_int(2, lines[1], lines[1], what="entry count", lo=0, hi=INT32_MAX)
    body = lines[2:]
    if len(body) != count:
        raise CorruptCheckpointError(
            f"leader-epoch checkpoint line 2 announces {count} entries but {len(body)} "
            "entry lines follow"
        )
    entries: list[EpochEntry] = []
    for line_no, line in enumerate(body, start=3):
        fields = _JAVA_WHITESPACE.split(line)
        while fields and fields[-1] == "":
            fields.pop()  # Java's String.split drops trailing empty strings
        if len(fields) != 2:
            raise _corrupt(line_no, line, "expected '<epoch> <startOffset>'")
        epoch = _parse_int(line_no, line, fields[0], what="epoch", lo=INT32_MIN, hi=INT32_MAX)
        start = _parse_int(
            line_no, line, fields[1], what="start offset", lo=INT64_MIN, hi=INT64_MAX
        )
        entries.append(EpochEntry(epoch, start))
    return entries


def format_leader_epoch_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    """Write entries byte for byte as ``CheckpointFile`` does (``\\n`` after every line)."""
    rows = [EpochEntry(epoch, start) for epoch, start in entries]
    lines = [str(CHECKPOINT_VERSION), str(len(rows))]
    lines.extend(f"{row.epoch} {row.start_offset}" for row in rows)
    return ("\n".join(lines) + "\n").encode("utf-8")


class LeaderEpochCache:
    """An in-memory ``LeaderEpochFileCache`` (no file, no locking: not thread-safe).

    Built from entries that must be non-negative and strictly increasing in both epoch and
    start offset (:class:`CorruptCheckpointError` otherwise).
    """

    __slots__ = ("_entries", "_starts")

    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        self._entries: list[EpochEntry] = []
        self._starts: list[int] = []
        for n, (epoch, start) in enumerate(entries):
            if epoch < 0 or start < 0:
                raise CorruptCheckpointError(
                    f"leader-epoch entry {n} (epoch {epoch}, start offset {start}) is negative"
                )
            if self._entries:
                last = self._entries[-1]
                if epoch <= last.epoch or start <= last.start_offset:
                    raise CorruptCheckpointError(
                        f"leader-epoch entry {n} (epoch {epoch}, start offset {start}) does not "
                        f"strictly follow (epoch {last.epoch}, start offset {last.start_offset})"
                    )
            self._entries.append(EpochEntry(epoch, start))
            self._starts.append(start)

    @classmethod
    def from_checkpoint(cls, data: bytes | bytearray | memoryview) -> LeaderEpochCache:
        """Parse checkpoint text and build a cache from it."""
        return cls(parse_leader_epoch_checkpoint(data))

    def to_checkpoint(self) -> bytes:
        """The entries in checkpoint text format."""
        return format_leader_epoch_checkpoint(self._entries)

    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, ascending."""
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        """The entry with the highest epoch, if any."""
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The highest epoch, if any."""
        return self._entries[-1].epoch if self._entries else None

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self._entries!r})"

    def assign(self, epoch: int, start_offset: int) -> bool:
        """``LeaderEpochFileCache.assign``: record that ``epoch`` starts at ``start_offset``.

        Nothing changes (and ``False`` is returned) when ``epoch`` is the latest epoch and
        ``start_offset`` is not below its start offset. Otherwise every entry with an epoch
        >= ``epoch`` or a start offset >= ``start_offset`` is removed and the new entry
        appended. Raises ``ValueError`` for a negative epoch or start offset.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry (epoch {epoch}, start {start_offset})")
        latest = self.latest_entry
        if latest is not None and epoch == latest.epoch and start_offset >= latest.start_offset:
            return False
        entries = self._entries
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            entries.pop()
            self._starts.pop()
        entries.append(EpochEntry(epoch, start_offset))
        self._starts.append(start_offset)
        return True

    def epoch_for_offset(self, offset: int) -> int | None:
        """``LeaderEpochFileCache.epochForOffset``.

        Walking the entries in order: an exact start-offset match answers its epoch; the first
        entry starting after ``offset`` answers the previous epoch (``None`` if there is none);
        running off the end answers the last epoch. With strictly increasing start offsets this
        is the epoch of the last entry starting at or before ``offset``.
        """
        slot = bisect_right(self._starts, offset) - 1
        return self._entries[slot].epoch if slot >= 0 else None

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """``LeaderEpochFileCache.epochEntriesInRange`` (start inclusive, end exclusive).

        When ``start_offset >= 0``, the entries starting at or before it are dropped, except
        the last of them, which is kept with its start offset rewritten to ``start_offset``.
        When ``end_offset >= 0``, the entries starting at or after it are dropped.
        """
        result = list(self._entries)
        if start_offset >= 0:
            cut = bisect_right(self._starts, start_offset)
            if cut > 0:
                result = [EpochEntry(result[cut - 1].epoch, start_offset), *result[cut:]]
        if end_offset >= 0:
            while result and result[-1].start_offset >= end_offset:
                result.pop()
        return result
