"""Per-episode call journal: a live call is paid for once, even when its episode fails.

Why: an evaluation against served models can fail mid-episode (server down, rate limit,
timeout). ``OrchestrationEnv`` then marks the episode failed and the harness retries it
whole, from ``reset``. Without a journal the retry (or a later resume of the same command)
would buy again every call that had already succeeded. With it, each successful call is
appended to the episode's journal file as it returns, and the retry is served from that
file: the same request gets the same answer, so the retried episode's record is identical
to an uninterrupted run's and only the calls that never succeeded reach the server.

Files: ``OUT/journal/s{seed}-e{episode}.jsonl``, one JSON line per successful call
(``{"v": 1, "key": sha256, "occurrence": n, "completion": {...}}``), deleted once the
episode's line is in ``episodes.jsonl``. The file is the call store recording and replay use
(``orchenv.backends.store.CallLog``): each line is appended in one ``write`` and fsynced, a
torn last line (a kill mid-write) is cut off, a corrupt line elsewhere or one that breaks the
schema is a ``DataError`` naming it. Calls to backends that are free and deterministic
(``simulated``, ``replay``) are not journaled: repeating them costs nothing and gives the
same answer.

Matching: a call's key is its agent, model, messages and context (task, turn, draft,
feedback); the n-th call with a key in the retry is served the n-th journaled answer for
that key (``occurrence``, as in recording and replay: self-consistency samples and forked
branches repeat a request and get different answers). Lines written before ``occurrence``
was stored count in file order.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchenv.backends.store import CallLog, encode_line
from orchenv.error import ConfigError, DataError, OrchEnvError, SchemaError
from orchenv.pool import AgentPool, AgentSpec, Backend, Call, CallContext, Completion, Message
from orchenv.schema import COMPLETION

logger = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
#: the journal line format's version
JOURNAL_VERSION = 1
#: backends whose calls cost nothing and repeat exactly: never journaled
FREE_BACKENDS = frozenset({"simulated", "replay"})


def call_key(spec: AgentSpec, messages: Sequence[Message], context: CallContext) -> str:
    """What identifies a request within an episode (sha256 of a canonical JSON)."""
    task = context.task
    fields = [
        spec.name,
        spec.model,
        [dict(m) for m in messages],
        None if task is None else task.id,
        context.turn,
        context.draft,
        context.feedback,
    ]
    text = json.dumps(fields, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _completion_from(data: Mapping[str, Any]) -> Completion:
    """A journaled completion, exactly as it was returned (not marked cached: it was paid
    for once, in this episode, and the episode's record must say so)."""
    return Completion(
        agent=str(data.get("agent") or ""),
        text=str(data["text"]),
        prompt_tokens=int(data["prompt_tokens"]),
        completion_tokens=int(data["completion_tokens"]),
        cost_usd=float(data["cost_usd"]),
        latency_s=float(data.get("latency_s") or 0.0),
        cached=bool(data.get("cached", False)),
        token_source=str(data.get("token_source", "estimate")),
        meta=dict(data.get("meta") or {}),
    )


class _JournalRows:
    """The schema check of journal lines (``{"v": 1, "key", "occurrence", "completion"}``).

    A line without ``occurrence`` (written before it was stored) is the next occurrence of
    its key in file order, which is what the journal always meant. One instance per file read.
    """

    def __init__(self) -> None:
        self._seen: Counter[str] = Counter()

    def __call__(self, row: Any, where: str) -> dict[str, Any]:
        if not isinstance(row, dict):
            raise SchemaError(f"{where}: a journal line must be an object")
        unknown = set(row) - {"v", "key", "occurrence", "completion"}
        if unknown:
            raise SchemaError(f"{where}: unknown journal field(s) {sorted(unknown)}")
        if row.get("v") != JOURNAL_VERSION:
            raise SchemaError(f"{where}: journal version {row.get('v')!r} is not {JOURNAL_VERSION}")
        key = row.get("key")
        if not isinstance(key, str) or len(key) != 64:
            raise SchemaError(f"{where}: field 'key' must be a sha256 hex digest")
        occurrence = row.get("occurrence")
        if occurrence is None:
            occurrence = self._seen[key]
        elif isinstance(occurrence, bool) or not isinstance(occurrence, int) or occurrence < 0:
            raise SchemaError(f"{where}: field 'occurrence' must be an int >= 0")
        self._seen[key] += 1
        completion = COMPLETION.validate(row.get("completion"), where, prefix="completion.")
        return {
            "v": JOURNAL_VERSION,
            "key": key,
            "occurrence": occurrence,
            "completion": completion,
        }


def _key_of(row: Mapping[str, Any]) -> str:
    return str(row["key"])


class CallJournal:
    """The journal of the episode being played (``begin`` / ``finish`` around each one).

    Thread-safe: ``AgentPool.call_many`` calls from several threads at once. The file is an
    ``orchenv.backends.store.CallLog`` (the store recording and replay use): atomic appends,
    torn-line repair and a schema check of every line read back; ``fsync`` at most once per
    ``fsync_interval_s`` (default 1 s, like ``episodes.jsonl``, and when the episode stops;
    ``None``: after every call, about 7 ms per call on the sandbox's disk). A killed
    process loses no journaled call either way; a power cut at most the last second's, which
    are bought again.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: bool = True,
        fsync_interval_s: float | None = 1.0,
    ) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self._lock = threading.Lock()
        self._log: CallLog | None = None
        #: calls served from the journal / bought, in the current episode
        self.served = 0
        self.bought = 0

    def path_for(self, seed: int, episode: int) -> Path:
        return self.directory / f"s{seed}-e{episode}.jsonl"

    @property
    def _path(self) -> Path | None:
        return None if self._log is None else self._log.path

    def begin(self, seed: int, episode: int) -> int:
        """Start (or restart) an episode: load what earlier attempts journaled; returns how
        many calls are on file."""
        self.close()
        path = self.path_for(seed, episode)
        log = CallLog(
            path,
            key_of=_key_of,
            validate=_JournalRows(),
            who="call journal",
            fsync=self.fsync,
            fsync_interval_s=self.fsync_interval_s,
            write_error=lambda exc: self._write_error(path, exc),
        )
        try:
            log.load()
        except ConfigError as exc:  # a directory or device where the journal goes
            raise DataError(f"cannot open the call journal {path}: {exc}") from exc
        self._log = log
        self.served = self.bought = 0
        return len(log)

    def finish(self) -> None:
        """The episode's line is safely logged: its journal is no longer needed."""
        path = self._path
        with self._lock:
            if self._log is not None:
                self._log.close(sync=False)  # deleted next: nothing to make durable
        if path is not None:
            path.unlink(missing_ok=True)
        self._log = None

    def close(self) -> None:
        """Stop writing (the file stays, for the next attempt or resume)."""
        with self._lock:
            if self._log is not None:
                self._log.close()

    def discard(self, seed: int, episode: int) -> None:
        """Remove a journal left by an episode that is already logged."""
        self.path_for(seed, episode).unlink(missing_ok=True)

    # -- calls ------------------------------------------------------------------------------
    def complete(
        self, backend: Backend, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        key = call_key(spec, messages, context)
        occurrence, hit = self._take(key)
        if hit is not None:
            return hit
        completion = backend.complete(spec, messages, context)
        self._append(key, occurrence, completion)
        return completion

    def complete_batch(self, backend: Backend, calls: Sequence[Call]) -> list[Completion]:
        keys = [call_key(*call) for call in calls]
        taken = [self._take(key) for key in keys]
        results: list[Completion | None] = [hit for _, hit in taken]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            fresh = backend.complete_batch([calls[i] for i in missing])  # type: ignore[attr-defined]
            for i, completion in zip(missing, fresh, strict=True):
                self._append(keys[i], taken[i][0], completion)
                results[i] = completion
        return [r for r in results if r is not None]

    def _take(self, key: str) -> tuple[int, Completion | None]:
        log = self._log
        if log is None:  # no episode begun: nothing on file, nothing kept
            return 0, None
        occurrence, row = log.take(key)
        if row is None:
            return occurrence, None
        with self._lock:
            self.served += 1
        return occurrence, _completion_from(row["completion"])

    def _append(self, key: str, occurrence: int, completion: Completion) -> None:
        with self._lock:
            self.bought += 1
        log = self._log
        if log is None:
            return
        row = {"v": JOURNAL_VERSION, "key": key, "occurrence": occurrence,
               "completion": completion.to_dict()}  # fmt: skip
        try:
            log.append(key, occurrence, row, encode_line(row, str))
        except ConfigError as exc:  # the folder cannot be written
            raise DataError(
                f"cannot write the call journal {log.path} ({exc}); the episode's paid calls "
                "could not be saved. Choose a writable --out directory, then rerun the same "
                "command."
            ) from exc

    @staticmethod
    def _write_error(path: Path, exc: OSError) -> DataError:
        return DataError(
            f"cannot write the call journal {path} ({exc.strerror or exc}); the episode's "
            "paid calls could not be saved. Free disk space or choose a writable --out "
            "directory, then rerun the same command."
        )


_LANE_JOURNAL: contextvars.ContextVar[CallJournal | None] = contextvars.ContextVar(
    "orchenv_lane_journal", default=None
)


@contextlib.contextmanager
def use_journal(journal: CallJournal | None) -> Iterator[None]:
    """Within this block (in this thread or greenlet), journaled backends use ``journal``
    instead of the one they were attached with: each concurrently played episode has its
    own (``orchenv eval --concurrency``)."""
    token = _LANE_JOURNAL.set(journal)
    try:
        yield
    finally:
        _LANE_JOURNAL.reset(token)


class JournaledBackend:
    """A pool backend whose calls go through a ``CallJournal`` (the one of the episode
    being played: ``use_journal``'s when set, else the one given here)."""

    def __init__(self, inner: Backend, journal: CallJournal) -> None:
        self.inner = inner
        self.journal = journal
        concurrency = getattr(inner, "max_concurrency", None)
        if concurrency is not None:
            self.max_concurrency = concurrency

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        journal = _LANE_JOURNAL.get() or self.journal
        return journal.complete(self.inner, spec, messages, context)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


class JournaledBatchBackend(JournaledBackend):
    """The same, for engines that batch natively (``complete_batch``)."""

    def complete_batch(self, calls: Sequence[Call]) -> list[Completion]:
        journal = _LANE_JOURNAL.get() or self.journal
        return journal.complete_batch(self.inner, calls)


def attach_to_env(env: Any, journal: CallJournal) -> Callable[[], None] | None:
    """Route the paid backends of ``env``'s pool through ``journal``; returns the undo, or
    ``None`` when there is nothing to journal (no pool, or only free backends)."""
    try:
        pool = getattr(env.unwrapped, "pool", None)
    except OrchEnvError:  # an env without a pool
        pool = None
    if not isinstance(pool, AgentPool):
        return None

    def wrap(name: str, backend: Backend) -> Backend:
        if name in FREE_BACKENDS:
            return backend
        kind = JournaledBatchBackend if hasattr(backend, "complete_batch") else JournaledBackend
        return kind(backend, journal)

    if all(spec.backend in FREE_BACKENDS for spec in pool.agents):
        return None
    return pool.wrap_backends(wrap)
