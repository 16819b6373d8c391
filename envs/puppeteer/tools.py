"""Offline, contained tools for tool-using agents: ``run_python``, ``read_file``, ``search``.

Plain functions that return a ``ToolResult`` and never raise on bad input (only a missing
optional dependency raises, ``DependencyError``). Web tools (browsing, web search) are out of
scope: every tool here works offline.

``run_python`` runs controller-written code under bubblewrap (``.sandbox``): a read-only
root holding only ``/usr`` and the interpreter, no ``/proc``, ``/sys``, ``/etc`` secrets,
home or project; the host's ``site-packages`` / ``dist-packages`` covered by empty mounts
(the standard library only: ``meta["importable"]``); the program passed as a read-only file,
never through a pipe; a seccomp filter (``.seccomp``: only AF_UNIX / AF_INET / AF_INET6
sockets, no keyring, ``ptrace``, ``bpf``, ``io_uring``, mounts or namespaces;
``meta["seccomp"]``); size-capped tmpfs scratch space as the only writable place; no network,
pids, ipc or user namespace shared; an unprivileged uid inside; an allow-listed environment;
memory and process count capped for the whole process tree by a per-call cgroup where one
can be made (else per-process rlimits, and ``meta`` says the tree is not bound); output read
through capped pipes; a wall-clock timeout that kills the whole sandbox. Where bwrap cannot
run, the call is refused with the fix, unless ``sandbox="unsafe-no-isolation"`` was chosen.
``ToolResult.meta["containment"]`` names the mode that ran: ``"bwrap+cgroup"``,
``"bwrap+rlimit"``, ``"unsafe-no-isolation"`` or ``"refused"``.

``write_task_files`` puts a task's files (``task.meta["files"]``) into the task folder, and
``read_file`` opens a path inside it one component at a time relative to
directory file descriptors, never following a symlink, refusing anything but a regular file
with a single link, and never blocking on a FIFO.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchenv.envs.puppeteer.sandbox import (
    BWRAP,
    SANDBOX_MODES,
    UNSAFE,
    Limits,
    Outcome,
    containment_mode,
    run_sandboxed,
    sandbox_problem,
)
from orchenv.error import ConfigError
from orchenv.search import BM25Index

__all__ = [
    "SANDBOX_MODES",
    "SearchIndex",
    "UNSAFE",
    "ToolResult",
    "containment_mode",
    "network_isolation_mode",
    "read_file",
    "run_python",
    "sandbox_problem",
    "search",
    "write_task_files",
]

MAX_CODE_CHARS = 1_000_000


@dataclass
class ToolResult:
    """What a tool call produced.

    ``ok`` is False when the tool refused or the program failed; ``output`` is what an agent
    sees (stdout, the file's text, the hits); ``error`` a short reason (``"timeout"``,
    ``"memory"``, ``"process limit"``, ``"network blocked"``, ``"outside sandbox"``, a
    refusal naming its fix, ...); ``meta`` holds details (return code, containment mode).
    """

    ok: bool
    output: str
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """One string for an agent's context."""
        if self.ok:
            return self.output
        return f"{self.output}\n[tool error: {self.error}]".strip()


# -- run_python ------------------------------------------------------------------------------------


def network_isolation_mode(sandbox: str = BWRAP) -> str:
    """``"netns"`` when ``run_python`` runs in its own network namespace (bwrap), else
    ``"none"`` (the unsafe mode, or refused)."""
    return "netns" if containment_mode(sandbox).startswith("bwrap") else "none"


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_procs: int = 16,
    max_file_mb: int = 16,
    disk_mb: int = 64,
    max_output_chars: int = 4000,
    sandbox: str = BWRAP,
) -> ToolResult:
    """Run Python ``code`` contained (module docstring) and return its stdout.

    Limits: ``timeout_s`` of wall clock; ``memory_mb`` for the whole tree (cgroup) and per
    process (``RLIMIT_AS``); ``max_procs`` processes beyond the sandbox's own; ``max_file_mb``
    per file; ``disk_mb`` of scratch tmpfs. Only the standard library is importable. The
    result's ``meta`` holds ``containment``, ``network``, ``returncode``, ``timed_out``,
    ``stderr``, ``truncated`` and the cgroup's figures when one was used. ``ok`` is True iff
    the program exited with status 0 in time. Never raises for any input.
    """
    if sandbox not in SANDBOX_MODES:
        known = ", ".join(SANDBOX_MODES)
        error = f"unknown sandbox {sandbox!r}; known: {known}"
        return ToolResult(False, "", error, {"containment": "refused"})
    if not isinstance(code, str):
        return ToolResult(False, "", "code must be a string", {"containment": "refused"})
    if len(code) > MAX_CODE_CHARS:
        error = f"code too long ({len(code):,} > {MAX_CODE_CHARS:,} characters)"
        return ToolResult(False, "", error, {"containment": "refused"})
    try:
        chars = max(1, int(max_output_chars))
        limits = Limits(
            timeout_s=min(max(0.05, float(timeout_s)), 3600.0),
            memory_mb=max(16, int(memory_mb)),
            max_procs=max(1, int(max_procs)),
            max_file_mb=max(1, int(max_file_mb)),
            disk_mb=max(1, int(disk_mb)),
            max_output_bytes=max(1 << 20, 8 * chars),
            keep_bytes=4 * chars + 4,
        )
    except (TypeError, ValueError, OverflowError) as exc:
        return ToolResult(False, "", f"invalid limits: {exc}", {"containment": "refused"})
    outcome = run_sandboxed(code.encode("utf-8", "replace"), limits, sandbox)
    return _result(outcome, chars)


