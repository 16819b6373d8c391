"""One store for "this call again": the n-th identical request gets the n-th recorded answer.

Used by the three places orchenv answers a call from a file: ``RecordingBackend`` (a
recording that resumes), ``ReplayBackend`` (a replay of a recording) and the eval harness's
per-episode call journal (``orchenv.eval.journal``: a retried episode is not charged twice).
Written by hand: no maintained library keeps an append-only JSON Lines log of calls keyed by
occurrence with torn-line repair; the pieces below are that and nothing more.

Occurrences. A request is identified by a key chosen by the user of the store (the replay key:
task, agent, prompt hash or turn; the journal's: agent, model, messages and context). Identical
requests are not the same call: forked branches of one state, self-consistency samples and
retries all repeat a request, and against a sampling model each gets its own answer. The store
keeps a key's records by *occurrence* (0, 1, 2, ...) and hands occurrences out in the order a
run asks for them, so a recording answers (and a replay reproduces) every repeat with the answer
that repeat got live, instead of collapsing all of them onto the first.

Files written before occurrences were recorded: a replay file of format 1 (no ``occurrence``
field) means "the same answer for every occurrence", so such a key answers every repeat with its
first record, as orchenv did before; a journal line without ``occurrence`` counts in file order
(the journal always meant the n-th call gets the n-th answer).

The file (``CallLog``): JSON Lines, one record per call, each appended with a single
``os.write`` on a descriptor opened with ``O_APPEND`` (on POSIX the bytes land at the end of the
file atomically; a lock serialises writers inside one process) and ``fsync``-ed when asked. A
kill mid-write leaves at worst one torn last line: readers skip it with a warning and the next
writer cuts it off before appending. A corrupt line anywhere else is a ``DataError`` naming
the line (the file was damaged or edited, not torn). Each line is parsed with the bounds of
``orchenv.schema.parse_json`` and checked by the owner's ``validate`` (its schema); a line
longer than ``max_line_bytes`` is refused rather than read whole. A write that fails (disk
full, quota) cuts the file back to its last complete record and raises the owner's error.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError
from orchenv.schema import JSONLimitError, parse_json

__all__ = [
    "CallLog",
    "JsonlScan",
    "OccurrenceStore",
    "check_writable_target",
    "open_for_append",
    "scan_jsonl",
]

logger = logging.getLogger(__name__)

#: the default longest line read (a record holds one call's text and extras)
MAX_LINE_BYTES = 64 * 2**20

#: ``validate(parsed, where) -> record``: the owner's schema check of one line
Validator = Callable[[Any, str], dict[str, Any]]


class OccurrenceStore:
    """Records by (key, occurrence), and the next occurrence of each key asked for in this run.

    Thread-safe. ``load`` adds a record read from a file; ``take`` claims the next occurrence
    of a key (returning its record when one is stored); ``put`` stores a new record for a
    claimed occurrence.
    """

    def __init__(self) -> None:
        self._records: dict[str, dict[int, dict[str, Any]]] = {}
        self._repeat_first: set[str] = set()  # format-1 keys: one answer for every occurrence
        self._next: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(by_n) for by_n in self._records.values())

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def load(self, key: str, record: Mapping[str, Any]) -> bool:
        """Add a record read from a file; False when its (key, occurrence) is already there
        (the first record wins). A record without ``occurrence`` is format 1."""
        occurrence = record.get("occurrence")
        with self._lock:
            by_n = self._records.setdefault(key, {})
            if occurrence is None:
                if by_n:
                    return False
                self._repeat_first.add(key)
                by_n[0] = dict(record)
                return True
            n = int(occurrence)
            if n in by_n:
                return False
            by_n[n] = dict(record)
            return True

    def load_all(
        self, records: Iterable[Mapping[str, Any]], key_of: Callable[[Mapping[str, Any]], str]
    ) -> list[dict[str, Any]]:
        """``load`` every record under ``key_of(record)``; the records that were kept."""
        kept = []
        for record in records:
            key = key_of(record)
            if self.load(key, record):
                kept.append(dict(record))
            else:
                logger.debug("duplicate record for key %r and its occurrence: ignored", key)
        return kept

    def take(self, key: str) -> tuple[int, dict[str, Any] | None]:
        """Claim the next occurrence of ``key``: its number and its stored record (or None)."""
        with self._lock:
            n = self._next[key]
            self._next[key] = n + 1
            by_n = self._records.get(key)
            if not by_n:
                return n, None
            if key in self._repeat_first:
                return n, by_n[0]
            return n, by_n.get(n)

    def put(self, key: str, n: int, record: Mapping[str, Any]) -> bool:
        """Store the record of a claimed occurrence; False if one is already stored."""
        with self._lock:
            by_n = self._records.setdefault(key, {})
            if n in by_n or key in self._repeat_first:
                return False
            by_n[n] = dict(record)
            return True

    def occurrences(self, key: str) -> int:
        """How many answers are stored for ``key`` (format-1 keys: 1, repeated forever)."""
        return len(self._records.get(key, {}))

    def keys(self) -> list[str]:
        return list(self._records)


# -- reading ------------------------------------------------------------------------------
@dataclass
class JsonlScan:
    """What a scan of a JSON Lines call file found.

    ``valid_end`` is the byte offset just past the last well-formed line (blank lines
    included); bytes beyond it are a torn last line a writer must cut off before appending.
    ``newline_missing`` is True when the last well-formed line lacks its ``\\n`` (a writer
    must add one before appending).
    """

    records: list[dict[str, Any]]
    valid_end: int
    size: int
    newline_missing: bool


def scan_jsonl(
    path: str | Path,
    validate: Validator,
    *,
    what: str = "call record",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> JsonlScan:
    """Parse a JSON Lines call file, tolerating a torn last line (see the module docstring).

    ``validate(parsed, "path:line")`` checks each parsed line and returns the record; its
    errors (``SchemaError``, ``DataError``) propagate, naming the line.
    """
    path = Path(path)
    records: list[dict[str, Any]] = []
    valid_end = 0
    last_byte = b""
    with path.open("rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # a FIFO would be read forever
            raise DataError(f"{path} is not a regular file")
        lineno = 0
        for raw in iter(lambda: fh.readline(max_line_bytes + 1), b""):
            lineno += 1
            where = f"{path}:{lineno}"
            if len(raw) > max_line_bytes:
                raise DataError(
                    f"{where}: a line longer than {max_line_bytes} bytes is not a {what}"
                )
            if not raw.strip():
                valid_end += len(raw)
                continue
            try:
                parsed = parse_json(raw.decode("utf-8"), where)
            except JSONLimitError:
                raise
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                rest = fh.read()
                if rest.strip():
                    raise DataError(
                        f"{where}: corrupt {what} ({exc}); only a torn last line is skipped, a "
                        "corrupt line in the middle means the file was damaged"
                    ) from exc
                logger.warning(
                    "%s: skipping a truncated or corrupt last line (%d bytes; a writer was "
                    "probably killed mid-write): %r",
                    where,
                    len(raw) + len(rest),
                    (raw + rest)[:80],
                )
                break
            records.append(validate(parsed, where))
            valid_end += len(raw)
            last_byte = raw[-1:]
        size = fh.seek(0, 2)
    return JsonlScan(records, valid_end, size, bool(records) and last_byte != b"\n")


# -- writing ------------------------------------------------------------------------------
def check_writable_target(path: Path, who: str) -> None:
    """Raise ``ConfigError`` unless ``path`` can be an appended-to JSON Lines file: a regular
    file, or a name that can be created (its folder is made if missing). Proven by opening
    it for appending; a file created only for that is removed again."""
    fd, created = open_for_append(path, who)
    os.close(fd)
    if created:
        path.unlink()


def open_for_append(path: Path, who: str) -> tuple[int, bool]:
    """A descriptor appending to the regular file ``path`` and whether it was created (with
    its folder); ``ConfigError`` naming the fix for a directory, a device, a FIFO or an
    unwritable place."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise _unwritable(path, who, exc) from exc
    if info is not None and not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise ConfigError(
            f"{who}: cannot record to {str(path)!r}: it is {kind}. Name a .jsonl file "
            "(new or one written by an earlier recording)"
        )
    flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    if info is None:  # create it, and never through a dangling link
        flags |= os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise _unwritable(path, who, exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the stat and the open
        os.close(fd)
        raise ConfigError(f"{who}: cannot record to {str(path)!r}: it is not a regular file")
    return fd, info is None


def _unwritable(path: Path, who: str, exc: OSError) -> ConfigError:
    why = exc.strerror or str(exc)
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        why += " (the folder is read-only for this user)"
    return ConfigError(
        f"{who}: cannot record to {str(path)!r}: {why}. Record to a file in a writable folder"
    )


def encode_line(record: Mapping[str, Any], default: Callable[[Any], Any] | None = None) -> bytes:
    """One record as a single UTF-8 JSON line ending in ``\\n`` (newlines in text are escaped;
    a lone surrogate in a text is written as its escape, never as invalid UTF-8)."""
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=default)
    return (line + "\n").encode("utf-8", "backslashreplace")


