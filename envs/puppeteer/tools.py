"""Offline, contained tools for tool-using agents: ``run_python``, ``read_file``, ``search``.

Plain functions that return a ``ToolResult`` and never raise on bad input (only a missing
optional dependency raises, ``DependencyError``). Web tools (browsing, web search) are out of
scope: every tool here works offline.

``run_python`` containment (checked by ``tests/test_tools.py``):

* a child ``sys.executable -I`` process in a fresh scratch temp dir (its cwd, deleted after),
  in its own process group (session); on timeout the whole group is killed with SIGKILL, and
  the group is killed again after a normal exit, so background children never outlive a call;
* ``resource.setrlimit`` in ``preexec_fn``: ``RLIMIT_AS`` (``memory_mb``, default 512 MB),
  ``RLIMIT_CPU`` (timeout + 1 s), ``RLIMIT_NPROC`` (small), ``RLIMIT_FSIZE`` (16 MB), no core
  files; when the caller runs as root (limits on process counts do not bind root) the child
  also drops to the ``nobody`` user, so ``RLIMIT_NPROC`` binds and file permissions apply;
* network: under ``unshare --net`` (with ``--map-root-user`` and a private PID namespace whose
  init is killed with the call) when a probe (run once per process, cached) says this is
  permitted; otherwise a prelude replaces ``socket.socket`` with a raising stub and an audit
  hook refuses socket creation. ``ToolResult.meta["network"]`` says which (``"netns"`` or
  ``"socket-stub"``);
* writes: an audit-hook prelude refuses opening files for writing, and removing / renaming /
  creating directories, outside the scratch dir (plus ordinary file permissions);
* stdout / stderr go to files in the scratch dir and only the first ``max_output_chars``
  characters of each come back.

The audit hook and socket stub are Python-level and so a determined program (ctypes) could get
past them; the OS-level limits (rlimits, process group kill, namespaces, uid drop) cannot be
undone from inside.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchenv.search import BM25Index

_NOBODY = 65534


@dataclass
class ToolResult:
    """What a tool call produced.

    ``ok`` is False when the tool refused or the program failed; ``output`` is what an agent
    sees (stdout, the file's text, the hits); ``error`` a short reason (``"timeout"``,
    ``"memory"``, ``"process limit"``, ``"network blocked"``, ``"write refused"``,
    ``"outside sandbox"``, ...); ``meta`` holds details (return code, containment modes).
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


# -- run_python ------------------------------------------------------------------------

_PRELUDE = r"""
import os as _os, sys as _sys
_SB = _os.path.realpath(_os.getcwd())
_NET = {block_net!r}
def _inside(p):
    try:
        p = _os.path.realpath(_os.fsdecode(p))
    except Exception:
        return False
    return p == _SB or p.startswith(_SB + _os.sep) or p in ("/dev/null",)
def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        if path is None or isinstance(path, int):
            return
        writing = (mode and any(c in str(mode) for c in "wax+")) or (
            isinstance(flags, int) and flags & (_os.O_WRONLY | _os.O_RDWR | _os.O_CREAT))
        if writing and not _inside(path):
            raise PermissionError("sandbox: write outside the scratch dir refused: %s" % (path,))
    elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.chmod", "os.truncate",
                   "shutil.rmtree", "os.symlink", "os.link"):
        paths = [a for a in args[:2] if isinstance(a, (str, bytes, _os.PathLike))]
        if any(not _inside(p) for p in paths):
            raise PermissionError("sandbox: %s outside the scratch dir refused" % event)
    elif _NET and event in ("socket.__new__", "socket.connect", "socket.getaddrinfo"):
        raise PermissionError("sandbox: network access is blocked")
if _NET:
    import socket as _socket
    class _NoSocket:
        def __init__(self, *a, **k):
            raise PermissionError("sandbox: network access is blocked")
    _socket.socket = _NoSocket
    _socket.create_connection = _NoSocket
_sys.addaudithook(_hook)
del _hook
_src = open("main.py").read()
_g = {{"__name__": "__main__", "__builtins__": __builtins__}}
exec(compile(_src, "<run_python>", "exec"), _g)
"""

