"""Run untrusted Python under bubblewrap, with limits that bind the whole process tree.

``tool:run_python`` executes text an LLM controller wrote, so it is treated as hostile. The
isolation is bubblewrap's (``bwrap``, Debian package ``bubblewrap``), a small, widely used
sandboxing tool, rather than namespaces or audit hooks written here. ``run_sandboxed``:

* builds a new root from a tmpfs holding only what the interpreter needs, bound read-only:
  ``/usr`` (and ``/bin``, ``/lib*``, ``/sbin`` as on the host: symlinks on merged-usr
  systems), the interpreter's own prefix and ``/etc/ld.so.cache``; nothing else of ``/etc``,
  no home, no project. The root, ``/dev`` and every bind are read-only; the only writable
  places are size-capped tmpfs mounts (``/scratch``, the cwd; ``/tmp``; ``/dev/shm``);
* mounts no ``/proc`` and no ``/sys``. When the caller is root, the unprivileged uid inside
  (65534) maps back to host uid 0, and the kernel checks some ``/proc`` files (``/proc/sys``,
  ``/proc/sysrq-trigger``) by that host uid alone, so a ``/proc`` would let the sandbox write
  kernel settings;
* unshares every namespace (network, pid, ipc, uts, user, cgroup), forbids new user
  namespaces inside, starts a new session, clears the environment (``ENV_ALLOWED`` only), and
  dies with its parent (the pid namespace takes every child with it);
* bounds the tree: a per-call cgroup (v1 ``memory`` + ``pids`` hierarchies, or v2 with both
  controllers delegated) caps the memory (tmpfs pages included) and the process count of
  all processes together; the child joins it before ``exec``. Without a writable cgroup,
  per-process rlimits are all there is, and ``meta`` says the tree is not bound. Always:
  ``RLIMIT_AS``, ``RLIMIT_CPU``, ``RLIMIT_FSIZE``, ``RLIMIT_CORE=0``;
* reads stdout / stderr through pipes, keeps the first bytes, and kills the sandbox once
  ``max_output_bytes`` in all came (a child cannot swap a file for a FIFO: there is none);
* kills the whole sandbox at the wall-clock deadline.

Where bwrap is missing or cannot create its namespaces, the call is refused with the fix,
unless the caller opted into ``UNSAFE`` (a plain subprocess with rlimits: no isolation).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchenv.envs.puppeteer import seccomp

BWRAP = "bwrap"
UNSAFE = "unsafe-no-isolation"
SANDBOX_MODES = (BWRAP, UNSAFE)

SANDBOX_UID = 65534
SCRATCH = "/scratch"
PROGRAM = "/program.py"  # where the program lies in the sandbox, read-only
ENV_ALLOWED = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": SCRATCH,
    "TMPDIR": "/tmp",
}
FIX_MISSING = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or pass "
    f"sandbox={UNSAFE!r} to run controller code without any isolation"
)
FIX_BROKEN = (
    "bwrap needs user namespaces: enable them (sysctl user.max_user_namespaces=10000 and, on "
    "Debian, kernel.unprivileged_userns_clone=1; in Docker run with --security-opt "
    f"seccomp=unconfined or as root), or pass sandbox={UNSAFE!r} to run without isolation"
)
_GRACE_S = 0.2  # how long to drain pipes after the main process exited
_CHUNK = 65536


@dataclass(frozen=True)
class Limits:
    """What one call may use. ``disk_mb`` sizes the scratch tmpfs (``/tmp`` and ``/dev/shm``
    get a quarter each); ``max_output_bytes`` counts stdout and stderr together."""

    timeout_s: float = 5.0
    memory_mb: int = 512
    max_procs: int = 16
    max_file_mb: int = 16
    disk_mb: int = 64
    max_output_bytes: int = 1 << 20
    keep_bytes: int = 16_004  # of each stream, returned to the caller


@dataclass
class Outcome:
    """What ``run_sandboxed`` saw. ``returncode`` is bwrap's (128 + N for a signal N), or
    ``None`` when the program never started; ``error`` is set then."""

    containment: str
    returncode: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    output_limit: bool = False
    truncated: bool = False
    memory_limit: bool = False
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


# -- temp dirs that never outlive their owner ---------------------------------------------------


def _remove_tree(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # a forked child exiting must not delete its parent's dir
        shutil.rmtree(path, ignore_errors=True)


_OWNED_NAME = re.compile(r"orchenv-[a-z]+-(\d+)-[A-Za-z0-9_]+")


def sweep_stale_temp_dirs(directory: str | None = None) -> list[str]:
    """Remove ``orchenv-*-PID-*`` temp dirs whose owner process no longer exists (a process
    killed with SIGKILL runs no finalizer), and return their paths. A dir whose pid is
    alive, or was reused by another live process, is kept."""
    removed: list[str] = []
    with contextlib.suppress(OSError), os.scandir(directory or tempfile.gettempdir()) as it:
        for entry in it:
            match = _OWNED_NAME.fullmatch(entry.name)
            if match is None or not entry.is_dir(follow_symlinks=False):
                continue
            owner = int(match.group(1))
            if owner != os.getpid() and owner > 0 and not _alive(owner):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


class OwnedTempDir:
    """A temp dir removed by ``cleanup()``, when garbage-collected, or at interpreter exit
    (``weakref.finalize`` runs at exit too), so no caller that forgets ``close()`` leaks it.
    Its name carries the owner's pid (``orchenv-puppeteer-PID-xxxx``): dirs of processes
    that were killed are swept when the next one is made (``sweep_stale_temp_dirs``).

    Copies (``copy``/``deepcopy``, as ``env.fork()`` makes) share the one dir.
    """

    def __init__(self, prefix: str) -> None:
        sweep_stale_temp_dirs()
        self.path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
        self._finalizer = weakref.finalize(self, _remove_tree, self.path, os.getpid())

    def cleanup(self) -> None:
        self._finalizer()

    def __copy__(self) -> OwnedTempDir:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> OwnedTempDir:
        return self


# -- the bwrap command line -----------------------------------------------------------------------


def interpreter() -> str:
    """The base interpreter (a venv's ``python`` resolves to it), as a real path."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _read_only_roots() -> list[str]:
    """Host paths bound read-only at the same place: ``/usr``, the interpreter's prefix and
    its directory, without nesting one inside another."""
    wanted = ["/usr", os.path.realpath(sys.base_prefix), os.path.dirname(interpreter())]
    roots: list[str] = []
    for path in sorted(set(wanted), key=len):
        if os.path.isdir(path) and not any(path == r or path.startswith(r + "/") for r in roots):
            roots.append(path)
    return roots


def _system_args() -> list[str]:
    args: list[str] = []
    for root in _read_only_roots():
        args += ["--ro-bind", root, root]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


_options_cache: dict[str, str] = {}


def _options(bwrap: str) -> str:
    """bwrap's ``--help`` text, to tell which options this version has (cached)."""
    if bwrap not in _options_cache:
        try:
            done = subprocess.run(  # noqa: S603 - a fixed argv
                [bwrap, "--help"], capture_output=True, timeout=10, check=False
            )
            _options_cache[bwrap] = done.stdout.decode("utf-8", "replace")
        except (OSError, subprocess.SubprocessError):
            _options_cache[bwrap] = ""
    return _options_cache[bwrap]


def _hidden_package_dirs(roots: list[str]) -> list[str]:
    """Third-party package folders (``site-packages``, ``dist-packages``) under the bound
    roots: each is covered by an empty read-only tmpfs, so only the standard library can be
    imported (``-S`` alone keeps them off ``sys.path``, but a program can add them back)."""
    patterns = (
        "lib*/python3*/site-packages",
        "lib*/python3*/dist-packages",
        "lib/python3/dist-packages",
        "local/lib*/python3*/site-packages",
        "local/lib*/python3*/dist-packages",
    )
    found: set[str] = set()
    for root in roots:
        for pattern in patterns:
            found.update(p for p in glob.glob(os.path.join(root, pattern)) if os.path.isdir(p))
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
        candidate = os.path.realpath(path[key])
        if os.path.isdir(candidate) and any(candidate.startswith(r + "/") for r in roots):
            found.add(candidate)
    return sorted(found)


def bwrap_argv(
    bwrap: str, limits: Limits, program_fd: int | None = None, seccomp_fd: int | None = None
) -> list[str]:
    """The full command: bwrap's options, then the interpreter running the program.

    The program is copied by bwrap from ``program_fd`` (a memfd) into a read-only
    ``/program.py`` (``--ro-bind-data``): nothing is written into a pipe the program may
    close. ``seccomp_fd`` holds ``seccomp.filter_program()``. ``--disable-userns`` (bwrap
    0.8) is added where this bwrap has it. Without ``program_fd`` the program is read from
    stdin (the probe of old callers)."""
    disk = max(1, int(limits.disk_mb)) << 20
    small = max(1 << 20, disk // 4)
    argv = [bwrap, "--unshare-all", "--unshare-user"]
    if "--disable-userns" in _options(bwrap):
        argv.append("--disable-userns")
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--clearenv"]
    for name, value in ENV_ALLOWED.items():
        argv += ["--setenv", name, value]
    argv += _system_args()
    for hidden in _hidden_package_dirs(_read_only_roots()):
        argv += ["--size", "4096", "--tmpfs", hidden, "--remount-ro", hidden]
    argv += ["--dev", "/dev", "--size", str(small), "--tmpfs", "/dev/shm"]
    argv += ["--size", str(small), "--tmpfs", "/tmp", "--size", str(disk), "--tmpfs", SCRATCH]
    if program_fd is not None:
        argv += ["--perms", "0444", "--ro-bind-data", str(program_fd), PROGRAM]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", SCRATCH]
    return [*argv, "--", interpreter(), "-I", "-S", PROGRAM if program_fd is not None else "-"]


def _memfd(name: str, data: bytes) -> int:
    """A sealed-size in-memory file holding ``data``, positioned at 0 (for bwrap to read)."""
    try:
        fd = os.memfd_create(name, getattr(os, "MFD_CLOEXEC", 1))
    except (AttributeError, OSError):
        handle = tempfile.TemporaryFile()  # noqa: SIM115 - the fd outlives the object
        fd = os.dup(handle.fileno())
        handle.close()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


class _SandboxFds:
    """The program's and the seccomp filter's memfds for one bwrap call (closed on exit)."""

    def __init__(self, code: bytes) -> None:
        self.program = _memfd("orchenv-program", code)
        self.seccomp: int | None = None
        try:
            if seccomp.supported():
                self.seccomp = _memfd("orchenv-seccomp", seccomp.filter_program())
        except OSError:
            os.close(self.program)
            raise

    def fds(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self.program, self.seccomp) if fd is not None)

    def close(self) -> None:
        for fd in self.fds():
            with contextlib.suppress(OSError):
                os.close(fd)


# -- is bwrap usable here? ----------------------------------------------------------------------

_probe_cache: dict[str, str | None] = {}
_probe_lock = threading.Lock()


def sandbox_problem() -> str | None:
    """Why bwrap cannot run here (with the fix), or ``None``; probed once per process."""
    with _probe_lock:
        if "bwrap" not in _probe_cache:
            _probe_cache["bwrap"] = _probe()
        return _probe_cache["bwrap"]


def _probe() -> str | None:
    bwrap = shutil.which(BWRAP)
    if bwrap is None or not sys.platform.startswith("linux"):
        return f"bwrap (bubblewrap) was not found on PATH; {FIX_MISSING}"
    if "--size" not in _options(bwrap):  # no size cap for the tmpfs: no disk bound
        return f"{bwrap} is older than 0.5 (no --size option); upgrade bubblewrap"
    try:
        fds = _SandboxFds(b"print('probe-ok')")
    except OSError as exc:
        return f"no in-memory file for the program ({exc})"
    try:
        proc = subprocess.run(  # noqa: S603 - a fixed argv
            bwrap_argv(bwrap, Limits(), fds.program, fds.seccomp),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            start_new_session=True,
            pass_fds=fds.fds(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not start ({exc}); {FIX_BROKEN}"
    finally:
        fds.close()
    if proc.returncode == 0 and proc.stdout.strip() == b"probe-ok":
        return None
    said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    reason = said[-1][:300] if said else f"exit status {proc.returncode}"
    return f"bwrap cannot create its sandbox here ({reason}); {FIX_BROKEN}"


# -- per-call cgroups ------------------------------------------------------------------------------


@dataclass
class _Hierarchy:
    version: int
    path: str  # our own cgroup's directory in this hierarchy
    controllers: tuple[str, ...]


def _hierarchies() -> list[_Hierarchy]:
    """Our cgroup dirs that offer the memory and pids controllers, from /proc/self."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            own = [line.rstrip("\n").split(":", 2) for line in handle]
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mounts = [line.split() for line in handle]
    except OSError:
        return []
    found: list[_Hierarchy] = []
    for fields in mounts:
        if "-" not in fields:
            continue
        dash = fields.index("-")
        fstype, options = fields[dash + 1], fields[dash + 3].split(",")
        root, point = fields[3], fields[4]
        for entry in own:
            if len(entry) != 3:
                continue
            hid, names, path = entry
            if fstype == "cgroup2" and hid == "0":
                wanted = _v2_delegated(os.path.join(point, path.lstrip("/")))
                found += [_Hierarchy(2, *w) for w in wanted]
            elif fstype == "cgroup" and names and set(names.split(",")) <= set(options):
                controllers = tuple(c for c in ("memory", "pids") if c in names.split(","))
                rel = os.path.relpath(path, root) if path.startswith(root) else path
                directory = os.path.normpath(os.path.join(point, rel.lstrip("/")))
                if controllers and os.path.isdir(directory):
                    found.append(_Hierarchy(1, directory, controllers))
    return found


def _v2_delegated(directory: str) -> list[tuple[str, tuple[str, ...]]]:
    try:
        with open(os.path.join(directory, "cgroup.subtree_control"), encoding="utf-8") as f:
            enabled = f.read().split()
    except OSError:
        return []
    controllers = tuple(c for c in ("memory", "pids") if c in enabled)
    return [(directory, controllers)] if controllers else []


def _sweep_stale(hierarchies: list[_Hierarchy]) -> None:
    """Remove empty per-call cgroups left by processes that died mid-call (``SIGKILL``)."""
    for hierarchy in hierarchies:
        with contextlib.suppress(OSError):
            for entry in os.scandir(hierarchy.path):
                parts = entry.name.split("-")
                if entry.name.startswith("orchenv-sandbox-") and len(parts) == 4:
                    owner = int(parts[2]) if parts[2].isdigit() else 0
                    if owner and owner != os.getpid() and not _alive(owner):
                        with contextlib.suppress(OSError):
                            os.rmdir(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class Cgroup:
    """A per-call cgroup in every hierarchy that has ``memory`` or ``pids``; both must be
    covered, else ``create`` returns ``None``. The child writes itself into each
    ``cgroup.procs`` (through fds opened here) before ``exec``."""

    _counter = 0
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.dirs: list[tuple[_Hierarchy, str]] = []
        self.join_fds: list[int] = []

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int) -> Cgroup | None:
        hierarchies = _hierarchies()
        covered = {c for h in hierarchies for c in h.controllers}
        if not {"memory", "pids"} <= covered:
            return None
        with cls._lock:
            if cls._counter == 0:
                _sweep_stale(hierarchies)
            cls._counter += 1
            name = f"orchenv-sandbox-{os.getpid()}-{cls._counter}"
        group = cls()
        try:
            for hierarchy in hierarchies:
                directory = os.path.join(hierarchy.path, name)
                os.mkdir(directory)
                group.dirs.append((hierarchy, directory))
                group._limit(hierarchy, directory, memory_bytes, max_pids)
                procs = os.path.join(directory, "cgroup.procs")
                group.join_fds.append(os.open(procs, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            group.remove()
            return None
        return group

    @staticmethod
    def _limit(hierarchy: _Hierarchy, directory: str, memory_bytes: int, max_pids: int) -> None:
        def put(name: str, value: int | str, required: bool = True) -> None:
            try:
                with open(os.path.join(directory, name), "w", encoding="ascii") as handle:
                    handle.write(str(value))
            except OSError:
                if required:
                    raise

        if "memory" in hierarchy.controllers:
            if hierarchy.version == 1:
                put("memory.limit_in_bytes", memory_bytes)
                put("memory.memsw.limit_in_bytes", memory_bytes, required=False)
            else:
                put("memory.max", memory_bytes)
                put("memory.swap.max", 0, required=False)
        if "pids" in hierarchy.controllers:
            put("pids.max", max_pids)

    def _read(self, controller: str, name: str) -> str:
        for hierarchy, directory in self.dirs:
            if controller in hierarchy.controllers:
                try:
                    with open(os.path.join(directory, name), encoding="ascii") as handle:
                        return handle.read()
                except OSError:
                    return ""
        return ""

    def stats(self) -> dict[str, int]:
        """Peak memory, OOM kills and refused forks, as far as this kernel reports them."""
        out: dict[str, int] = {}
        for controller, name, key in (
            ("memory", "memory.max_usage_in_bytes", "peak_memory_bytes"),
            ("memory", "memory.peak", "peak_memory_bytes"),
            ("memory", "memory.failcnt", "memory_limit_hits"),
        ):
            text = self._read(controller, name).strip()
            if text.isdigit():
                out[key] = int(text)
        for controller, name in (("memory", "memory.oom_control"), ("memory", "memory.events")):
            for line in self._read(controller, name).splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
                    out["oom_kills"] = int(parts[1])
        for line in self._read("pids", "pids.events").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "max" and parts[1].isdigit():
                out["forks_refused"] = int(parts[1])
        return out

    def pids(self) -> set[int]:
        found: set[int] = set()
        for _, directory in self.dirs:
            procs = os.path.join(directory, "cgroup.procs")
            with contextlib.suppress(OSError), open(procs, encoding="ascii") as handle:
                found.update(int(x) for x in handle.read().split() if x.isdigit())
        return found

    def kill_all(self) -> None:
        """SIGKILL whatever is left in the group (normally nothing: the pid namespace ended)."""
        for _ in range(200):
            left = self.pids()
            if not left:
                return
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        for fd in self.join_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.join_fds = []
        self.kill_all()
        for _, directory in reversed(self.dirs):
            for _ in range(100):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.dirs = []


_cgroup_cache: dict[str, bool] = {}


def cgroups_usable() -> bool:
    """Whether a per-call cgroup can be made here (tried once per process)."""
    if "ok" not in _cgroup_cache:
        group = Cgroup.create(256 << 20, 64)
        _cgroup_cache["ok"] = group is not None
        if group is not None:
            group.remove()
    return _cgroup_cache["ok"]


def containment_mode(sandbox: str = BWRAP) -> str:
    """What ``run_sandboxed`` would use now: ``"bwrap+cgroup"``, ``"bwrap+rlimit"``,
    ``"unsafe-no-isolation"`` or ``"refused"`` (bwrap unusable, or an unknown ``sandbox``)."""
    if sandbox == UNSAFE:
        return UNSAFE
    if sandbox != BWRAP or sandbox_problem() is not None:
        return "refused"
    return "bwrap+cgroup" if cgroups_usable() else "bwrap+rlimit"


# -- running -----------------------------------------------------------------------------------------


def _user_process_count(uid: int) -> int:
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    count += entry.stat().st_uid == uid
    return count


def _preexec(limits: Limits, join_fds: list[int], nproc: int | None) -> Callable[[], None]:
    """The child's last steps before ``exec``: join the cgroup, set rlimits. Everything is
    computed here in the parent; the child only makes system calls."""
    memory = max(16, int(limits.memory_mb)) << 20
    cpu = max(1, int(limits.timeout_s) + 1)
    fsize = max(1, int(limits.max_file_mb)) << 20
    settings = [
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, (fsize, fsize)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if nproc is not None:
        settings.append((resource.RLIMIT_NPROC, (nproc, nproc)))

    def apply() -> None:
        for fd in join_fds:
            os.write(fd, b"0")
        for which, value in settings:
            resource.setrlimit(which, value)

    return apply


def _kill_tree(proc: subprocess.Popen[bytes], group: Cgroup | None) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    if group is not None:
        group.kill_all()


@dataclass
class _Pumped:
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    total: int = 0
    timed_out: bool = False
    output_limit: bool = False


def _pump(proc: subprocess.Popen[bytes], limits: Limits, deadline: float) -> _Pumped:
    """Read both pipes until they close, the deadline passes or the output cap is reached.
    Keeps the first ``keep_bytes`` of each stream. Nothing is written to the child: the
    program comes as a file (a write into a pipe the child closed is what killed callers
    with SIGPIPE's default action, issue 28)."""
    assert proc.stdout is not None and proc.stderr is not None
    got = _Pumped()
    keep = {proc.stdout.fileno(): got.stdout, proc.stderr.fileno(): got.stderr}
    with selectors.DefaultSelector() as sel:
        for fd in keep:
            sel.register(fd, selectors.EVENT_READ)
        exited_at: float | None = None
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            end = deadline if exited_at is None else min(deadline, exited_at + _GRACE_S)
            if now >= end:
                got.timed_out = exited_at is None
                break
            for key, _ in sel.select(timeout=min(end - now, 0.05)):
                try:
                    chunk = os.read(key.fd, _CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = keep[key.fd]
                buf += chunk[: max(0, limits.keep_bytes - len(buf))]
                got.total += len(chunk)
            if got.total > limits.max_output_bytes:
                got.output_limit = True
                break
    return got


def run_sandboxed(code: bytes, limits: Limits, sandbox: str = BWRAP) -> Outcome:
    """Run the Python program ``code`` contained as the module docstring says. Never raises
    for any program; ``Outcome.error`` says why nothing ran (refused, could not start)."""
    if sandbox not in SANDBOX_MODES:
        known = ", ".join(SANDBOX_MODES)
        return Outcome("refused", error=f"unknown sandbox {sandbox!r}; known: {known}")
    if sandbox == UNSAFE:
        return _run_unsafe(code, limits)
    problem = sandbox_problem()
    if problem is not None:
        return Outcome("refused", error=f"run_python refused: {problem}")
    bwrap = shutil.which(BWRAP) or BWRAP
    memory = max(16, int(limits.memory_mb)) << 20
    max_procs = max(1, int(limits.max_procs))
    group = Cgroup.create(memory, max_procs + 3)  # + bwrap, its pid 1 and the interpreter
    tree_bound = group is not None
    nproc = None
    if group is None and os.getuid() != 0:  # root's own processes ignore RLIMIT_NPROC
        nproc = _user_process_count(os.getuid()) + max_procs + 3
    meta: dict[str, Any] = {
        "tree_memory_bound": tree_bound,
        "tree_processes_bound": tree_bound or nproc is not None,
    }
    containment = "bwrap+cgroup" if tree_bound else "bwrap+rlimit"
    fds: _SandboxFds | None = None
    try:
        try:
            fds = _SandboxFds(code)
        except OSError as exc:
            return Outcome(containment, error=f"could not pass the program: {exc}")
        argv = bwrap_argv(bwrap, limits, fds.program, fds.seccomp)
        meta["seccomp"] = fds.seccomp is not None
        meta["importable"] = "standard library only"
        join_fds = group.join_fds if group else []
        preexec = _preexec(limits, join_fds, nproc)
        outcome = _run(argv, limits, preexec, group, None, fds.fds())
        outcome.containment = containment
        if group is not None:
            stats = group.stats()
            meta.update(stats)
            outcome.memory_limit = stats.get("oom_kills", 0) > 0
        outcome.meta.update(meta)
        return outcome
    finally:
        if fds is not None:
            fds.close()
        if group is not None:
            group.remove()


def _run(
    argv: list[str],
    limits: Limits,
    preexec: Callable[[], None],
    group: Cgroup | None,
    cwd: str | None,
    pass_fds: tuple[int, ...] = (),
) -> Outcome:
    try:
        proc = subprocess.Popen(  # noqa: S603 - argv built here, the program is a file
            argv,
            stdin=subprocess.DEVNULL,
            pass_fds=pass_fds,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(ENV_ALLOWED) if cwd is None else {**ENV_ALLOWED, "HOME": cwd, "TMPDIR": cwd},
            start_new_session=True,
            preexec_fn=preexec,  # noqa: PLW1509 - only system calls run in the child
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Outcome("", error=f"could not start python: {exc}")
    deadline = time.monotonic() + max(0.05, float(limits.timeout_s))
    try:
        got = _pump(proc, limits, deadline)
        if not (got.timed_out or got.output_limit):  # the pipes closed: wait for the exit
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                got.timed_out = True
    finally:
        _kill_tree(proc, group)
        returncode = proc.wait()
        for stream in (proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
    truncated = len(got.stdout) + len(got.stderr) < got.total
    return Outcome(
        "",
        returncode=returncode,
        stdout=bytes(got.stdout),
        stderr=bytes(got.stderr),
        timed_out=got.timed_out,
        output_limit=got.output_limit,
        truncated=truncated,
    )


def _run_unsafe(code: bytes, limits: Limits) -> Outcome:
    """The opt-in mode without isolation: a plain child with rlimits in a temp dir."""
    scratch = OwnedTempDir("orchenv-py-")
    try:
        nproc = None if os.getuid() == 0 else _user_process_count(os.getuid()) + limits.max_procs
        program = os.path.join(scratch.path, "program.py")
        try:
            with open(program, "wb") as handle:
                handle.write(code)
        except OSError as exc:
            return Outcome(UNSAFE, error=f"could not write the program: {exc}")
        argv = [sys.executable, "-I", program]
        outcome = _run(argv, limits, _preexec(limits, [], nproc), None, scratch.path)
        outcome.containment = UNSAFE
        outcome.meta.update(
            tree_memory_bound=False,
            tree_processes_bound=nproc is not None,
            warning="no isolation: the program can read, write and reach what this user can",
        )
        return outcome
    finally:
        scratch.cleanup()
