"""Per-episode call journal: a live call is paid for once, even when its episode fails.

Why: an evaluation against served models can fail mid-episode (server down, rate limit,
timeout). ``OrchestrationEnv`` then marks the episode failed and the harness retries it
whole, from ``reset``. Without a journal the retry (or a later resume of the same command)
would buy again every call that had already succeeded. With it, each successful call is
appended to the episode's journal file as it returns, and the retry is served from that
file: the same request gets the same answer, so the retried episode's record is identical
to an uninterrupted run's and only the calls that never succeeded reach the server.

Files: ``OUT/journal/s{seed}-e{episode}.jsonl``, one JSON line per successful call (written
in one ``write``, like ``episodes.jsonl``), deleted once the episode's line is in
``episodes.jsonl``. A torn last line (a kill mid-write) is ignored. Calls to backends that
are free and deterministic (``simulated``, ``replay``) are not journaled: repeating them
costs nothing and gives the same answer.

Matching: a call's key is its agent, model, messages and context (task, turn, draft,
feedback); the n-th call with a key in the retry is served the n-th journaled answer for
that key (self-consistency samples repeat a request and get different answers).
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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from orchenv.error import DataError, OrchEnvError
from orchenv.pool import AgentPool, AgentSpec, Backend, Call, CallContext, Completion, Message
from orchenv.schema import COMPLETION, parse_json

logger = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
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


def _completion_from(raw: Any, where: str) -> Completion:
    """A journaled completion, exactly as it was returned (not marked cached: it was paid
    for once, in this episode, and the episode's record must say so)."""
    data = COMPLETION.validate(raw, where, prefix="completion.")
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


class CallJournal:
    """The journal of the episode being played (``begin`` / ``finish`` around each one).

    Thread-safe: ``AgentPool.call_many`` calls from several threads at once.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._fd: int | None = None
        self._answers: dict[str, list[Completion]] = {}
        self._seen: Counter[str] = Counter()
        #: calls served from the journal / bought, in the current episode
        self.served = 0
        self.bought = 0

    def path_for(self, seed: int, episode: int) -> Path:
        return self.directory / f"s{seed}-e{episode}.jsonl"

    def begin(self, seed: int, episode: int) -> int:
        """Start (or restart) an episode: load what earlier attempts journaled; returns how
        many calls are on file."""
        self.close()
        self._path = self.path_for(seed, episode)
        self._answers, self._seen = self._load(self._path), Counter()
        self.served = self.bought = 0
        return sum(len(v) for v in self._answers.values())

    def finish(self) -> None:
        """The episode's line is safely logged: its journal is no longer needed."""
        path = self._path
        self.close()
        if path is not None:
            path.unlink(missing_ok=True)
        self._path = None

    def close(self) -> None:
        """Stop writing (the file stays, for the next attempt or resume)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def discard(self, seed: int, episode: int) -> None:
        """Remove a journal left by an episode that is already logged."""
        self.path_for(seed, episode).unlink(missing_ok=True)

    # -- calls ------------------------------------------------------------------------------
    def complete(
        self, backend: Backend, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        key = call_key(spec, messages, context)
        hit = self._take(key)
        if hit is not None:
            return hit
        completion = backend.complete(spec, messages, context)
        self._append(key, completion)
        return completion

    def complete_batch(self, backend: Backend, calls: Sequence[Call]) -> list[Completion]:
        keys = [call_key(*call) for call in calls]
        results: list[Completion | None] = [self._take(key) for key in keys]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            fresh = backend.complete_batch([calls[i] for i in missing])  # type: ignore[attr-defined]
            for i, completion in zip(missing, fresh, strict=True):
                self._append(keys[i], completion)
                results[i] = completion
        return [r for r in results if r is not None]

    def _take(self, key: str) -> Completion | None:
        with self._lock:
            n = self._seen[key]
            self._seen[key] += 1
            answers = self._answers.get(key, [])
            if n < len(answers):
                self.served += 1
                return answers[n]
            return None

    def _append(self, key: str, completion: Completion) -> None:
        line = json.dumps(
            {"v": 1, "key": key, "completion": completion.to_dict()},
            ensure_ascii=False,
            separators=(",", ":"),
            default=str,
        )
        data = (line + "\n").encode("utf-8", "surrogatepass")
        with self._lock:
            self.bought += 1
            if self._path is None:
                return
            try:
                if self._fd is None:
                    self.directory.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                written = os.write(self._fd, data)
                if written != len(data):
                    raise OSError(f"short write ({written} of {len(data)} bytes)")
            except OSError as exc:
                raise DataError(
                    f"cannot write the call journal {self._path} ({exc.strerror or exc}); the "
                    "episode's paid calls could not be saved. Free disk space or choose a "
                    "writable --out directory, then rerun the same command."
                ) from exc

    @staticmethod
    def _load(path: Path) -> dict[str, list[Completion]]:
        answers: dict[str, list[Completion]] = {}
        try:
            lines = path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return answers
        except OSError as exc:
            raise DataError(f"cannot read the call journal {path}: {exc}") from exc
        for n, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            where = f"{path} line {n}"
            try:
                row = parse_json(raw, where)
                key = row["key"]
                if not isinstance(key, str):
                    raise TypeError("key is not a string")
                completion = _completion_from(row["completion"], where)
            except (OrchEnvError, ValueError, KeyError, TypeError) as exc:
                # a torn last line after a kill; anything else means the file was edited
                logger.warning("%s line %d is unreadable (%s): ignored", path, n, exc)
                continue
            answers.setdefault(key, []).append(completion)
        return answers


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
