"""Replay recorded agent calls: deterministic, free and offline re-runs of a live run.

Why: live LLM calls are slow, cost money and never answer twice the same.
``RecordingBackend`` (``orchenv.backends.recording``) writes every call of a
run to a replay file; ``ReplayBackend`` answers the same calls from that file,
so an evaluation, a bug report or a figure can be reproduced exactly without
the models.

Replay file format (version 2)
------------------------------
JSON Lines, one record per agent call, UTF-8 (``orchenv.schema.REPLAY_RECORD`` and
``COMPLETION`` check each; token counts are ints in ``[0, MAX_CALL_TOKENS]``, costs and
latencies finite and non-negative, and a wrong type, an unknown key or a value out of
range is a ``SchemaError`` naming the file, line and field)::

    {"v": 2,
     "key": "<task_id>\\x1f<agent>\\x1f<prompt_sha256>",   # or "...\\x1fturn=<turn>"
     "task_id": "...", "agent": "...", "turn": 2,
     "prompt_sha256": "<hex sha256 of the canonical JSON of the messages>",
     "occurrence": 0,       # identical requests before this one in the run (0, 1, 2, ...)
     "completion": {Completion.to_dict(): agent, text, prompt_tokens, completion_tokens,
                    cost_usd, latency_s, cached, token_source, meta},
     "recorded_at": "2025-01-01T12:00:00.000+00:00"}

``prompt_sha256`` hashes ``json.dumps(messages, sort_keys=True,
ensure_ascii=False, separators=(",", ":"))`` encoded as UTF-8.

Keying: ``"prompt"`` (default) matches a call by task id, agent and the exact
prompt, so a replay answers only calls that were really made. ``"turn"``
matches by task id, agent and turn number, for runs whose prompts change in
irrelevant ways (a template edit, a timestamp) but whose trajectory is fixed;
two episodes on the same task that diverge share turn keys (the first record
wins). Readers derive the key from the record's fields for the keying asked
for, so a file recorded with one keying can be replayed with the other; the
stored ``key`` is informational.

A file may also be a parquet table with the same columns (``completion`` as a
JSON string column), for large logs converted offline; writers always write
JSON Lines.

Repeated requests: identical requests (forked branches of a state, self-consistency samples,
retries) are distinct calls with their own answers. Each record stores its ``occurrence``, and a
replay gives the n-th identical request of the run the n-th recorded answer
(``orchenv.backends.store``), so every branch and sample gets the answer it got live; a request
repeated more often than recorded is a miss. Format 1 files (no ``occurrence``) still load: a
key that appears more than once there means the same answer for every occurrence (the first
record wins), as before. A truncated or
corrupt *last* line (a writer killed mid-write) is skipped with a warning; a
corrupt line anywhere else is a ``DataError`` naming the line. A line longer than
``MAX_RECORD_BYTES`` is refused (a record is a few kilobytes; an endless line would
otherwise be read until memory runs out).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchenv.backends.common import RebuiltOnCopy, require_task
from orchenv.backends.store import JsonlScan, OccurrenceStore, encode_line
from orchenv.backends.store import scan_jsonl as store_scan_jsonl
from orchenv.error import BackendError, ConfigError, DataError, require
from orchenv.pool import AgentSpec, Backend, CallContext, Completion, Message, make_backend
from orchenv.schema import COMPLETION, REPLAY_RECORD, parse_json

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
#: versions this orchenv reads (1: no ``occurrence``; a repeated key answers every repeat)
READABLE_VERSIONS = (1, 2)
KEYINGS = ("prompt", "turn")
MODES = ("strict", "fallthrough")
_SEP = "\x1f"  # ASCII unit separator: cannot occur in ids written by hand
_PARQUET_MAGIC = b"PAR1"
#: why the replay and recording backends need the call's task (``require_task``)
RECORDS_KEYED_ON = "records are keyed on the task id"
#: the longest replay line read (a record holds one call's text and extras)
MAX_RECORD_BYTES = 64 * 2**20


# -- keys -----------------------------------------------------------------------------
def check_keying(keying: str) -> str:
    """Validate a keying name (shared by the replay and recording backends)."""
    if keying not in KEYINGS:
        raise ConfigError(f"keying must be one of {KEYINGS}, got {keying!r}")
    return keying


def prompt_sha256(messages: Sequence[Message]) -> str:
    """Hex SHA-256 of the canonical JSON of a messages list (the replay format's prompt hash)."""
    canonical = json.dumps(
        [dict(m) for m in messages], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def key_from_fields(
    task_id: str, agent: str, prompt_hash: str | None, turn: int, keying: str = "prompt"
) -> str:
    """A replay key from a record's fields (no messages needed)."""
    if keying == "turn":
        return f"{task_id}{_SEP}{agent}{_SEP}turn={int(turn)}"
    check_keying(keying)
    if not prompt_hash:
        raise DataError(f"prompt keying needs a prompt_sha256 (task {task_id!r}, agent {agent!r})")
    return f"{task_id}{_SEP}{agent}{_SEP}{prompt_hash}"


def record_key(record: Mapping[str, Any], keying: str = "prompt") -> str:
    """The key a stored record answers under, derived from its fields for ``keying``."""
    return key_from_fields(
        record["task_id"], record["agent"], record.get("prompt_sha256"), record["turn"], keying
    )


def replay_key(
    task_id: str, agent: str, messages: Sequence[Message], turn: int, keying: str = "prompt"
) -> str:
    """The key a call is recorded and replayed under (see the module docstring)."""
    check_keying(keying)
    digest = prompt_sha256(messages) if keying == "prompt" else None
    return key_from_fields(task_id, agent, digest, turn, keying)


def describe_key(key: str) -> str:
    """A key with its separators made visible, for messages."""
    return key.replace(_SEP, " | ")


# -- records --------------------------------------------------------------------------
def make_record(
    *,
    task_id: str,
    agent: str,
    turn: int,
    messages: Sequence[Message],
    completion: Completion,
    keying: str = "prompt",
    occurrence: int = 0,
) -> dict[str, Any]:
    """One replay record (format version 2) for a finished call: ``occurrence`` counts the
    identical requests before it in the run (``orchenv.backends.store``)."""
    digest = prompt_sha256(messages)
    return {
        "v": FORMAT_VERSION,
        "key": key_from_fields(task_id, agent, digest, turn, keying),
        "task_id": task_id,
        "agent": agent,
        "turn": int(turn),
        "prompt_sha256": digest,
        "occurrence": int(occurrence),
        "completion": completion.to_dict(),
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    }


def _json_default(obj: Any) -> Any:
    """JSON fallback for backend extras in ``meta`` (numpy scalars and arrays, sets, paths)."""
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return obj.item()
        except (TypeError, ValueError):
            pass
    if hasattr(obj, "tolist") and callable(obj.tolist):
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    logger.debug("replay record: storing %s value as its str()", type(obj).__name__)
    return str(obj)


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One record as a single UTF-8 JSON line ending in ``\\n`` (newlines in text are escaped)."""
    return encode_line(record, _json_default)


def completion_from_record(record: Mapping[str, Any]) -> Completion:
    """The recorded completion, marked as replayed (``cached=True``).

    Tokens, cost, text and meta are the recorded ones; ``latency_s`` is the
    original call's latency (kept for analysis; serving from the file is instant).
    ``token_source`` stays ``"server"`` or ``"tokenizer"`` when the file stores counts
    the serving model reported (they are exact, not estimated); otherwise it is
    ``"record"``.
    """
    c = record["completion"]
    source = c.get("token_source")
    return Completion(
        agent=str(c.get("agent") or record["agent"]),
        text=c["text"],
        prompt_tokens=int(c["prompt_tokens"]),
        completion_tokens=int(c["completion_tokens"]),
        cost_usd=float(c["cost_usd"]),
        latency_s=float(c.get("latency_s") or 0.0),
        cached=True,
        token_source=source if source in ("server", "tokenizer") else "record",
        meta=dict(c.get("meta") or {}),
    )


def validate_record(record: Any, where: str) -> dict[str, Any]:
    """A parsed record checked by ``REPLAY_RECORD`` and its completion by ``COMPLETION``;
    ``where`` names the file and line for the ``SchemaError``."""
    if isinstance(record, dict):
        version = record.get("v")
        if version is not None and version not in READABLE_VERSIONS:
            raise DataError(
                f"{where}: replay format version {version!r} is not supported "
                f"(this orchenv reads versions {', '.join(map(str, READABLE_VERSIONS))})"
            )
        turn = record.get("turn")
        if isinstance(turn, float) and turn.is_integer():  # parquet may store ints as floats
            record["turn"] = int(turn)
    record = REPLAY_RECORD.validate(record, where)
    completion = record["completion"]
    if isinstance(completion, str):  # parquet stores it as a JSON string
        try:
            completion = parse_json(completion, f"{where}, field 'completion'")
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: field 'completion' is not valid JSON: {exc}") from exc
    record["completion"] = COMPLETION.validate(completion, where, prefix="completion.")
    digest = record.get("prompt_sha256")
    if not isinstance(record.get("key"), str):
        record["key"] = key_from_fields(
            record["task_id"],
            record["agent"],
            digest,
            record["turn"],
            "prompt" if digest else "turn",
        )
    return record


# -- reading --------------------------------------------------------------------------
def scan_jsonl(path: str | Path) -> JsonlScan:
    """Parse a JSON Lines replay file, tolerating a torn last line (see the module docstring;
    the reading is ``orchenv.backends.store.scan_jsonl``'s, with this format's checks)."""
    return store_scan_jsonl(
        path, validate_record, what="replay record", max_line_bytes=MAX_RECORD_BYTES
    )


def _is_parquet(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == _PARQUET_MAGIC


def _iter_parquet(path: Path) -> Iterator[dict[str, Any]]:
    pq = require("pyarrow.parquet", "data", "reading a parquet replay file")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise DataError(f"{path}: cannot read the parquet replay file: {exc}") from exc
    missing = {"task_id", "agent", "turn", "completion"} - set(table.column_names)
    if missing:
        raise DataError(
            f"{path}: a parquet replay file needs the columns task_id, agent, turn, "
            f"prompt_sha256, completion; missing {sorted(missing)}"
        )
    for i, row in enumerate(table.to_pylist()):
        yield validate_record(row, f"{path} row {i}")


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every valid record of a replay file (JSON Lines or parquet) in file order."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"replay file {str(path)!r} does not exist (or is not a file)")
    if _is_parquet(path):
        yield from _iter_parquet(path)
    else:
        yield from scan_jsonl(path).records


def index_records(
    records: Iterable[Mapping[str, Any]], keying: str | None = None, *, source: str = "records"
) -> dict[str, dict[str, Any]]:
    """Records by key (the stored key, or one derived for ``keying``); the first record wins."""
    if keying is not None:
        check_keying(keying)
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        key = record["key"] if keying is None else record_key(record, keying)
        if key in out:
            logger.debug(
                "%s: duplicate key %s; keeping the first record", source, describe_key(key)
            )
            continue
        out[key] = dict(record)
    return out


def read_records(path: str | Path, keying: str | None = None) -> dict[str, dict[str, Any]]:
    """Records of a replay file by key; duplicate keys keep the first record.

    ``keying=None`` uses the keys stored in the file; ``"prompt"`` or ``"turn"``
    derives them from the records' fields (to replay with another keying).
    """
    return index_records(iter_records(path), keying, source=str(path))


# -- the backend ----------------------------------------------------------------------
class ReplayBackend(RebuiltOnCopy):
    """Answers agent calls from a replay file written by ``RecordingBackend``.

    Args:
        path: the replay file (JSON Lines, or parquet with the same columns).
        mode: ``"strict"`` raises ``BackendError`` for a call that is not in the
            file (a replay that diverged from its recording must not silently
            go live); ``"fallthrough"`` sends it to ``fallback`` instead.
        fallback: the backend for missed calls in fallthrough mode: an instance
            or a registered backend name (built on the first miss).
        keying: ``"prompt"`` or ``"turn"`` (see the module docstring).
        fallback_kwargs: keyword arguments for a fallback given by name.

    The file is read once, lazily, at the first call (thread-safe). A hit is the
    recorded completion with ``cached=True`` (``token_source`` as recorded when the server
    or a tokenizer counted, else ``"record"``); its
    ``latency_s`` is the original call's latency (for analysis; a replay itself
    is instant). A fallthrough answer is the fallback's completion, unchanged.
    """

    _fresh_on_copy = {"_store": None, "_by_task_agent": {}}  # reloaded lazily

    def __init__(
        self,
        *,
        path: str | Path,
        mode: str = "strict",
        fallback: Backend | str | None = None,
        keying: str = "prompt",
        fallback_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
        self.keying = check_keying(keying)
        if mode == "fallthrough" and fallback is None:
            raise ConfigError(
                "ReplayBackend(mode='fallthrough') needs a fallback backend (an instance or a "
                "registered name such as 'simulated') to answer calls missing from the file"
            )
        if mode == "strict" and fallback is not None:
            logger.warning("ReplayBackend: fallback %r is unused in strict mode", fallback)
        if fallback_kwargs and not isinstance(fallback, str):
            raise ConfigError("fallback_kwargs applies only to a fallback given by name")
        self.path = Path(path)
        self.mode = mode
        self._fallback_arg = fallback
        self._fallback_kwargs = dict(fallback_kwargs or {})
        self._fallback: Backend | None = None if isinstance(fallback, str) else fallback
        if self._fallback is not None and getattr(self._fallback, "max_concurrency", None):
            self.max_concurrency = self._fallback.max_concurrency  # type: ignore[attr-defined]
        self._store: OccurrenceStore | None = None
        self._by_task_agent: dict[tuple[str, str], list[int]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return (
            f"ReplayBackend(path={str(self.path)!r}, mode={self.mode!r}, keying={self.keying!r}, "
            f"fallback={self._fallback_arg!r})"
        )

    # -- loading ------------------------------------------------------------------------
    def load(self) -> int:
        """Read the file now (it is otherwise read at the first call); the number of records
        (one per key and occurrence)."""
        return len(self._load())

    def _load(self) -> OccurrenceStore:
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._store is None:
                start = time.perf_counter()
                loaded = OccurrenceStore()
                index: dict[tuple[str, str], list[int]] = {}
                if not self.path.exists() and self.mode == "fallthrough":
                    logger.warning(
                        "replay file %s does not exist: no records yet, every call goes to "
                        "the fallback %r",
                        self.path,
                        self._fallback_arg,
                    )
                else:
                    kept = loaded.load_all(iter_records(self.path), self._key_of)
                    for record in kept:
                        index.setdefault((record["task_id"], record["agent"]), []).append(
                            record["turn"]
                        )
                self._by_task_agent = index
                self._store = loaded
                logger.info(
                    "replay: %d records from %s in %.3f s (keying %r, mode %r)",
                    len(loaded),
                    self.path,
                    time.perf_counter() - start,
                    self.keying,
                    self.mode,
                )
            return self._store

    def _key_of(self, record: Mapping[str, Any]) -> str:
        return record_key(record, self.keying)

    def _fallback_backend(self) -> Backend:
        if self._fallback is None:
            with self._lock:
                if self._fallback is None:
                    assert isinstance(self._fallback_arg, str)
                    self._fallback = make_backend(self._fallback_arg, **self._fallback_kwargs)
        return self._fallback

    # -- the Backend protocol -------------------------------------------------------------
    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        """The recorded completion for this call, or the fallback's answer in fallthrough mode."""
        task = require_task(context, spec, "replay backend", RECORDS_KEYED_ON, by_turn=True)
        store = self._load()
        key = replay_key(task.id, spec.name, messages, context.turn, self.keying)
        occurrence, record = store.take(key)
        if record is not None:
            with self._lock:
                self.hits += 1
            return completion_from_record(record)
        with self._lock:
            self.misses += 1
        if self.mode == "strict":
            raise BackendError(
                self._miss_message(task.id, spec.name, context.turn, key, occurrence)
            )
        logger.debug("replay miss %s: calling the fallback", describe_key(key))
        return self._fallback_backend().complete(spec, messages, context)

    def _miss_message(
        self, task_id: str, agent: str, turn: int, key: str, occurrence: int = 0
    ) -> str:
        store = self._store
        recorded = store.occurrences(key) if store is not None else 0
        msg = (
            f"no recorded call for task {task_id!r}, agent {agent!r}, turn {turn} "
            f"(key {describe_key(key)!r}, {self.keying} keying) in replay file {str(self.path)!r} "
            f"({len(store) if store is not None else 0} records)."
        )
        if recorded:
            return msg + (
                f" The recording has {recorded} answer(s) for this exact request and this is "
                f"repeat number {occurrence + 1} of it in this run: the run repeats the request "
                "more often than the recorded one did (more branches, samples or episodes)."
            )
        turns = self._by_task_agent.get((task_id, agent))
        if turns and self.keying == "prompt":
            msg += (
                f" The file has {len(turns)} record(s) for this task and agent (turns "
                f"{sorted(set(turns))}) with other prompts: the prompt differs from the recorded "
                "one (a changed template, or a trajectory that diverged)."
            )
        elif not turns:
            msg += " The file has no record for this task and agent."
        return msg + (
            " Replay with the recording's seeds, controller and pool; use "
            "ReplayBackend(mode='fallthrough', fallback=...) to send missing calls to a live "
            "backend, keying='turn' if only the prompt wording changed, or re-record the run "
            "with RecordingBackend."
        )

    def close(self) -> None:
        """Close the fallback backend (one built from a name is rebuilt if a later call misses)."""
        fallback = self._fallback
        if isinstance(self._fallback_arg, str):
            self._fallback = None
        close = getattr(fallback, "close", None)
        if callable(close):
            close()