def _result(outcome: Outcome, chars: int) -> ToolResult:
    stdout, cut_out = _decode(outcome.stdout, chars)
    stderr, cut_err = _decode(outcome.stderr, chars)
    network = "netns" if outcome.containment.startswith("bwrap") else "none"
    meta: dict[str, Any] = {"containment": outcome.containment, "network": network}
    meta.update(outcome.meta)
    if outcome.error is not None:
        return ToolResult(False, "", outcome.error, meta)
    meta.update(
        returncode=outcome.returncode,
        timed_out=outcome.timed_out,
        stderr=stderr,
        truncated=outcome.truncated or cut_out or cut_err,
        output_limit=outcome.output_limit,
        memory_limit=outcome.memory_limit,
    )
    error = _classify(outcome, stderr)
    return ToolResult(error is None, stdout, error, meta)


def _decode(data: bytes, chars: int) -> tuple[str, bool]:
    text = data.decode("utf-8", errors="replace")
    if len(text) > chars:
        return text[:chars] + "\n[... output truncated ...]", True
    return text, False


_STDERR_REASONS = (
    (("MemoryError", "Cannot allocate memory"), "memory"),
    (("BlockingIOError", "Resource temporarily unavailable"), "process limit"),
    (("No space left on device", "File too large"), "disk limit"),
    (
        ("Network is unreachable", "gaierror", "Temporary failure in name resolution"),
        "network blocked",
    ),
    (("Read-only file system",), "write refused"),
)


def _classify(outcome: Outcome, stderr: str) -> str | None:
    """A short reason for a failed run, or ``None`` when it succeeded."""
    if outcome.timed_out:
        return "timeout"
    if outcome.output_limit:
        return "output limit"
    code = outcome.returncode
    if code == 0:
        return None
    if outcome.memory_limit:
        return "memory"
    tail = stderr[-1500:]
    for needles, reason in _STDERR_REASONS:
        if any(n in tail for n in needles):
            return reason
    sig = -code if code is not None and code < 0 else (code - 128 if code and code > 128 else 0)
    if sig == signal.SIGXCPU:
        return "cpu limit"
    if sig == signal.SIGXFSZ:
        return "file size limit"
    if sig:
        return f"killed by signal {sig}"
    return f"exit status {code}"


# -- read_file -----------------------------------------------------------------------------------------

_NAME_MAX = 255
_PATH_MAX = 4096


class _Refused(Exception):
    """A read_file refusal carrying its short reason."""


def read_file(
    path: str, sandbox_dir: str | os.PathLike[str], *, max_chars: int = 8000
) -> ToolResult:
    """Read a text file inside ``sandbox_dir`` (the task folder). Never raises.

    ``path`` is relative to the folder; absolute paths and ``..`` are refused (``"outside
    sandbox"``). Each component is opened relative to its parent's directory fd with
    ``O_NOFOLLOW``, so a symlink anywhere is refused (``"symlink refused"``) and swapping a
    component for a symlink while this runs cannot lead outside; the file must be a regular
    file on the folder's device with one link (``"hard link refused"`` otherwise), opened
    with ``O_NONBLOCK`` so a FIFO cannot hang the call. At most ``max_chars`` come back.
    """
    raw = path if isinstance(path, str) else ""
    meta: dict[str, Any] = {"path": raw[:300]}
    try:
        limit = max(1, int(max_chars))
        parts = _components(path)
        text = _read_beneath(sandbox_dir, parts, limit * 4 + 4)
    except _Refused as refusal:
        return ToolResult(False, "", str(refusal), meta)
    except (OSError, ValueError, TypeError, OverflowError) as exc:
        return ToolResult(False, "", f"cannot read: {exc}", meta)
    truncated = len(text) > limit
    if truncated:
        text = text[:limit] + "\n[... truncated ...]"
    return ToolResult(True, text, None, {**meta, "truncated": truncated})


def _components(path: object) -> list[bytes]:
    """The path's components as bytes, or a refusal for anything not a plain relative path."""
    if not isinstance(path, str):
        raise _Refused("invalid path: not a string")
    raw = path.strip()
    if not raw or "\x00" in raw:
        raise _Refused("invalid path: empty or contains NUL")
    try:
        encoded = os.fsencode(raw)
    except UnicodeError:
        raise _Refused("invalid path: not encodable") from None
    if len(encoded) > _PATH_MAX:
        raise _Refused("invalid path: too long")
    if encoded.startswith(b"/"):
        raise _Refused("outside sandbox")
    parts = [p for p in encoded.split(b"/") if p not in (b"", b".")]
    if b".." in parts:
        raise _Refused("outside sandbox")
    if not parts:
        raise _Refused("not a regular file")
    if any(len(p) > _NAME_MAX for p in parts):
        raise _Refused("invalid path: a component is longer than 255 bytes")
    return parts