_mode_cache: dict[str, tuple[str, bool]] = {}
_probe_lock = threading.Lock()


def _is_root() -> bool:
    return os.name == "posix" and hasattr(os, "getuid") and os.getuid() == 0


def _user_process_count(uid: int) -> int:
    count = 0
    try:
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == uid:
                        count += 1
                except OSError:
                    pass
    except OSError:
        return 0
    return count


def _preexec(memory_mb: int, cpu_s: int, nproc: int, fsize_mb: int, drop: bool):
    """A ``preexec_fn`` setting the limits (computed in the parent; only syscalls here)."""
    import resource

    def apply() -> None:
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_mb << 20, fsize_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if drop:
            os.setgroups([])
            os.setgid(_NOBODY)
            os.setuid(_NOBODY)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def _netns_prefix() -> list[str]:
    return ["unshare", "--net", "--map-root-user", "--pid", "--fork", "--kill-child"]


def _probe(netns: bool, drop: bool) -> bool:
    uid = _NOBODY if drop else os.getuid()
    argv = [sys.executable, "-I", "-c", "print('probe-ok')"]
    if netns:
        argv = [*_netns_prefix(), *argv]
    try:
        proc = subprocess.run(  # noqa: S603
            argv,
            capture_output=True,
            text=True,
            timeout=10,
            cwd="/",
            preexec_fn=_preexec(512, 10, _user_process_count(uid) + 16, 1, drop),  # noqa: PLW1509
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and "probe-ok" in proc.stdout


def containment_mode() -> tuple[str, bool]:
    """``(network_mode, drop_root)`` for ``run_python``; probed once per process, cached.

    ``network_mode`` is ``"netns"`` when ``unshare --net`` works here for the limited child,
    else ``"socket-stub"``; ``drop_root`` is True when the caller is root and the child can
    still start Python as ``nobody`` (the interpreter must be readable by it).
    """
    with _probe_lock:
        if "mode" not in _mode_cache:
            can_unshare = bool(shutil.which("unshare")) and sys.platform.startswith("linux")
            options = [(n, d) for n in (True, False) for d in (True, False)]
            options = [
                (n, d) for n, d in options if (can_unshare or not n) and (_is_root() or not d)
            ]
            chosen = (False, False)
            for netns, drop in options:
                if _probe(netns, drop):
                    chosen = (netns, drop)
                    break
            _mode_cache["mode"] = ("netns" if chosen[0] else "socket-stub", chosen[1])
        return _mode_cache["mode"]


def network_isolation_mode() -> str:
    """``"netns"`` or ``"socket-stub"``: how ``run_python`` blocks the network here."""
    return containment_mode()[0]


def _read_capped(path: Path, limit: int) -> tuple[str, bool]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit * 4 + 4)
    except OSError:
        return "", False
    text = data.decode("utf-8", errors="replace")
    if len(text) > limit:
        return text[:limit] + "\n[... output truncated ...]", True
    return text, False


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):  # includes ProcessLookupError, PermissionError
        os.killpg(pid, signal.SIGKILL)


