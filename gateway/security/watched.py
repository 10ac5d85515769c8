"""A small text file the gateway reads at start and reloads when it changes, without a restart:
the ACL file (:class:`~gateway.security.acl.AclFile`) and the API key file
(:class:`~gateway.security.apikeys.ApiKeyFile`).

Both must never fall open or silently close on a bad edit, so they share one rule: a change that
reads and parses replaces the value whole (one attribute assignment: a request sees the old set
or the new one, never a mix); a change that does not parse, a file that is gone or cannot be
read keeps the previous value in force and logs an error (and counts it). At start the same
problems are a :class:`~gateway.errors.ConfigurationError`: there is no previous value to keep.

The check is pulled, not pushed: :meth:`WatchedFile.current` stats the file at most every
``check_every_s`` seconds, on the request that asks, so there is no thread or task to start or
stop and every worker process of ``serve --workers N`` watches its own copy.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sized
from pathlib import Path
from typing import Generic, TypeAlias, TypeVar

from gateway.errors import ConfigurationError

log = logging.getLogger(__name__)

_T = TypeVar("_T", bound=Sized)

_Stamp: TypeAlias = tuple[int, int, int]


def _stamp(st: os.stat_result) -> _Stamp:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class WatchedFile(Generic[_T]):
    """A file that is re-read when it changes, without a restart.

    ``parse(text, source)`` turns the file's UTF-8 text into the value (``source`` names the
    file in its errors) and raises :class:`ConfigurationError` for text it refuses. ``what``
    names the file in messages (``"ACL file"``), ``noun`` what it holds (``"ACLs"``).

    :meth:`current` stats the file at most every ``check_every_s`` seconds of ``clock``
    (mtime_ns, size, inode) and reloads it when that changed. An edit that does not parse, or a
    removed file, keeps the previous value in force and is recorded in :attr:`last_error` and
    :attr:`failed_reloads`: a bad edit never opens or closes everything. A reload that parses
    to nothing (an empty file) is applied, since removing the last entry must be possible, and
    logged as a warning. Write the file atomically (a temporary file renamed over it) so a
    half-written file is never read; a file that changes while it is read is read again at the
    next check."""

    def __init__(
        self,
        path: Path,
        parse: Callable[[str, str], _T],
        *,
        what: str,
        noun: str,
        clock: Callable[[], float] = time.monotonic,
        check_every_s: float = 1.0,
    ) -> None:
        self._path = path
        self._parse = parse
        self._what = what
        self._noun = noun
        self._clock = clock
        self._check_every_s = check_every_s
        self._lock = threading.Lock()
        try:
            self._stamp: _Stamp | None
            self._stamp, self._value = self._load()
        except OSError as exc:
            raise ConfigurationError(self._unreadable(exc)) from exc
        self._next_check = clock() + check_every_s
        self._last_error: str | None = None
        self._reloads = 0
        self._failed_reloads = 0

    @property
    def path(self) -> Path:
        return self._path

    @property
    def last_error(self) -> str | None:
        """Why the latest reload failed; None once a reload succeeds."""
        return self._last_error

    @property
    def reloads(self) -> int:
        """Successful reloads after the first load."""
        return self._reloads

    @property
    def failed_reloads(self) -> int:
        """Changes (or removals) of the file that left the previous value in force."""
        return self._failed_reloads

    def current(self) -> _T:
        """The value in force, reloaded first if the file changed and a check is due. A
        request that finds another thread checking uses the value in force without waiting."""
        now = self._clock()
        if now >= self._next_check and self._lock.acquire(blocking=False):
            try:
                self._next_check = now + self._check_every_s
                self._check()
            finally:
                self._lock.release()
        return self._value

    def _unreadable(self, exc: OSError) -> str:
        return f"{self._what} {self._path} cannot be read: {exc.strerror}"

    def _load(self) -> tuple[_Stamp, _T]:
        with self._path.open("rb") as f:
            stamp = _stamp(os.fstat(f.fileno()))
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigurationError(f"{self._path}: not UTF-8 text (byte {exc.start})") from None
        return stamp, self._parse(text, str(self._path))

    def _check(self) -> None:
        try:
            stamp = _stamp(os.stat(self._path))
        except OSError as exc:
            if self._stamp is not None:  # gone (or unreadable) since the last check
                self._fail(None, self._unreadable(exc))
            return
        if stamp == self._stamp:
            return
        try:
            read_stamp, value = self._load()
            if _stamp(os.stat(self._path)) != read_stamp:
                return  # changed while being read: read it again at the next check
        except OSError as exc:
            self._fail(stamp, self._unreadable(exc))
        except ConfigurationError as exc:
            self._fail(stamp, str(exc))
        else:
            self._stamp, self._value, self._last_error = read_stamp, value, None
            self._reloads += 1
            if len(value):
                log.info("%s %s reloaded: %d %s", self._what, self._path, len(value), self._noun)
            else:
                log.warning("%s %s reloaded: it now holds no %s", self._what, self._path,
                            self._noun)  # fmt: skip

    def _fail(self, stamp: _Stamp | None, error: str) -> None:
        self._stamp, self._last_error = stamp, error
        self._failed_reloads += 1
        log.error("%s; the previous %s stay in force", error, self._noun)