def _open_step(name: bytes, flags: int, dir_fd: int) -> int:
    """``openat`` one component; a symlink (``ELOOP``) or a non-directory where a directory
    was needed becomes a refusal, a missing one ``no such file``."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # O_DIRECTORY on a symlink: ENOTDIR
            if _is_symlink(name, dir_fd):
                raise _Refused("symlink refused") from None
            raise _Refused("not a directory on the way") from None
        if exc.errno == errno.ENOENT:
            raise _Refused("no such file") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise _Refused("invalid path: too long") from None
        raise


def _is_symlink(name: bytes, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_beneath(root: str | os.PathLike[str], parts: list[bytes], max_bytes: int) -> str:
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        device = os.fstat(fds[0]).st_dev
        for name in parts[:-1]:
            fds.append(_open_step(name, os.O_RDONLY | os.O_DIRECTORY, fds[-1]))
        peek = _open_step(parts[-1], os.O_PATH, fds[-1])
        fds.append(peek)
        before = _check_file(os.fstat(peek), device)
        handle = _open_step(parts[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, fds[-2])
        fds.append(handle)
        after = _check_file(os.fstat(handle), device)
        if (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino):
            raise _Refused("file changed while opening")
        data = bytearray()
        while len(data) < max_bytes:
            chunk = os.read(handle, min(65536, max_bytes - len(data)))
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", errors="replace")
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _check_file(info: os.stat_result, device: int) -> os.stat_result:
    if stat.S_ISLNK(info.st_mode):
        raise _Refused("symlink refused")
    if not stat.S_ISREG(info.st_mode):
        raise _Refused("not a regular file")
    if info.st_nlink != 1:
        raise _Refused("hard link refused")
    if info.st_dev != device:
        raise _Refused("outside sandbox")
    return info


_TASK_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def write_task_files(files: Mapping[str, str], directory: str | os.PathLike[str]) -> list[str]:
    """Write a task's files (``task.meta["files"]``: name -> text) into the task folder that
    ``read_file`` serves, and return the names written.

    Names must be plain file names (letters, digits, ``.``, ``_``, ``-``; no path, no
    leading dot), else ``ConfigError``. Each file is created relative to the folder's
    descriptor with ``O_EXCL | O_NOFOLLOW`` after removing any old entry of that name, so a
    symlink planted in the folder is replaced, never followed.
    """
    bad = [str(n) for n in files if not isinstance(n, str) or not _TASK_FILE_NAME.fullmatch(n)]
    if bad:
        raise ConfigError(
            f"task file names must be plain names like 'data.csv' (letters, digits, '.', '_', "
            f"'-'), got {bad[:3]}; rename them in the task's meta['files']"
        )
    root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, text in files.items():
            with contextlib.suppress(FileNotFoundError):
                info = os.stat(name, dir_fd=root, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    raise ConfigError(f"task file {name!r} is a directory in {directory}")
                os.unlink(name, dir_fd=root)  # a planted symlink is removed, not followed
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o644, dir_fd=root)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(str(text))
    finally:
        os.close(root)
    return list(files)


# -- search -----------------------------------------------------------------------------------


class SearchIndex:
    """A BM25 index (``orchenv.search.BM25Index``) over a small local corpus of ``{doc_id: text}``."""

    def __init__(self, docs: Mapping[str, str] | Sequence[str]) -> None:
        if isinstance(docs, Mapping):
            self.ids = [str(k) for k in docs]
            self.texts = [str(v) for v in docs.values()]
        else:
            self.ids = [str(i) for i in range(len(docs))]
            self.texts = [str(t) for t in docs]
        self._index = BM25Index(self.texts)

    def search(self, query: str, k: int = 3) -> list[tuple[str, str, float]]:
        """Up to ``k`` ``(doc_id, text, score)`` with a positive score, best first."""
        return [(self.ids[i], self.texts[i], s) for i, s in self._index.search(str(query), k)]


def search(
    query: str, corpus: SearchIndex | Mapping[str, str] | Sequence[str], *, k: int = 3
) -> ToolResult:
    """BM25 search over a local corpus (a ``SearchIndex`` or docs to index); offline.

    Returns the hits as ``[doc_id] text`` lines, best first; ``meta["hits"]`` holds
    ``(doc_id, score)``. Raises ``DependencyError`` (extra ``retrieval``) without ``bm25s``.
    """
    index = corpus if isinstance(corpus, SearchIndex) else SearchIndex(corpus)
    hits = index.search(str(query), k=k)
    if not hits:
        return ToolResult(False, "", "no results", {"hits": []})
    lines = [f"[{doc_id}] {text}" for doc_id, text, _ in hits]
    return ToolResult(True, "\n".join(lines), None, {"hits": [(d, s) for d, _, s in hits]})
