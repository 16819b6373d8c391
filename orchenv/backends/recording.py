"""Record every agent call of a run to a replay file, and resume a run that was cut short.

Why: a live evaluation can be replayed exactly (``ReplayBackend``) only if
each call was written down, and a long run killed halfway (a preempted job,
an OOM, Ctrl-C) should restart without paying again for the calls it made.

``RecordingBackend(inner=..., path=...)`` wraps any backend. Each finished
call is appended to the file (format: ``orchenv.backends.replay``) as one
complete JSON line, written with a single ``os.write`` on a descriptor opened
with ``O_APPEND`` and then ``fsync``-ed. On POSIX an ``O_APPEND`` write places
its bytes at the end of the file atomically, and on local file systems a
regular-file write of a few kilobytes is not interleaved with other writers;
inside one process a lock serialises the writes anyway. A killed run
therefore keeps every finished record and at worst one trailing partial line,
which readers skip and which the next recorder cuts off before appending.

With ``resume=True`` (default) a call already in the file is answered from it without calling
the inner backend, so re-running the same seeds skips everything already recorded. Identical
requests are distinct calls (``orchenv.backends.store``): the n-th identical request of the run
is answered by the n-th recorded answer when there is one, and otherwise goes to the inner
backend and is recorded as occurrence n. So recording never changes a live run: forked
branches and self-consistency samples against a sampling model each get their own answer,
with or without ``--record``, and a replay gives each the answer it got.

The target is checked when the backend is built, before any call is paid for: it
must be a regular file (or not exist yet) in a folder it can be created in, proven
by opening it for appending (``ConfigError`` otherwise: a directory, ``/dev/full``,
a FIFO or a read-only place fail at once, not after the first paid call). A write
that fails later (disk full, quota) raises ``OutputError``; the file is cut back to
its last complete record, so nothing already recorded is lost or torn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchenv.backends.common import RebuiltOnCopy, require_task
from orchenv.backends.replay import (
    MAX_RECORD_BYTES,
    RECORDS_KEYED_ON,
    check_keying,
    completion_from_record,
    encode_record,
    make_record,
    record_key,
    replay_key,
    validate_record,
)
from orchenv.backends.store import CallLog, check_writable_target
from orchenv.calltypes import (
    AgentSpec,
    Backend,
    Call,
    CallContext,
    Completion,
    Message,
    with_measured_latency,
)
from orchenv.error import BackendError, ConfigError, OutputError
from orchenv.pool import make_backend

logger = logging.getLogger(__name__)

_PARQUET_SUFFIXES = (".parquet", ".pq")


class RecordingBackend(RebuiltOnCopy):
    """Wraps a backend and appends each call it answers to a JSON Lines replay file.

    Args:
        inner: the backend that answers (an instance, or a registered name
            built here with ``inner_kwargs``).
        path: the replay file; created at the first call (its folder when the backend is
            built, which fails with a ``ConfigError`` naming the fix if the file could
            not be written).
        keying: ``"prompt"`` or ``"turn"``: how calls are matched when resuming
            (and the ``key`` written in each record).
        inner_kwargs: keyword arguments for an inner backend given by name.
        resume: answer calls already in the file from the file instead of
            calling ``inner`` (marked ``cached=True``; see ``completion_from_record``).
            With ``resume=False`` every call goes to ``inner`` and is appended,
            even when it is recorded (readers keep the first record of a key and
            occurrence).
        fsync: ``fsync`` after every record (durable across power loss; turn it
            off for fast simulated runs where a lost tail is harmless).

    The file is read once, lazily, at the first call. The inner call runs
    outside the lock (calls proceed concurrently); appends are serialised.
    When the inner backend reports no latency, the recorder measures it, as
    ``AgentPool.call`` would, so a replay reports the same figure. One recording
    process per file is the supported setup.
    """

    # a copy (in another process) opens its own descriptor and rereads the file
    _fresh_on_copy = {"_calls": None}

    def __init__(
        self,
        *,
        inner: Backend | str,
        path: str | Path,
        keying: str = "prompt",
        inner_kwargs: Mapping[str, Any] | None = None,
        resume: bool = True,
        fsync: bool = True,
    ) -> None:
        self.keying = check_keying(keying)
        self.path = Path(path)
        if self.path.suffix.lower() in _PARQUET_SUFFIXES:
            raise ConfigError(
                f"RecordingBackend writes JSON Lines; {str(self.path)!r} looks like parquet. "
                "Record to a .jsonl file and convert it afterwards if needed."
            )
        check_writable_target(self.path, "RecordingBackend")
        if isinstance(inner, str):
            self.inner: Backend = make_backend(inner, **dict(inner_kwargs or {}))
        else:
            if inner_kwargs:
                raise ConfigError("inner_kwargs applies only to an inner backend given by name")
            self.inner = inner
        self.resume = bool(resume)
        self.fsync = bool(fsync)
        self.max_concurrency = getattr(self.inner, "max_concurrency", None)
        if callable(getattr(self.inner, "complete_batch", None)):
            # only then: AgentPool.call_many batches backends that have the attribute
            self.complete_batch = self._complete_batch
        self._calls: CallLog | None = None
        self._closed = False
        self._lock = threading.Lock()
        self.recorded = 0  # records appended by this backend
        self.resumed = 0  # calls answered from the file

    def __repr__(self) -> str:
        return (
            f"RecordingBackend(inner={self.inner!r}, path={str(self.path)!r}, "
            f"keying={self.keying!r}, resume={self.resume}, fsync={self.fsync})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("complete_batch", None)  # a bound method: set again on unpickling
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if callable(getattr(self.inner, "complete_batch", None)):
            self.complete_batch = self._complete_batch

    # -- the file -----------------------------------------------------------------------
    def _log(self) -> CallLog:
        """The file's call log, opened and read at the first call (a torn last line is cut
        off, a parquet file refused)."""
        log = self._calls
        if log is None:
            with self._lock:
                if self._closed:
                    raise BackendError(f"RecordingBackend for {str(self.path)!r} is closed")
                if self._calls is None:
                    if self.path.is_file():
                        with self.path.open("rb") as fh:
                            if fh.read(4) == b"PAR1":
                                raise ConfigError(
                                    f"{str(self.path)!r} is a parquet file; RecordingBackend "
                                    "appends JSON Lines"
                                )
                    calls = CallLog(
                        self.path,
                        key_of=self._key_of,
                        validate=validate_record,
                        who="RecordingBackend",
                        fsync=self.fsync,
                        write_error=self._write_error,
                        max_line_bytes=MAX_RECORD_BYTES,
                    )
                    calls.load(create=True)
                    logger.info(
                        "recording to %s (%d records already there, resume=%s)",
                        self.path,
                        len(calls),
                        self.resume,
                    )
                    self._calls = calls
                log = self._calls
        return log

    def _write_error(self, exc: OSError) -> OutputError:
        return OutputError(
            exc.errno,
            f"cannot append to the recording {str(self.path)!r}: {exc.strerror or exc}. "
            "The records already there are intact; free space (or pick another --record "
            "file) and rerun the same command: recorded calls are not made again",
            str(self.path),
        )

    def _key_of(self, record: Mapping[str, Any]) -> str:
        return record_key(record, self.keying)

    def _append(self, key: str, occurrence: int, record: dict[str, Any]) -> None:
        self._log().append(key, occurrence, record, encode_record(record))
        with self._lock:
            self.recorded += 1

    def _take(self, key: str) -> tuple[int, Completion | None]:
        """Claim the next occurrence of ``key``: its number, and the recorded answer when
        resuming and one is there."""
        occurrence, record = self._log().take(key)
        if not self.resume or record is None:
            return occurrence, None
        with self._lock:
            self.resumed += 1
        return occurrence, completion_from_record(record)

    @staticmethod
    def _task_id(spec: AgentSpec, context: CallContext) -> str:
        return require_task(context, spec, "recording backend", RECORDS_KEYED_ON, by_turn=True).id

    # -- the Backend protocol -------------------------------------------------------------
    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """The recorded answer when resuming, else the inner backend's answer, recorded."""
        task_id = self._task_id(spec, context)
        key = replay_key(task_id, spec.name, messages, context.turn, self.keying)
        occurrence, hit = self._take(key)
        if hit is not None:
            return hit
        start = time.perf_counter()
        completion = with_measured_latency(self.inner.complete(spec, messages, context), start)
        record = self._record(task_id, spec, messages, context, completion, occurrence)
        self._append(key, occurrence, record)
        return completion

    def _record(
        self,
        task_id: str,
        spec: AgentSpec,
        messages: Sequence[Message],
        context: CallContext,
        completion: Completion,
        occurrence: int = 0,
    ) -> dict[str, Any]:
        return make_record(
            task_id=task_id,
            agent=spec.name,
            turn=context.turn,
            messages=messages,
            completion=completion,
            keying=self.keying,
            occurrence=occurrence,
        )

    def _complete_batch(self, calls: Sequence[Call]) -> list[Completion]:
        """Batched calls: recorded ones from the file, the rest as one inner batch, recorded."""
        results: list[Completion | None] = [None] * len(calls)
        todo: list[int] = []
        keys: list[str] = []
        occurrences: list[int] = []
        task_ids: list[str] = []
        for i, (spec, messages, context) in enumerate(calls):
            task_ids.append(self._task_id(spec, context))
            key = replay_key(task_ids[i], spec.name, messages, context.turn, self.keying)
            keys.append(key)
            occurrence, hit = self._take(key)
            occurrences.append(occurrence)
            if hit is None:
                todo.append(i)
            else:
                results[i] = hit
        if todo:
            out = self.inner.complete_batch([calls[i] for i in todo])  # type: ignore[attr-defined]
            if len(out) != len(todo):
                raise BackendError(
                    f"inner backend {self.inner!r} returned {len(out)} completions "
                    f"for a batch of {len(todo)}"
                )
            for i, completion in zip(todo, out, strict=True):
                spec, messages, context = calls[i]
                record = self._record(
                    task_ids[i], spec, messages, context, completion, occurrences[i]
                )
                self._append(keys[i], occurrences[i], record)
                results[i] = completion
        return [r for r in results if r is not None]

    def close(self) -> None:
        """Close the file and the inner backend (idempotent)."""
        with self._lock:
            calls, self._calls = self._calls, None
            already, self._closed = self._closed, True
        if calls is not None:
            calls.close()
        if not already:
            close = getattr(self.inner, "close", None)
            if callable(close):
                close()
