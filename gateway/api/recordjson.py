"""Records to JSON text in bulk, batch by batch, with no dict or string per record.

The text of a record is byte for byte what ``orjson.dumps`` writes for its object::

    {"offset":O,"timestamp":T,"timestamp_type":"CreateTime","key":K,"value":V,
     "headers":[{"key":"h","value":H}],"leader_epoch":E}

A batch whose records have no headers, and whose keys (and values) are all present or all null,
is written by column: offsets and timestamps in one ``orjson.dumps`` each, keys and values
through their format's encoder by ``map``, the columns laid into one list between fixed
pieces made once per page (the timestamp type and leader epoch are the batch's) and joined.
Any other batch is written record by record with ``bytes %`` templates; so is a batch holding
a value not valid in its format, which finds the record and its offset.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Final, cast

import orjson

from gateway.api.formats import Encoders, Field
from gateway.errors import InvalidFormatError
from gateway.kafka.records import Header
from gateway.service.records import BatchRecords, ColumnRecords, DecodedRecords
from gateway.service.types import FetchedRecord

Buffer = bytes | memoryview  # a piece of text (joined once by the caller)
_TYPES: Final = {False: b"CreateTime", True: b"LogAppendTime"}
_NONE: Final = itertools.repeat(())  # the headers of a batch without any
_NO_HEADERS: Final = b',"headers":[]'


def groups(records: Sequence[FetchedRecord]) -> Iterable[BatchRecords]:
    """``records`` batch by batch; any other sequence one record at a time."""
    if isinstance(records, DecodedRecords | ColumnRecords):
        return records.groups
    return (
        BatchRecords(
            [r.offset],
            [r.timestamp],
            [r.record.key],
            [r.record.value],
            [r.record.headers],
            r.log_append_time,
            r.leader_epoch,
        )
        for r in records
    )


def _present(column: Sequence[bytes | None]) -> bool | None:
    """True: no None in ``column``; False: all None; None: a mix."""
    if None not in column:
        return True
    return False if column.count(None) == len(column) else None


_Present = Sequence[bytes]  # a column without None
_OFFSET, _TIMESTAMP, _KEY, _VALUE = range(4)  # the columns, in their order in the text


class Writer:
    """Writes the records of one page in ``encoders``' formats, separated by ``sep``."""

    def __init__(self, encoders: Encoders, sep: bytes) -> None:
        self.encoders, self.sep = encoders, sep
        self.started = False  # a record written: the next one follows a separator
        self._pieces: dict[tuple[bool, int | None, bool, bool], list[bytes]] = {}
        self._templates: dict[tuple[bool, int | None], tuple[bytes, ...]] = {}

    def pieces(
        self, log_append_time: bool, epoch: int | None, key: bool, value: bool
    ) -> list[bytes]:
        """The fixed text between the columns (offset, timestamp, the key when present, the
        value when present), before the first and after the last."""
        found = self._pieces.get((log_append_time, epoch, key, value))
        if found is not None:
            return found
        kq = b'"' if self.encoders.key.quoted else b""
        vq = b'"' if self.encoders.value.quoted else b""
        text: list[bytes | int] = [b'{"offset":', _OFFSET, b',"timestamp":', _TIMESTAMP]
        text.append(b',"timestamp_type":"%b","key":' % _TYPES[log_append_time])
        text += [kq, _KEY, kq] if key else [b"null"]
        text.append(b',"value":')
        text += [vq, _VALUE, vq] if value else [b"null"]
        text.append(b'%b,"leader_epoch":%b}' % (_NO_HEADERS, _int(epoch)))
        pieces = [b""]
        for part in text:
            if isinstance(part, int):
                pieces.append(b"")
            else:
                pieces[-1] += part
        self._pieces[(log_append_time, epoch, key, value)] = pieces
        return pieces

    def templates(self, log_append_time: bool, epoch: int | None) -> tuple[bytes, ...]:
        """``bytes %`` templates of (key and value, key only, value only, neither, general)."""
        found = self._templates.get((log_append_time, epoch))
        if found is not None:
            return found
        made = [
            _template(self.pieces(log_append_time, epoch, key, value))
            for key, value in ((True, True), (True, False), (False, True), (False, False))
        ]
        head, tail = made[-1].split(b'"key":null')
        general = head + b'"key":%b,"value":%b,"headers":%b' + tail.split(_NO_HEADERS, 1)[1]
        found = self._templates[(log_append_time, epoch)] = (*made, general)
        return found

    def render(
        self, records: Sequence[FetchedRecord], out: list[Buffer]
    ) -> InvalidFormatError | None:
        """Append the text of ``records`` to ``out`` in pieces (``sep`` between records; their
        join is the text); at a record not valid in its format, stop there (``out`` holds the
        records before it, whole) and return the error naming its offset."""
        for group in groups(records):
            if not self._columns(group, out):
                error = self._rows(group, out)
                if error is not None:
                    return error
        return None

    def _columns(self, group: BatchRecords, out: list[Buffer]) -> bool:
        """Write the batch by column; False when it must be written by row."""
        key, value = _present(group.keys), _present(group.values)
        if group.headers is not None or key is None or value is None or not group.offsets:
            return False
        pieces = self.pieces(group.log_append_time, group.leader_epoch, key, value)
        columns = [
            orjson.dumps(group.offsets)[1:-1].split(b","),
            orjson.dumps(group.timestamps)[1:-1].split(b","),
        ]
        try:
            if key:
                columns.append(list(map(self.encoders.key.encode, cast(_Present, group.keys))))
            if value:
                columns.append(list(map(self.encoders.value.encode, cast(_Present, group.values))))
        except InvalidFormatError:
            return False  # the rows find the record
        n, step = len(group.offsets), 2 * len(columns)
        text = [pieces[-1] + self.sep + pieces[0]] * (step * n)
        text[0] = self.sep + pieces[0] if self.started else pieces[0]
        for at, column in enumerate(columns):
            text[2 * at + 1 :: step] = column
            if at:
                text[2 * at :: step] = [pieces[at]] * n
        text.append(pieces[-1])
        out.append(b"".join(text))  # by batch: faster than one join of every piece of a page
        self.started = True
        return True

    def _rows(self, group: BatchRecords, out: list[Buffer]) -> InvalidFormatError | None:
        both, key_only, value_only, neither, general = self.templates(
            group.log_append_time, group.leader_epoch
        )
        key_field, value_field, header_field = self.encoders
        key_enc, value_enc = key_field.encode, value_field.encode
        columns = (group.offsets, group.timestamps, group.keys, group.values)
        offset = -1
        try:
            for offset, stamp, key, value, headers in zip(
                *columns, group.headers or _NONE, strict=False
            ):
                if headers:
                    key_text, value_text = key_field.token(key), value_field.token(value)
                    text = general % (
                        offset, stamp, key_text, value_text, _headers(headers, header_field)
                    )  # fmt: skip
                elif key is None:
                    if value is None:
                        text = neither % (offset, stamp)
                    else:
                        text = value_only % (offset, stamp, value_enc(value))
                elif value is None:
                    text = key_only % (offset, stamp, key_enc(key))
                else:
                    text = both % (offset, stamp, key_enc(key), value_enc(value))
                if self.started:
                    out.append(self.sep)
                out.append(text)
                self.started = True
        except InvalidFormatError as exc:
            return exc.at(offset)
        return None


def _template(pieces: list[bytes]) -> bytes:
    """``pieces`` around ``%d`` (offset, timestamp) and ``%b`` (key, value) markers."""
    escaped = [p.replace(b"%", b"%%") for p in pieces]
    markers = (b"%d", b"%d", b"%b", b"%b")
    return escaped[0] + b"".join(m + p for m, p in zip(markers, escaped[1:], strict=False))


def _int(value: int | None) -> bytes:
    return b"null" if value is None else b"%d" % value


def _headers(headers: Sequence[Header], field: Field) -> bytes:
    return b"[%b]" % b",".join(
        b'{"key":%b,"value":%b}' % (orjson.dumps(key), field.token(value)) for key, value in headers
    )


def write(
    records: Sequence[FetchedRecord], encoders: Encoders, sep: bytes, out: list[Buffer]
) -> None:
    """Append the pieces of the records' text to ``out`` (:meth:`Writer.render`); raises
    :class:`InvalidFormatError` naming the offset."""
    error = Writer(encoders, sep).render(records, out)
    if error is not None:
        raise error