class CallLog:
    """An append-only JSON Lines file of call records with an ``OccurrenceStore`` over it.

    Args:
        path: the file (created at the first ``append`` when missing).
        key_of: a record's key.
        validate: the schema check of one parsed line (``Validator``).
        who: the owner's name, for messages.
        fsync: ``fsync`` the records (durable across power loss; a killed process loses no
            finished record either way, since each is one ``write``).
        fsync_interval_s: with ``fsync``, at most one ``fsync`` per this many seconds (and one
            at ``close``), as ``episodes.jsonl`` does: a power cut then loses at most that
            long's records. ``None``: after every record.
        write_error: builds the exception for a failed write from the ``OSError`` (the file
            is already cut back to its last complete record); ``OSError`` is re-raised as is
            when not given.
        max_line_bytes: the longest line read.

    ``load`` reads the file once (thread-safe), cutting a torn last line off when the file
    exists; ``take`` / ``append`` then answer and record calls.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        key_of: Callable[[Mapping[str, Any]], str],
        validate: Validator,
        who: str,
        fsync: bool = True,
        fsync_interval_s: float | None = None,
        write_error: Callable[[OSError], Exception] | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.key_of = key_of
        self.validate = validate
        self.who = who
        self.fsync = bool(fsync)
        self.fsync_interval_s = fsync_interval_s
        self._synced_at = time.monotonic()
        self._unsynced = False
        self.write_error = write_error
        self.max_line_bytes = max_line_bytes
        self._fd: int | None = None
        self._store: OccurrenceStore | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store) if self._store is not None else 0

    @property
    def store(self) -> OccurrenceStore:
        return self.load()

    def load(self, *, create: bool = False) -> OccurrenceStore:
        """Read the file (once) and repair its tail; with ``create`` the file is opened for
        appending (and created) now rather than at the first append."""
        store = self._store
        if store is not None and (self._fd is not None or not create):
            return store
        with self._lock:
            if self._store is None:
                exists = self.path.exists()
                if exists or create:
                    self._open_locked()
                else:
                    self._store = OccurrenceStore()
            elif create and self._fd is None:
                self._open_locked()
            assert self._store is not None
            return self._store

    def _open_locked(self) -> None:
        """Open for appending, read the records, cut off a torn last line (lock held)."""
        fd, _ = open_for_append(self.path, self.who)
        try:
            scan = scan_jsonl(
                self.path,
                self.validate,
                what=f"{self.who} record",
                max_line_bytes=self.max_line_bytes,
            )
            if scan.valid_end < scan.size:
                logger.warning(
                    "%s: cutting off %d bytes of a torn last line before appending",
                    self.path,
                    scan.size - scan.valid_end,
                )
                os.ftruncate(fd, scan.valid_end)
            if scan.newline_missing:
                self._write(fd, b"\n")
        except BaseException:
            os.close(fd)
            raise
        if self._store is None:
            store = OccurrenceStore()
            store.load_all(scan.records, self.key_of)
            self._store = store
        self._fd = fd

    def take(self, key: str) -> tuple[int, dict[str, Any] | None]:
        """Claim the next occurrence of ``key`` (see ``OccurrenceStore.take``)."""
        return self.load().take(key)

    def append(self, key: str, occurrence: int, record: Mapping[str, Any], line: bytes) -> None:
        """Append ``line`` (the encoded ``record``) atomically, and store the record."""
        self.load(create=True)
        with self._lock:
            if self._fd is None or self._store is None:  # closed by another thread meanwhile
                raise DataError(f"{self.who}: the call log {str(self.path)!r} is closed")
            self._write(self._fd, line)
            self._store.put(key, occurrence, record)

    def _write(self, fd: int, data: bytes) -> None:
        """Write all of ``data``: one ``os.write`` unless the OS accepts only part of it. On
        failure the file is cut back to its size before and ``write_error`` is raised."""
        try:
            before = os.fstat(fd).st_size
        except OSError:
            before = None
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if self.fsync:
                now = time.monotonic()
                if self.fsync_interval_s is None or now - self._synced_at >= self.fsync_interval_s:
                    os.fsync(fd)
                    self._synced_at, self._unsynced = now, False
                else:
                    self._unsynced = True
        except OSError as exc:
            if before is not None:
                try:
                    os.ftruncate(fd, before)
                except OSError:
                    logger.warning("%s: could not cut off a partly written record", self.path)
            if self.write_error is None:
                raise
            raise self.write_error(exc) from exc

    def close(self, *, sync: bool = True) -> None:
        """Close the file (idempotent; the records stay loaded, and a later ``append``
        opens it again), after an ``fsync`` of records not yet synced unless ``sync`` is
        False (the file is about to be deleted)."""
        with self._lock:
            fd, self._fd = self._fd, None
            unsynced, self._unsynced = self._unsynced, False
        if fd is not None:
            try:
                if unsynced and sync:
                    os.fsync(fd)
            except OSError:
                logger.warning("%s: the last records could not be fsynced", self.path)
            finally:
                os.close(fd)
