"""Resumable evaluation runs: one JSONL line per episode, a run file, a summary file.

``evaluate`` plays ``episodes`` episodes for each seed and writes, under ``out_dir``:

* ``run.json`` — the run's identity (env id and kwargs, pool, split, controller spec and
  kwargs) and plan (seeds, episodes), written at the start;
* ``episodes.jsonl`` — one line per finished episode, appended as it finishes;
* ``summary.json`` — per-seed and pooled aggregates (``orchenv.runner.summarize``).

Why episodes are seeded one by one: episode ``i`` of seed ``s`` resets the env with
``episode_seed(s, i)`` and re-derives the controller's randomness from the same number, so
an episode's task and outcome never depend on what ran before it. That is what makes a
resumed run identical to an uninterrupted one: after a kill, rerunning the same command
skips the (seed, episode) pairs already on disk and plays the rest.

Durability contract. Each line goes to the OS in a single ``write`` as soon as its episode
ends, so a killed process (SIGKILL, OOM, Ctrl-C) loses no finished episode. ``fsync`` (the
guarantee against power loss) runs every ``fsync_every`` episodes and/or every
``fsync_interval_s`` seconds, and always when the run stops; a power cut loses at most the
episodes since the last fsync, and they are simply rerun. No episode is ever repeated: a
torn last line is cut off (with a warning) before anything is appended, and finished pairs
are skipped. A lock file keeps two evaluations from writing to one directory.

Controller randomness per episode (what exact resume needs): the controller is built once per
seed (with ``seed=s`` when its constructor takes ``seed``); before each episode
``reset(episode_seed)`` is called if it has one; a seedable controller without ``reset`` is
rebuilt for each episode with ``seed=episode_seed``; one with neither is taken to be
deterministic.

Live failures cost nothing twice. When a backend fails mid-episode the env marks the episode
failed and the harness plays it again, whole, up to ``retries`` more times; every call that
succeeded is kept in the episode's journal (``orchenv.eval.journal``) and served from it on
the retry and on a later resume of the same command, so no call is bought twice and the
finished run's records equal an uninterrupted run's.

Env state carried across episodes (``OrchestrationEnv.lifetime_state``, e.g. MathRoute's
usage-budget ledger under ``enforce_usage_constraints``) starts each seed empty; every line
records it after its episode and a resumed seed restores it, so budgets bind exactly as in an
uninterrupted run.

Concurrency (``concurrency=N``, ``orchenv eval --concurrency N``): up to N episodes are
played at once on orchenv's event loop (``orchenv.vector.run_concurrently``), each on its
own ``fork()`` of the env (sharing the pool and its connections) with its own controller
and its own journal, so their live calls overlap without a thread per episode. Episodes are
seeded one by one, so the records equal a sequential run's (lines are appended in the order
episodes end). Envs that carry state across episodes need their episodes in order and
refuse ``concurrency > 1``.

Controller spend: a controller that calls a model itself (``llm``, ``router-r1``) reports
its calls, tokens and dollars through ``usage()``; each episode's share is stored in the
record's ``metrics`` (``controller_calls``, ``controller_prompt_tokens``,
``controller_completion_tokens``, ``controller_cost_usd``), so summaries show it next to
the agents' spend. Likewise verified metering (an ``openai`` backend given the agent's
tokenizer): ``metering_checked`` and ``metering_disagreements`` calls per episode.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import math
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from orchenv.error import BackendError, ConfigError, DataError, OutputError, SchemaError
from orchenv.eval.journal import JOURNAL_DIR, CallJournal, attach_to_env
from orchenv.runner import (
    EpisodeRecord,
    RunSummary,
    pool_agents,
    run_episode,
    summarize,
)
from orchenv.schema import EVAL_ROW, RUN_INFO, SUMMARY_POOLED, Schema, parse_json

logger = logging.getLogger(__name__)

SCHEMA = 1
EPISODES_FILE = "episodes.jsonl"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".lock"
#: the identity keys a resumed run must match
IDENTITY_KEYS = ("env_id", "env_kwargs", "pool", "split", "controller", "controller_kwargs")

ControllerFactory = Callable[[int], Any]


def episode_seed(seed: int, index: int) -> int:
    """The reset seed of episode ``index`` of run seed ``seed``: a pure function of both, so
    any episode can be replayed on its own. Distinct for index < 1,000,003."""
    return seed * 1_000_003 + index


@dataclass
class EvalConfig:
    """What to evaluate: an env, a controller and the plan (seeds x episodes)."""

    env_id: str
    controller: str = "random"
    controller_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    pool: str | None = None  # preset name or pool file; None: the env's registered default
    split: str | None = None  # None: the env's default split
    episodes: int = 100
    seeds: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ConfigError(f"episodes must be at least 1, got {self.episodes}")
        if not self.seeds:
            raise ConfigError("seeds must name at least one seed, e.g. seeds=[0, 1, 2]")
        if any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ConfigError(f"seeds must be non-negative integers, got {self.seeds}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct, got {self.seeds}")
        if self.episodes >= 1_000_003:
            raise ConfigError("episodes per seed must be below 1,000,003 (episode seeds collide)")
        if "seed" in self.controller_kwargs:
            raise ConfigError(
                "the harness sets the controller's seed from --seeds; drop the controller "
                "argument seed=... and pass --seeds instead"
            )
        for label, value in (
            ("controller_kwargs", self.controller_kwargs),
            ("env_kwargs", self.env_kwargs),
        ):
            try:
                json.dumps(value, sort_keys=True)
            except TypeError as exc:
                raise ConfigError(
                    f"{label} must be JSON-serialisable to be logged and compared on resume: {exc}"
                ) from exc


@dataclass
class EvalResult:
    """What ``evaluate`` produced: the summary written to ``summary.json`` and the records of
    every (seed, episode) in the plan (read back from the log or played now)."""

    out_dir: Path
    pooled: RunSummary
    per_seed: dict[int, RunSummary]
    summary: dict[str, Any]
    records: dict[tuple[int, int], EpisodeRecord]
    ran: int  # episodes played by this call (the rest were on disk already)


def controller_label(name: str, kwargs: Mapping[str, Any]) -> str:
    """``single(agent=0)``: the spec and its arguments, as shown in summaries and boards."""
    if not kwargs:
        return name
    args = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(kwargs.items()))
    return f"{name}({args})"


def run_key(identity: Mapping[str, Any]) -> str:
    """A short hash of the identity, stamped on every line so foreign lines are caught."""
    canon = json.dumps({k: identity.get(k) for k in IDENTITY_KEYS}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


# -- controllers ------------------------------------------------------------------------------
class _ControllerSource:
    """Builds the controller for a seed and says how to re-derive its randomness per episode."""

    def __init__(self, spec: str | ControllerFactory, kwargs: Mapping[str, Any]) -> None:
        self.kwargs = dict(kwargs)
        self.factory: ControllerFactory | None = None
        self.cls: Any = None
        self.name = ""
        self._spare: tuple[int, Any] | None = None  # built by privileged(), not yet played
        if callable(spec):
            self.factory, self.seedable = spec, True
            return
        from orchenv.controllers import CONTROLLERS

        self.cls = CONTROLLERS.resolve(spec)
        self.name = spec
        try:
            self.seedable = "seed" in inspect.signature(self.cls).parameters
        except (TypeError, ValueError):  # a builtin or C callable: no signature to read
            self.seedable = False

    def privileged(self, seed: int) -> bool:
        """Whether the controller reads ground truth. It can be set per instance (e.g. by a
        verifier mode), so the controller for ``seed`` is built; ``build(seed)`` reuses it."""
        controller = self.build(seed)
        self._spare = (seed, controller)
        return bool(getattr(controller, "privileged", False))

    def build(self, seed: int) -> Any:
        """A fresh controller for ``seed`` (seeded with it when its constructor takes one)."""
        spare, self._spare = self._spare, None
        if spare is not None and spare[0] == seed:
            return spare[1]
        if self.factory is not None:
            return self.factory(seed)
        from orchenv.controllers import make_controller

        extra = {"seed": seed} if self.seedable else {}
        return make_controller(self.name, **self.kwargs, **extra)  # checks kwargs, clear errors

    def for_episode(self, controller: Any, ep_seed: int) -> Any:
        """The controller to play this episode with, its randomness derived from ``ep_seed``:
        re-seeded in place when it has ``reseed(seed)``, rebuilt otherwise (``run_episode``
        calls ``reset`` when it has one)."""
        if hasattr(controller, "reseed") and self.seedable:
            controller.reseed(ep_seed)
            return controller
        if hasattr(controller, "reset") or not self.seedable:
            return controller
        if self.factory is not None:
            return self.factory(ep_seed)
        return self.cls(**self.kwargs, seed=ep_seed)  # kwargs were checked by build()


# -- the episode log ----------------------------------------------------------------------------
def read_episode_log(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """Parse ``episodes.jsonl``. An unreadable tail (a line torn by a kill, or garbage left by
    a power cut) is dropped with a warning and, with ``repair``, cut off the file so appends
    start on a clean line. Unreadable lines followed by good ones mean real corruption and
    raise ``DataError``; so does a complete line that was edited or breaks the row schema
    (see ``_scan_log``). There is no repair for those: the message names the line to fix or
    delete (its episode is then played again)."""
    rows, good_end, size = _scan_log(path)
    if repair and good_end < size:
        _truncate(path, good_end)
    return rows


def _scan_log(path: Path) -> tuple[list[dict[str, Any]], int, int]:
    """(rows, byte offset just past the last good line, file size).

    Each complete line is parsed with bounded digits and depth (``orchenv.schema``), its
    ``line_digest`` (written by ``EpisodeLog``) must match its bytes, and the row must pass
    ``orchenv.schema.EVAL_ROW`` and agree with itself (``tokens``, ``episode_seed``): a
    ``DataError`` naming the file, line and field otherwise. The digest catches a line
    edited after it was written (a flipped ``correct``); it is not a signature, so it does
    not stop someone who recomputes it. Lines without one (logs written before it existed)
    are accepted until the first line that has one.
    """
    if not path.exists():
        return [], 0, 0
    if not path.is_file():  # a device or FIFO would be read forever
        raise DataError(f"{path} is not a regular file; move it away, or use --overwrite")
    data = path.read_bytes()
    rows: list[dict[str, Any]] = []
    good_end = 0
    bad_at: int | None = None  # line number of the first unreadable line
    digests_seen = False
    pos, lineno = 0, 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        raw = data[pos:end]
        lineno += 1
        row: Any = None
        if nl >= 0:  # only newline-terminated lines are complete
            if not raw.strip():
                row = {}  # a blank line: skip it quietly
            else:  # a line beyond the parser's limits is not torn: its error propagates
                with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                    row = parse_json(raw, f"{path}:{lineno}")
        if isinstance(row, dict):
            if bad_at is not None:
                raise DataError(
                    f"{path}: line {bad_at} is unreadable but later lines are fine, so the log "
                    "is corrupted, not torn. Inspect it, or start over with a new --out or "
                    "--overwrite"
                )
            if row:
                digests_seen |= LINE_DIGEST in row
                rows.append(_checked_row(row, raw, f"{path}:{lineno}", digests_seen))
            good_end = end
        elif bad_at is None:
            bad_at = lineno
        pos = end
    if bad_at is not None:
        logger.warning(
            "%s: dropping an unreadable tail from line %d on (%d bytes, a torn last write); "
            "those episodes will be rerun",
            path,
            bad_at,
            len(data) - good_end,
        )
    return rows, good_end, len(data)


#: the key ``EpisodeLog`` ends every line with: a digest of the line's bytes before it
LINE_DIGEST = "line_digest"
_DIGEST_TAIL = re.compile(rb',"line_digest":"([0-9a-f]{32})"\}\r?\n?$')
_RECORD_FIELDS = frozenset(EpisodeRecord.__dataclass_fields__)


def _line_digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).hexdigest().encode()


def _checked_row(row: dict[str, Any], raw: bytes, where: str, need_digest: bool) -> dict[str, Any]:
    """A log row whose digest matches its bytes, checked by ``EVAL_ROW`` (the fix for a bad
    line: restore it, delete it so its episode is played again, or ``--overwrite``)."""
    fix = "Restore the line, delete it (its episode is played again) or use --overwrite"
    if LINE_DIGEST in row or need_digest:
        tail = _DIGEST_TAIL.search(raw)
        intact = (
            tail is not None
            and str(row.get(LINE_DIGEST)).encode() == tail.group(1)
            and _line_digest(raw[: tail.start()] + b"}") == tail.group(1)
        )
        if not intact:
            raise DataError(
                f"{where}: this line was changed after orchenv wrote it (its {LINE_DIGEST} "
                f"does not match). {fix}"
            )
        del row[LINE_DIGEST]
    try:
        row = EVAL_ROW.validate(row, where, also_allowed=_RECORD_FIELDS)
    except DataError as exc:
        raise type(exc)(f"{exc}. {fix}") from None
    if "tokens" in row and row["tokens"] != row["prompt_tokens"] + row["completion_tokens"]:
        raise SchemaError(f"{where}: tokens is not prompt_tokens + completion_tokens. {fix}")
    if "episode_seed" in row and row["episode_seed"] != episode_seed(row["seed"], row["episode"]):
        raise SchemaError(f"{where}: episode_seed does not match seed and episode. {fix}")
    return row


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)
        fh.flush()
        os.fsync(fh.fileno())


class EpisodeLog:
    """Append-only JSONL writer: one ``write`` per line, fsync batched by count or time.

    ``header`` (the run identity) starts every line; it is encoded once, since encoding is
    most of what logging an episode costs. Every line ends with ``line_digest``, a digest of
    the bytes before it, which ``_scan_log`` checks. A failed write or fsync (disk full,
    quota, read-only) raises ``OutputError`` after cutting the file back to its last
    complete line: the episodes already logged are intact and a rerun resumes after them."""

    def __init__(
        self,
        path: Path,
        *,
        header: Mapping[str, Any] | None = None,
        fsync_every: int = 0,
        fsync_interval_s: float | None = 1.0,
    ) -> None:
        if fsync_every < 0 or (fsync_interval_s is not None and fsync_interval_s < 0):
            raise ConfigError("fsync_every and fsync_interval_s must be >= 0")
        self.path = path
        self.fsync_every = fsync_every
        self.fsync_interval_s = fsync_interval_s
        existed = path.exists()
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise _output_error(path, exc, "cannot open the episode log") from exc
        if not existed:
            _fsync_dir(path.parent)
        self._unsynced = 0
        self._last_sync = time.monotonic()
        # one encoder for the whole run (json.dumps with options builds one per call); rows
        # are trees, so the cycle check is skipped
        self._encode = _encoder()
        self._prefix = self._encode(dict(header))[:-1] + b"," if header else b"{"

    def append(self, row: Mapping[str, Any]) -> None:
        """Write ``header`` + ``row`` + its digest as one line (``row`` must not be empty)."""
        body = self._prefix + self._encode(row)[1:]
        data = body[:-1] + b',"' + LINE_DIGEST.encode() + b'":"' + _line_digest(body) + b'"}\n'
        before = os.fstat(self.fd).st_size
        try:
            written = os.write(self.fd, data)
            while written < len(data):  # a short write (rare; signals, full disks): finish it
                written += os.write(self.fd, data[written:])
        except OSError as exc:
            with contextlib.suppress(OSError):  # leave no torn line behind
                os.ftruncate(self.fd, before)
            raise _output_error(self.path, exc, "cannot append to the episode log") from exc
        self._unsynced += 1
        due = self.fsync_every > 0 and self._unsynced >= self.fsync_every
        if not due and self.fsync_interval_s is not None:
            due = time.monotonic() - self._last_sync >= self.fsync_interval_s
        if due:
            self.sync()

    def sync(self) -> None:
        if self._unsynced:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                raise _output_error(self.path, exc, "cannot fsync the episode log") from exc
            self._unsynced = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if self.fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self.fd)
                self.fd = -1


def _encoder() -> Callable[[Any], bytes]:
    """Compact JSON as bytes: ``orjson`` when installed (the ``eval`` extra; ~4x faster, and
    encoding is most of what logging an episode costs), else the standard library."""
    try:
        import orjson
    except ImportError:
        encode = json.JSONEncoder(
            separators=(",", ":"), check_circular=False, default=_json_default
        ).encode
        return lambda value: encode(value).encode()
    option = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    return lambda value: orjson.dumps(value, default=_json_default, option=option)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    raise TypeError(f"cannot log a {type(value).__name__} to JSON")


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _output_error(path: Path, exc: OSError, what: str) -> OutputError:
    """One clear error for a failed write: what failed, why, and that nothing is lost."""
    return OutputError(
        exc.errno,
        f"{what} {path}: {exc.strerror or exc}. Episodes already logged are intact; free "
        "space or fix the permissions, then rerun the same command to resume",
        str(path),
    )


def _write_json_atomic(path: Path, data: Any) -> None:
    """Write ``path`` through a temporary file and a rename: a failure (``OutputError``)
    leaves the previous ``path`` as it was and removes the temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=_json_default)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _output_error(path, exc, f"cannot write {path.name} to") from exc
    _fsync_dir(path.parent)


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run directory (released by the OS if we are killed)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, the rest still works
        yield
        return
    with open(out_dir / LOCK_FILE, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise ConfigError(
                f"another `orchenv eval` is writing to {out_dir}; wait for it, or use a new --out"
            ) from exc
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


# -- the run --------------------------------------------------------------------------------------
def make_env(config: EvalConfig) -> gym.Env:
    """``gym.make`` with the config's env kwargs, pool and split; errors name the fix."""
    kwargs = dict(config.env_kwargs)
    if config.pool is not None:
        kwargs["pool"] = config.pool
    if config.split is not None:
        kwargs["split"] = config.split
    try:
        return gym.make(config.env_id, **kwargs)
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(f"cannot make {config.env_id!r}: {exc}. See `orchenv list`.") from exc


def _identity(config: EvalConfig, env: gym.Env, controller_name: str) -> dict[str, Any]:
    """The run's identity with defaults resolved, so `--pool system1` equals no --pool."""
    unwrapped = env.unwrapped
    pool: Any = config.pool
    if pool is None:
        pool = env.spec.kwargs.get("pool") if env.spec is not None else None
        if not isinstance(pool, str):
            pool = getattr(getattr(unwrapped, "pool", None), "name", None)
    split = config.split or getattr(unwrapped, "split", None)
    if split is None and env.spec is not None:
        split = env.spec.kwargs.get("split")
    return {
        "env_id": config.env_id,
        "env_kwargs": dict(sorted(config.env_kwargs.items())),
        "pool": str(pool) if pool is not None else None,
        "split": split,
        "controller": controller_name,
        "controller_kwargs": dict(sorted(config.controller_kwargs.items())),
    }


def _check_identity(
    out_dir: Path, identity: Mapping[str, Any], found: Mapping[str, Any], where: str
) -> None:
    """Raise a ConfigError naming what differs (log lines carry all keys but env_kwargs)."""
    diffs = [
        f"{k}: {found.get(k)!r} there, {identity.get(k)!r} now"
        for k in IDENTITY_KEYS
        if k in found and found.get(k) != identity.get(k)
    ]
    if not diffs and found.get("run_key", run_key(identity)) != run_key(identity):
        diffs = ["the env arguments (-e) differ"]
    if diffs:
        raise ConfigError(
            f"{out_dir} holds a different run ({where}: {'; '.join(diffs)}). Use a new --out "
            "directory, or pass --overwrite to discard the episodes already there"
        )


def _clear(out_dir: Path) -> None:
    shutil.rmtree(out_dir / JOURNAL_DIR, ignore_errors=True)
    for name in (EPISODES_FILE, RUN_FILE, SUMMARY_FILE, SUMMARY_FILE + ".tmp", RUN_FILE + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()


def _lifetime_state(env: gym.Env) -> dict[str, Any] | None:
    """What the env carries from one episode to the next (``OrchestrationEnv.lifetime_state``)."""
    getter = getattr(env.unwrapped, "lifetime_state", None)
    return getter() if callable(getter) else None


def _restore_env_state(env: gym.Env, state: Mapping[str, Any] | None) -> None:
    """Start a seed with the state its last logged episode left (fresh for a new seed)."""
    loader = getattr(env.unwrapped, "load_lifetime_state", None)
    if callable(loader):
        loader(state)


def line_header(identity: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The run identity every log line starts with."""
    return {"run_key": key, **{k: identity[k] for k in IDENTITY_KEYS if k != "env_kwargs"}}


def episode_row(
    seed: int,
    index: int,
    record: EpisodeRecord,
    wall_s: float,
    env_state: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One episode's part of a log line: which (seed, episode) it was, then what happened."""
    row: dict[str, Any] = {
        "seed": seed,
        "episode": index,
        "episode_seed": episode_seed(seed, index),
        **vars(record),  # the record's fields; it is not changed after the episode
        "tokens": record.prompt_tokens + record.completion_tokens,
        "wall_s": round(wall_s, 6),
    }
    if env_state is not None:
        row["env_state"] = env_state
    return row


def evaluate(
    config: EvalConfig,
    out_dir: str | os.PathLike[str],
    *,
    controller_factory: ControllerFactory | None = None,
    env: gym.Env | None = None,
    overwrite: bool = False,
    progress: bool = True,
    fsync_every: int = 0,
    fsync_interval_s: float | None = 1.0,
    retries: int = 2,
    concurrency: int = 1,
) -> EvalResult:
    """Run (or resume) the evaluation ``config`` into ``out_dir``; see the module docstring.

    ``controller_factory(seed) -> controller`` evaluates a controller that is not registered
    (``config.controller`` is then only its name in the logs and boards). ``env``: an env
    already made from ``config`` (e.g. to share a warm pool); it is used as is and not
    closed. ``fsync_every=1`` fsyncs after every episode (slowest, safest against power
    loss); the default fsyncs at most once a second and always at the end. ``retries``: how
    many more times an episode in which a backend failed is played again, whole, before the
    run stops (see ``orchenv.eval.journal``: calls that succeeded are not bought twice).
    ``concurrency``: episodes played at once (see the module docstring).
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"retries must be a non-negative int, got {retries!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = _ControllerSource(controller_factory or config.controller, config.controller_kwargs)
    own_env = env is None
    env = make_env(config) if env is None else env
    try:
        with _locked(out):
            return _evaluate_locked(
                config,
                out,
                env,
                source,
                overwrite,
                progress,
                fsync_every,
                fsync_interval_s,
                retries,
                concurrency,
            )
    finally:
        if own_env:
            env.close()


def _evaluate_locked(
    config: EvalConfig,
    out: Path,
    env: gym.Env,
    source: _ControllerSource,
    overwrite: bool,
    progress: bool,
    fsync_every: int,
    fsync_interval_s: float | None,
    retries: int,
    concurrency: int = 1,
) -> EvalResult:
    if overwrite:
        _clear(out)
    # a probe reset builds the pool (agent names, resolved split) before anything is written
    env.reset(seed=episode_seed(config.seeds[0], 0))
    identity = _identity(config, env, config.controller)
    key = run_key(identity)
    run_path, log_path = out / RUN_FILE, out / EPISODES_FILE
    previous: dict[str, Any] = {}
    if run_path.exists():
        try:
            previous = read_json_file(run_path, RUN_INFO)
        except DataError as exc:
            raise DataError(f"{exc}; use --overwrite") from exc
        _check_identity(out, identity, previous, RUN_FILE)
    rows, good_end, size = _scan_log(log_path)
    if rows and rows[0].get("run_key") != key:
        _check_identity(out, identity, rows[0], f"{EPISODES_FILE} line 1")

    done: dict[tuple[int, int], dict[str, Any]] = {}  # log rows already on disk
    for n, row in enumerate(rows, 1):
        if row.get("run_key") != key:
            raise DataError(f"{log_path} line {n} belongs to another run; use --overwrite")
        try:
            pair = (int(row["seed"]), int(row["episode"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{log_path} line {n} has no valid seed/episode ({exc})") from exc
        if pair in done:
            logger.warning(
                "%s: (seed, episode) %s appears twice; keeping the first", log_path, pair
            )
            continue
        done[pair] = row
    if good_end < size:  # the identity matched: now cut the torn tail off
        _truncate(log_path, good_end)
    plan = [(s, i) for s in config.seeds for i in range(config.episodes)]
    in_plan = set(plan)
    outside = sum(pair not in in_plan for pair in done)
    if outside:
        logger.info("%d episodes on disk are outside this plan: kept, not summarised", outside)

    agents = pool_agents(env)
    privileged = previous.get("privileged")  # known from an earlier start: build nothing
    if not isinstance(privileged, bool):
        privileged = source.privileged(config.seeds[0])
    run_info = {
        "schema": SCHEMA,
        **identity,
        "run_key": key,
        "seeds": list(config.seeds),
        "episodes": config.episodes,
        "controller_label": controller_label(config.controller, config.controller_kwargs),
        "agents": agents,
        "privileged": privileged,
        "episode_seed": "seed * 1000003 + episode",
    }
    _write_json_atomic(run_path, run_info)

    todo = [pair for pair in plan if pair not in done]
    if todo:  # an unfinished run must not keep a summary of an earlier, smaller plan
        with contextlib.suppress(FileNotFoundError):
            (out / SUMMARY_FILE).unlink()
    if done and todo:
        logger.warning(
            "resuming %s: %d of %d episodes already on disk", out, len(plan) - len(todo), len(plan)
        )
    played: dict[tuple[int, int], EpisodeRecord] = {}
    journal = CallJournal(out / JOURNAL_DIR)
    if journal.directory.is_dir():  # logged episodes whose journal a kill left behind
        for pair in done:
            journal.discard(*pair)
    undo_journal = attach_to_env(env, journal)  # None: every backend is free, nothing to journal
    try:
        ran = _play(
            env,
            source,
            seeds=config.seeds,
            todo=todo,
            done=done,
            played=played,
            log=EpisodeLog(
                log_path,
                header=line_header(identity, key),
                fsync_every=fsync_every,
                fsync_interval_s=fsync_interval_s,
            ),
            progress=progress,
            total=len(plan),
            correct_on_disk=sum(bool(done[p].get("correct")) for p in plan if p in done),
            label=str(run_info["controller_label"]),
            journal=journal if undo_journal is not None else None,
            retries=retries,
            concurrency=concurrency,
        )
    finally:
        if undo_journal is not None:
            undo_journal()
    records = {
        pair: played[pair] if pair in played else EpisodeRecord.from_dict(done[pair])
        for pair in plan
    }
    summary, pooled, per_seed = build_summary(run_info, records, agents, privileged)
    _write_json_atomic(out / SUMMARY_FILE, summary)
    return EvalResult(
        out_dir=out, pooled=pooled, per_seed=per_seed, summary=summary, records=records, ran=ran
    )


def _play(
    env: gym.Env,
    source: _ControllerSource,
    *,
    seeds: Sequence[int],
    todo: Sequence[tuple[int, int]],
    done: Mapping[tuple[int, int], Mapping[str, Any]],
    played: dict[tuple[int, int], EpisodeRecord],
    log: EpisodeLog,
    progress: bool,
    total: int,
    correct_on_disk: int,
    label: str,
    journal: CallJournal | None = None,
    retries: int = 0,
    concurrency: int = 1,
) -> int:
    """Play the pending (seed, episode) pairs in order, logging each as it ends; closes
    ``log`` (a final fsync) however it stops."""
    if concurrency > 1 and len(todo) > 1:
        return _play_concurrently(
            env,
            source,
            todo=todo,
            played=played,
            log=log,
            progress=progress,
            total=total,
            correct_on_disk=correct_on_disk,
            label=label,
            journal=journal,
            retries=retries,
            concurrency=concurrency,
        )
    pending: dict[int, list[int]] = {s: [] for s in seeds}
    for seed, index in todo:
        pending[seed].append(index)
    n_seen = total - len(todo)
    n_correct = correct_on_disk
    ran = 0
    bar = tqdm(
        total=total,
        initial=n_seen,
        desc=f"eval {label}",
        unit="ep",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for seed in seeds:
            if not pending[seed]:
                continue
            controller = source.build(seed)
            first = pending[seed][0]
            before = done.get((seed, first - 1))
            _restore_env_state(env, before.get("env_state") if before else None)
            for index in pending[seed]:
                start = time.perf_counter()
                record = _play_one(env, source, controller, seed, index, journal, retries)
                wall = time.perf_counter() - start
                state = _lifetime_state(env)
                row = episode_row(seed, index, record, wall, state)
                log.append(row)
                if journal is not None:
                    journal.finish()
                played[(seed, index)] = record
                ran += 1
                if progress:
                    n_seen += 1
                    n_correct += record.correct
                    if bar.update(1):  # it redrew: refresh the accuracy shown next time
                        bar.set_postfix(acc=f"{n_correct / n_seen:.3f}", refresh=False)
    finally:
        bar.close()
        log.close()
        if journal is not None:
            journal.close()
    return ran


def _play_one(
    env: gym.Env,
    source: _ControllerSource,
    controller: Any,
    seed: int,
    index: int,
    journal: CallJournal | None,
    retries: int,
) -> EpisodeRecord:
    """One episode, retried whole (up to ``retries`` more times) when a backend fails in it.

    Each attempt starts from the same env lifetime state and controller randomness, and the
    journal serves the calls earlier attempts (or an earlier, interrupted run) already paid
    for, so the record equals an uninterrupted run's.
    """
    ep_seed = episode_seed(seed, index)
    state = _lifetime_state(env)
    for attempt in range(retries + 1):
        if journal is not None:
            on_file = journal.begin(seed, index)
            if on_file:
                logger.info(
                    "seed %d episode %d: %d paid calls on file from an earlier attempt",
                    seed,
                    index,
                    on_file,
                )
        try:
            player = source.for_episode(controller, ep_seed)
            before = _controller_usage(player)
            record = run_episode(env, player, seed=ep_seed)
            after = _controller_usage(player)
            if after is not None:
                base = before or {}
                record.metrics.update({k: v - base.get(k, 0) for k, v in after.items()})
            meter = getattr(env.unwrapped, "meter", None)
            checked = int(getattr(meter, "metering_checked", 0) or 0)
            if checked:  # verified metering (an openai backend given the agent's tokenizer)
                record.metrics["metering_checked"] = float(checked)
                record.metrics["metering_disagreements"] = float(
                    getattr(meter, "metering_disagreements", 0)
                )
            return record
        except BackendError as exc:
            if journal is not None:
                journal.close()
            kept = (
                f"; the {journal.bought + journal.served} calls that succeeded are kept in "
                f"{journal.path_for(seed, index)} and are not bought again when you rerun "
                "the same command"
                if journal is not None
                else ""
            )
            if attempt == retries:
                raise BackendError(
                    f"seed {seed} episode {index} failed {retries + 1} time(s): {exc}{kept}"
                ) from exc
            logger.warning("seed %d episode %d failed (%s); retrying it", seed, index, exc)
            _restore_env_state(env, state)
    raise AssertionError("unreachable")  # pragma: no cover


def _controller_usage(controller: Any) -> dict[str, float] | None:
    """A model-calling controller's spend so far (``usage()``), or None."""
    usage = getattr(controller, "usage", None)
    if not callable(usage):
        return None
    try:
        raw = usage()
    except Exception:  # noqa: BLE001 - a controller's own method; the run goes on without it
        logger.debug("controller usage() failed", exc_info=True)
        return None
    if not isinstance(raw, Mapping):
        return None
    return {
        str(k): float(v)
        for k, v in raw.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def _play_concurrently(
    env: gym.Env,
    source: _ControllerSource,
    *,
    todo: Sequence[tuple[int, int]],
    played: dict[tuple[int, int], EpisodeRecord],
    log: EpisodeLog,
    progress: bool,
    total: int,
    correct_on_disk: int,
    label: str,
    journal: CallJournal | None,
    retries: int,
    concurrency: int,
) -> int:
    """``_play`` with up to ``concurrency`` episodes at once (see the module docstring)."""
    from orchenv.eval.journal import use_journal
    from orchenv.vector import run_concurrently

    base = env.unwrapped
    fork = getattr(base, "fork", None)
    if _lifetime_state(env) is not None or not callable(fork):
        log.close()
        why = (
            "it carries state from one episode to the next, so its episodes must run in order"
            if callable(fork)
            else "it cannot fork() copies of itself"
        )
        spec = getattr(base, "spec", None)
        raise ConfigError(
            f"{getattr(spec, 'id', None) or type(base).__name__} cannot play episodes "
            f"concurrently: {why}. Use --concurrency 1."
        )
    free = [fork() for _ in range(min(concurrency, len(todo)))]
    controllers: dict[tuple[int, int], Any] = {}  # (lane, seed) -> controller

    def job(seed: int, index: int) -> tuple[EpisodeRecord, float, CallJournal | None]:
        lane = free.pop()
        try:
            key = (id(lane), seed)
            if key not in controllers:
                controllers[key] = source.build(seed)
            mine = CallJournal(journal.directory) if journal is not None else None
            start = time.perf_counter()
            with use_journal(mine):
                record = _play_one(lane, source, controllers[key], seed, index, mine, retries)
            return record, time.perf_counter() - start, mine
        finally:
            free.append(lane)

    n_seen = total - len(todo)
    n_correct = correct_on_disk
    ran = 0
    bar = tqdm(
        total=total,
        initial=n_seen,
        desc=f"eval {label}",
        unit="ep",
        disable=not progress,
        dynamic_ncols=True,
    )
    jobs = [lambda s=s, i=i: job(s, i) for s, i in todo]
    results = run_concurrently(jobs, concurrency=concurrency)
    failure: BaseException | None = None
    try:
        for n, result, exc in results:
            if exc is not None:
                failure = exc
                break
            assert result is not None
            record, wall, mine = result
            seed, index = todo[n]
            log.append(episode_row(seed, index, record, wall, None))
            if mine is not None:
                mine.finish()
            played[(seed, index)] = record
            ran += 1
            if progress:
                n_seen += 1
                n_correct += record.correct
                if bar.update(1):
                    bar.set_postfix(acc=f"{n_correct / n_seen:.3f}", refresh=False)
    finally:
        results.close()  # starts nothing more; waits for the episodes still running
        bar.close()
        log.close()
    if failure is not None:
        raise failure
    return ran


def build_summary(
    run_info: Mapping[str, Any],
    records: Mapping[tuple[int, int], EpisodeRecord],
    agents: Sequence[str],
    privileged: bool,
) -> tuple[dict[str, Any], RunSummary, dict[int, RunSummary]]:
    """``summary.json``'s content: pooled and per-seed aggregates built by ``summarize``."""
    label = str(run_info["controller_label"])
    env_id = str(run_info["env_id"])
    by_seed: dict[int, list[EpisodeRecord]] = {}
    for (seed, _), rec in sorted(records.items()):
        by_seed.setdefault(seed, []).append(rec)

    def one(recs: list[EpisodeRecord]) -> tuple[RunSummary, dict[str, Any]]:
        s = summarize(
            recs, env_id=env_id, controller=label, agents=list(agents), privileged=privileged
        )
        n = max(len(recs), 1)
        calls = {a: sum(r.agent_calls.get(a, 0) for r in recs) for a in agents}
        extra = {
            "mean_tokens": sum(r.prompt_tokens + r.completion_tokens for r in recs) / n,
            "total_tokens": sum(r.prompt_tokens + r.completion_tokens for r in recs),
            "agent_calls": calls,
            "invalid_actions": sum(r.invalid_actions for r in recs),
        }
        return s, {**s.to_dict(), **extra}

    per_seed: dict[int, RunSummary] = {}
    seed_rows = []
    for seed, recs in by_seed.items():
        s, d = one(recs)
        per_seed[seed] = s
        seed_rows.append({"seed": seed, **d})
    pooled, pooled_dict = one([r for recs in by_seed.values() for r in recs])
    accs = [s.accuracy for s in per_seed.values()]
    mean_acc = sum(accs) / len(accs) if accs else 0.0
    std = (
        math.sqrt(sum((a - mean_acc) ** 2 for a in accs) / (len(accs) - 1))
        if len(accs) > 1
        else 0.0
    )
    meta = {
        "env_id": env_id,
        "pool": run_info.get("pool"),
        "split": run_info.get("split"),
        "controller_spec": run_info.get("controller"),
        "controller_kwargs": run_info.get("controller_kwargs"),
        "controller_label": label,
        "seeds": list(by_seed),
        "episodes_per_seed": run_info.get("episodes"),
        "privileged": privileged,
    }
    summary = {
        "schema": SCHEMA,
        "run": dict(run_info, privileged=privileged),
        "pooled": {**meta, **pooled_dict},
        "per_seed": seed_rows,
        "accuracy_across_seeds": {"mean": mean_acc, "std": std, "n_seeds": len(accs)},
    }
    return summary, pooled, per_seed


def load_summary(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a finished run's ``summary.json`` (with its ``run.json`` when present)."""
    path = Path(run_dir)
    summary_path = path / SUMMARY_FILE
    if not summary_path.exists():
        hint = (
            " It has episodes but no summary: the run did not finish; rerun the same "
            "`orchenv eval` command to resume it."
            if (path / EPISODES_FILE).exists()
            else " Create it with `orchenv eval ENV_ID --controller NAME --out DIR`."
        )
        raise DataError(f"{summary_path} does not exist.{hint}")
    summary = read_json_file(summary_path)
    if "pooled" not in summary:
        raise DataError(f"{summary_path} is not an orchenv eval summary (no 'pooled' section)")
    summary["pooled"] = SUMMARY_POOLED.validate(
        summary["pooled"], f"{summary_path}, section 'pooled'", error=DataError
    )
    if not isinstance(summary.get("run", {}), dict):
        raise DataError(f"{summary_path}: field 'run' must be an object")
    run_path = path / RUN_FILE
    if run_path.exists():
        summary["run"] = {**summary.get("run", {}), **read_json_file(run_path, RUN_INFO)}
    summary["dir"] = str(path)
    return summary


#: the largest ``summary.json`` / ``run.json`` read back (they are a few kilobytes)
MAX_RUN_FILE_BYTES = 64 * 2**20


def read_json_file(path: Path, schema: Schema | None = None) -> dict[str, Any]:
    """A JSON object orchenv wrote (``run.json``, ``summary.json``), read back through
    ``orchenv.schema.parse_json``: finite numbers only (a NaN or ``Infinity`` someone
    wrote in is refused, not copied into a leaderboard), no key twice, bounded size and
    nesting; checked against ``schema`` when given. ``DataError`` names the file otherwise."""
    try:
        with open(path, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise DataError(f"{path} is not a regular file")
            raw = fh.read(MAX_RUN_FILE_BYTES + 1)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    if len(raw) > MAX_RUN_FILE_BYTES:
        raise DataError(f"{path} is over {MAX_RUN_FILE_BYTES:,} bytes")
    try:
        data = parse_json(raw, str(path))
    except (ValueError, SchemaError) as exc:  # JSONDecodeError, UnicodeDecodeError, limits
        raise DataError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DataError(f"{path} must hold a JSON object, got {type(data).__name__}")
    if schema is not None:
        data = schema.validate(data, str(path), error=DataError)
    return data


__all__ = [
    "EvalConfig",
    "EvalResult",
    "EpisodeLog",
    "build_summary",
    "controller_label",
    "episode_seed",
    "evaluate",
    "load_summary",
    "read_episode_log",
]