def run_python(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_procs: int = 16,
    max_file_mb: int = 16,
    max_output_chars: int = 4000,
    network: str = "auto",
) -> ToolResult:
    """Run Python ``code`` in a contained child process and return its stdout.

    See the module docstring for the containment. ``network="auto"`` uses a network
    namespace when permitted, ``"socket-stub"`` forces the Python-level block. The result's
    ``meta`` holds ``returncode``, ``timed_out``, ``stderr``, ``network`` (the mode used),
    ``user`` (``"nobody"`` when the child dropped root) and ``truncated``. ``ok`` is True iff
    the program exited with status 0 in time. Never raises for any ``code``.
    """
    if not isinstance(code, str):
        return ToolResult(False, "", "code must be a string")
    mode, drop = containment_mode()
    if network != "auto":
        mode = "socket-stub"
    uid = _NOBODY if drop else os.getuid()
    nproc = _user_process_count(uid) + max(1, int(max_procs))
    scratch = Path(tempfile.mkdtemp(prefix="orchenv-py-"))
    meta: dict[str, Any] = {"network": mode, "user": "nobody" if drop else "caller"}
    try:
        if drop:
            os.chown(scratch, _NOBODY, _NOBODY)
        (scratch / "main.py").write_text(code, encoding="utf-8", errors="replace")
        prelude = _PRELUDE.format(block_net=mode != "netns")
        argv = [sys.executable, "-I", "-c", prelude]
        if mode == "netns":
            argv = [*_netns_prefix(), *argv]
        cpu_s = max(1, int(timeout_s) + 1)
        out_path, err_path = scratch / ".stdout", scratch / ".stderr"
        timed_out = False
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            if drop:
                os.chown(out_path, _NOBODY, _NOBODY)
                os.chown(err_path, _NOBODY, _NOBODY)
            try:
                proc = subprocess.Popen(  # noqa: S603
                    argv,
                    cwd=scratch,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env={"PATH": "/usr/bin:/bin", "HOME": str(scratch), "LANG": "C.UTF-8"},
                    start_new_session=True,
                    preexec_fn=_preexec(memory_mb, cpu_s, nproc, max_file_mb, drop),  # noqa: PLW1509
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return ToolResult(False, "", f"could not start python: {exc}", meta)
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                returncode = proc.wait()
            _kill_group(proc.pid)  # leftover background children
        stdout, t1 = _read_capped(out_path, max_output_chars)
        stderr, t2 = _read_capped(err_path, max_output_chars)
        meta.update(returncode=returncode, timed_out=timed_out, stderr=stderr, truncated=t1 or t2)
        error = _classify(returncode, timed_out, stderr)
        return ToolResult(error is None, stdout, error, meta)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _classify(returncode: int, timed_out: bool, stderr: str) -> str | None:
    if timed_out:
        return "timeout"
    if returncode == 0:
        return None
    tail = stderr[-1500:]
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return "memory"
    if "BlockingIOError" in tail or "Resource temporarily unavailable" in tail:
        return "process limit"
    if "network access is blocked" in tail or "Network is unreachable" in tail:
        return "network blocked"
    if re.search(r"gaierror|Temporary failure in name resolution|Name or service", tail):
        return "network blocked"
    if "sandbox: write outside" in tail or ("sandbox:" in tail and "refused" in tail):
        return "write refused"
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        return "cpu limit"
    if returncode == -signal.SIGXFSZ:
        return "file size limit"
    return f"exit status {returncode}"


# -- read_file ------------------------------------------------------------------------------


def read_file(
    path: str, sandbox_dir: str | os.PathLike[str], *, max_chars: int = 8000
) -> ToolResult:
    """Read a text file inside ``sandbox_dir``; refuse anything that resolves outside it.

    ``path`` is relative to the sandbox (an absolute path must lie inside it). The path is
    resolved (``..`` and symlinks followed) and refused unless the result is inside the
    resolved sandbox, so traversal and symlinks pointing out are both refused. Never raises.
    """
    try:
        root = Path(sandbox_dir).resolve(strict=True)
        raw = str(path).strip()
        if not raw or "\x00" in raw:
            return ToolResult(False, "", "invalid path")
        target = (root / raw).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        return ToolResult(False, "", f"invalid path: {exc}")
    if target != root and root not in target.parents:
        return ToolResult(False, "", "outside sandbox", {"path": raw})
    if not target.is_file():
        return ToolResult(False, "", "no such file", {"path": raw})
    try:
        with open(target, encoding="utf-8", errors="replace") as handle:
            text = handle.read(max_chars + 1)
    except OSError as exc:
        return ToolResult(False, "", f"cannot read: {exc.strerror}", {"path": raw})
    truncated = len(text) > max_chars
    if truncated:
        text = text[:max_chars] + "\n[... truncated ...]"
    return ToolResult(True, text, None, {"path": raw, "truncated": truncated})


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
