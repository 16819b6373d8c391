"""The run directory of ``orchenv eval``: its files, how they are written and read back.

A run directory holds (format unchanged since schema 1; ``orchenv verify`` reads it too):

* ``run.json`` — the run's identity and plan, written atomically (temporary file, fsync,
  rename) at the start;
* ``episodes.jsonl`` — one line per finished episode (``EpisodeLog``): the run identity, the
  episode's record and a ``line_digest`` of the line's bytes, each line one ``write``, fsync
  batched by count or time; read back by ``read_episode_log`` (a torn tail is cut off, an
  edited line or one that breaks ``orchenv.schema.EVAL_ROW`` is a ``DataError`` naming it);
* ``summary.json`` — per-seed and pooled aggregates, written atomically at the end;
* ``journal/`` — the per-episode call journals of episodes in progress
  (``orchenv.eval.journal``);
* ``.lock`` — held (``flock``) while an evaluation writes the directory.

The playing of episodes is ``orchenv.eval.harness``; this module is only the I/O.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError, OutputError, SchemaError
from orchenv.eval.journal import JOURNAL_DIR
from orchenv.runner import EpisodeRecord
from orchenv.schema import EVAL_ROW, RUN_INFO, SUMMARY_POOLED, Schema, parse_json

__all__ = [
    "EPISODES_FILE",
    "MAX_FILE_BYTES",
    "check_regular",
    "read_regular",
    "IDENTITY_KEYS",
    "LINE_DIGEST",
    "LOCK_FILE",
    "RUN_FILE",
    "SCHEMA",
    "SUMMARY_FILE",
    "EpisodeLog",
    "check_identity",
    "clear_run",
    "episode_row",
    "episode_seed",
    "line_header",
    "load_summary",
    "locked",
    "read_episode_log",
    "read_json_file",
    "run_key",
    "scan_log",
    "truncate",
    "write_json_atomic",
]

logger = logging.getLogger(__name__)

SCHEMA = 1
EPISODES_FILE = "episodes.jsonl"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".lock"
#: the identity keys a resumed run must match
IDENTITY_KEYS = ("env_id", "env_kwargs", "pool", "split", "controller", "controller_kwargs")


def episode_seed(seed: int, index: int) -> int:
    """The reset seed of episode ``index`` of run seed ``seed``: a pure function of both, so
    any episode can be replayed on its own. Distinct for index < 1,000,003."""
    return seed * 1_000_003 + index


def run_key(identity: Mapping[str, Any]) -> str:
    """A short hash of the identity, stamped on every line so foreign lines are caught."""
    canon = json.dumps({k: identity.get(k) for k in IDENTITY_KEYS}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


# -- the episode log ----------------------------------------------------------------------------
def read_episode_log(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """Parse ``episodes.jsonl``. An unreadable tail (a line torn by a kill, or garbage left by
    a power cut) is dropped with a warning and, with ``repair``, cut off the file so appends
    start on a clean line. Unreadable lines followed by good ones mean real corruption and
    raise ``DataError``; so does a complete line that was edited or breaks the row schema
    (see ``scan_log``). There is no repair for those: the message names the line to fix or
    delete (its episode is then played again)."""
    rows, good_end, size = scan_log(path)
    if repair and good_end < size:
        truncate(path, good_end)
    return rows


def scan_log(path: Path) -> tuple[list[dict[str, Any]], int, int]:
    """(rows, byte offset just past the last good line, file size).

    Each complete line is parsed with bounded digits and depth (``orchenv.schema``), its
    ``line_digest`` (written by ``EpisodeLog``) must match its bytes, and the row must pass
    ``orchenv.schema.EVAL_ROW`` and agree with itself (``tokens``, ``episode_seed``): a
    ``DataError`` naming the file, line and field otherwise. The digest catches a line
    edited after it was written (a flipped ``correct``); it is not a signature, so it does
    not stop someone who recomputes it. Lines without one (logs written before it existed)
    are accepted until the first line that has one.
    """
    if not os.path.lexists(path):
        return [], 0, 0
    data = read_regular(path, MAX_FILE_BYTES)  # never opens a FIFO, a symlink or 3 GB
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


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)
        fh.flush()
        os.fsync(fh.fileno())


class EpisodeLog:
    """Append-only JSONL writer: one ``write`` per line, fsync batched by count or time.

    ``header`` (the run identity) starts every line; it is encoded once, since encoding is
    most of what logging an episode costs. Every line ends with ``line_digest``, a digest of
    the bytes before it, which ``scan_log`` checks. A failed write or fsync (disk full,
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


def write_json_atomic(path: Path, data: Any) -> None:
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
def locked(out_dir: Path) -> Iterator[None]:
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


# -- identity ----------------------------------------------------------------------------------
def check_identity(
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


def clear_run(out_dir: Path) -> None:
    shutil.rmtree(out_dir / JOURNAL_DIR, ignore_errors=True)
    for name in (EPISODES_FILE, RUN_FILE, SUMMARY_FILE, SUMMARY_FILE + ".tmp", RUN_FILE + ".tmp"):
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()


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


# -- reading back ------------------------------------------------------------------------------
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


#: the largest episode log or call recording read back (a 1,000-episode run is a few MB)
MAX_FILE_BYTES = 2 * 2**30


def check_regular(path: Path, max_bytes: int = MAX_FILE_BYTES) -> int:
    """The size of ``path`` after checking, WITHOUT opening it, that it is a regular file (not
    a symlink, FIFO, device or directory: opening a FIFO blocks until a writer comes, a
    symlink can point out of a run or bundle) of at most ``max_bytes``. ``DataError`` naming
    the file, what it is and the fix otherwise; ``FileNotFoundError`` when it is absent."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise DataError(
            f"{path} is a symbolic link: run and bundle files are read only as regular files "
            "inside their directory; copy the file in instead of linking it"
        )
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO, socket or device"
        raise DataError(
            f"{path} is {kind}, not a regular file: replace it with the file orchenv wrote"
        )
    if info.st_size > max_bytes:
        raise DataError(
            f"{path} is {info.st_size:,} bytes, over the {max_bytes:,}-byte limit for this "
            "file: it is not a file orchenv wrote"
        )
    return int(info.st_size)


def read_regular(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (``check_regular`` before it is opened; opened
    with ``O_NOFOLLOW | O_NONBLOCK`` and checked again, so a swap between the check and the
    open is caught too). ``DataError`` naming the file otherwise."""
    try:
        check_regular(path, max_bytes)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise DataError(f"{path} is not a regular file")
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise DataError(f"{path} is over {max_bytes:,} bytes")
    return raw


def read_json_file(path: Path, schema: Schema | None = None) -> dict[str, Any]:
    """A JSON object orchenv wrote (``run.json``, ``summary.json``), read back through
    ``orchenv.schema.parse_json``: finite numbers only (a NaN or ``Infinity`` someone
    wrote in is refused, not copied into a leaderboard), no key twice, bounded size and
    nesting; checked against ``schema`` when given. A symlink, FIFO or device is refused
    before it is opened (``read_regular``). ``DataError`` names the file otherwise."""
    raw = read_regular(path, MAX_RUN_FILE_BYTES)
    try:
        data = parse_json(raw, str(path))
    except (ValueError, SchemaError) as exc:  # JSONDecodeError, UnicodeDecodeError, limits
        raise DataError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DataError(f"{path} must hold a JSON object, got {type(data).__name__}")
    if schema is not None:
        data = schema.validate(data, str(path), error=DataError)
    return data
