"""Escape attempts against ``tool:run_python``'s sandbox and ``tool:read_file`` (issue 13).

Each test is a real attack, run against the real sandbox, and checks from the host that
nothing got out. Where bwrap cannot run here the sandbox tests skip with the reason, and
``test_without_bwrap_the_call_is_refused`` checks that ``run_python`` then refuses instead of
running the code without isolation. Tests that need the per-call cgroup (tree memory and
process count) skip with the reason where none can be made, after checking that ``meta``
says the tree is not bound.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from orchenv.envs.puppeteer import sandbox as sandbox_module
from orchenv.envs.puppeteer.sandbox import ENV_ALLOWED, UNSAFE, containment_mode
from orchenv.envs.puppeteer.tools import read_file, run_python, sandbox_problem

PROBLEM = sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"bwrap unusable here: {PROBLEM}")
MODE = containment_mode()
needs_cgroup = pytest.mark.skipif(
    MODE != "bwrap+cgroup", reason=f"no per-call cgroup here (mode {MODE}): tree not bound"
)


def run(code: str, **kwargs):
    kwargs.setdefault("timeout_s", 10)
    return run_python(textwrap.dedent(code), **kwargs)


def test_without_bwrap_the_call_is_refused(monkeypatch):
    """With no bwrap on PATH the call is refused with the fix, never run unsandboxed."""
    marker = Path(f"/tmp/orchenv-refused-{uuid.uuid4().hex}")
    monkeypatch.setattr(sandbox_module, "_probe_cache", {})
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    result = run_python(f"open({str(marker)!r}, 'w').write('ran')")
    assert not result.ok and result.meta["containment"] == "refused"
    assert "apt-get install bubblewrap" in result.error and UNSAFE in result.error
    assert not marker.exists()


def test_the_mode_that_runs_here_is_contained_or_refused():
    result = run_python("print('hi')")
    if PROBLEM is None:
        assert result.ok and result.meta["containment"] in ("bwrap+cgroup", "bwrap+rlimit")
        assert result.meta["tree_memory_bound"] == (result.meta["containment"] == "bwrap+cgroup")
    else:
        assert not result.ok and result.meta["containment"] == "refused"


def test_unsafe_mode_says_so():
    result = run_python("print(6 * 7)", sandbox=UNSAFE, timeout_s=10)
    assert result.ok and result.output.strip() == "42"
    assert result.meta["containment"] == UNSAFE and result.meta["network"] == "none"
    assert not result.meta["tree_memory_bound"] and "no isolation" in result.meta["warning"]


def test_unknown_sandbox_is_refused():
    result = run_python("print(1)", sandbox="none")
    assert not result.ok and result.meta["containment"] == "refused" and "bwrap" in result.error


# -- reading secrets ----------------------------------------------------------------------------


@needs_bwrap
@pytest.mark.timeout(60)
def test_cannot_read_shadow_home_or_project(tmp_path):
    project_file = Path(__file__).resolve()
    planted = Path.home() / f".orchenv-secret-{uuid.uuid4().hex}"
    try:
        planted.write_text("HOME-SECRET")
    except OSError:
        planted = project_file
    try:
        for path in ("/etc/shadow", str(planted), str(project_file)):
            for code in (
                f"print(open({path!r}).read())",
                f"import os; os.system('cat {path}')",
                f"import subprocess; print(subprocess.run(['cat', {path!r}]))",
            ):
                result = run(code)
                for secret in ("HOME-SECRET", "Escape attempts against", "root:"):
                    assert secret not in result.output, (path, code, result.output)
        listing = run("import os; print(os.listdir('/'), os.listdir('/etc'))").output
        assert "shadow" not in listing and "passwd" not in listing
    finally:
        if planted != project_file:
            planted.unlink()


@needs_bwrap
def test_parent_environment_is_not_readable(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-orchenv-test-not-a-key")
    result = run("import os; print(sorted(os.environ.items())); print(os.path.exists('/proc'))")
    assert result.ok and "sk-orchenv-test" not in result.output
    names = {k for k, _ in eval(result.output.splitlines()[0])}  # noqa: S307 - our own output
    assert names <= {*ENV_ALLOWED, "PWD"}, names  # bwrap sets PWD for --chdir
    assert result.output.splitlines()[1] == "False"  # no /proc: no /proc/<pid>/environ either


@needs_bwrap
def test_cannot_write_kernel_settings():
    """Inside, the uid maps back to the caller (host root here): a /proc would let it write
    /proc/sys. The attempt writes back the current value, so it would be harmless anyway."""
    current = Path("/proc/sys/kernel/core_pattern").read_text()
    result = run(
        f"""
        import os
        for path in ('/proc/sys/kernel/core_pattern', '/sys/kernel/profiling'):
            try:
                with open(path, 'w') as f:
                    f.write({current!r})
                print('WROTE', path)
            except OSError as exc:
                print('refused', path, exc.errno)
        print('sysrq', os.path.exists('/proc/sysrq-trigger'))
        """
    )
    assert "WROTE" not in result.output and "sysrq False" in result.output


# -- writing outside the scratch tmpfs ---------------------------------------------------------------


def _write_attempts(target: str) -> dict[str, str]:
    return {
        "open": f"open({target!r}, 'w').write('pwned')",
        "os.system": f"import os; print(os.system('echo pwned > {target}'))",
        "subprocess": (
            "import subprocess\n"
            f"print(subprocess.run(['sh', '-c', 'echo pwned > {target}']).returncode)"
        ),
        "ctypes": (
            "import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            f"fd = libc.open({target.encode()!r}, os.O_WRONLY | os.O_CREAT, 0o644)\n"
            "print('fd', fd, libc.write(fd, b'pwned', 5) if fd >= 0 else ctypes.get_errno())"
        ),
        "posix_spawn": (
            "import os\n"
            f"pid = os.posix_spawn('/bin/sh', ['sh', '-c', 'echo pwned > {target}'], {{}})\n"
            "print(os.waitpid(pid, 0))"
        ),
    }


@needs_bwrap
@pytest.mark.timeout(90)
def test_cannot_write_outside_scratch():
    site = sysconfig.get_paths(vars={"base": sys.base_prefix})["purelib"]
    tag = uuid.uuid4().hex
    targets = [
        os.path.join(os.path.realpath(site), f"orchenv-pwned-{tag}.pth"),
        str(Path(__file__).resolve().parent / f"orchenv-pwned-{tag}.txt"),
        f"/etc/orchenv-pwned-{tag}",
        f"/usr/orchenv-pwned-{tag}",
        f"/orchenv-pwned-{tag}",
    ]
    for target in targets:
        for how, code in _write_attempts(target).items():
            result = run(code)
            assert not os.path.exists(target), (how, target, result.output, result.meta)
    inside = run("open('a.txt', 'w').write('hi'); print(open('/scratch/a.txt').read())")
    assert inside.ok and inside.output.strip() == "hi"


# -- limits that bind the whole tree -------------------------------------------------------------


@needs_cgroup
@pytest.mark.timeout(60)
def test_fork_bomb_is_bounded():
    result = run(
        """
        import os, time
        made = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            made += 1
        print(made)
        """,
        max_procs=16,
    )
    made = int(result.output.strip())
    assert made <= 16, made  # before: 200 of 200
    assert result.meta["forks_refused"] >= 1


@needs_cgroup
@pytest.mark.timeout(90)
def test_sixteen_children_share_one_memory_limit():
    """16 children x 450 MB under a 512 MB limit: before, all 16 held their 450 MB at once
    (7.2 GB). Now the kernel kills children until the survivors fit: at most one can hold
    its block, so at least 15 die, and the tree's peak stays under the limit."""
    result = run(
        """
        import os, time
        kids = []
        for _ in range(16):
            pid = os.fork()
            if pid == 0:
                block = bytearray(450 << 20)  # zero-filled: every page is touched
                time.sleep(60)
                os._exit(0)
            kids.append(pid)
        dead = set()
        def reap():
            for pid in kids:
                if pid not in dead and os.waitpid(pid, os.WNOHANG)[0] == pid:
                    dead.add(pid)
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline and len(dead) < 15:
            reap()
            time.sleep(0.05)
        time.sleep(0.5)
        reap()
        print(len(kids) - len(dead), len(dead))
        """,
        memory_mb=512,
        timeout_s=30,
    )
    alive, dead = (int(x) for x in result.output.split())
    assert alive <= 1 and dead >= 15, (alive, dead)  # before: 16 alive, 7.2 GB
    assert result.meta["peak_memory_bytes"] <= 512 << 20
    assert result.meta["oom_kills"] >= 15


def test_rlimit_mode_says_the_tree_is_not_bound():
    result = run_python("print(1)")
    if result.meta.get("containment") == "bwrap+rlimit":
        assert not result.meta["tree_memory_bound"]
    elif result.meta.get("containment") == "bwrap+cgroup":
        assert result.meta["tree_memory_bound"] and result.meta["tree_processes_bound"]


@needs_bwrap
@pytest.mark.timeout(60)
def test_disk_is_bounded_by_the_tmpfs_size():
    result = run(
        """
        import os
        written = 0
        for place in ('/scratch', '/tmp', '/dev/shm'):
            for i in range(1000):
                try:
                    with open(f'{place}/f{i}', 'wb') as f:
                        f.write(b'x' * (1 << 20))
                    written += 1
                except OSError as exc:
                    print(place, exc.errno)
                    break
        print(written)
        """,
        disk_mb=32,
    )
    lines = result.output.split()
    assert lines.count("28") == 3, result.output  # ENOSPC, in each of the three places
    written = int(lines[-1])
    assert written <= 32 + 8 + 8, written  # before: 1 GB outside the scratch dir persisted


@needs_bwrap
def test_shm_writes_do_not_reach_the_host():
    name = f"orchenv-shm-{uuid.uuid4().hex}"
    result = run(f"open('/dev/shm/{name}', 'wb').write(b'x' * 4096); print('ok')")
    assert result.ok and result.output.strip() == "ok"
    assert not os.path.exists(f"/dev/shm/{name}")


# -- sockets, signals, processes -----------------------------------------------------------------------


@needs_bwrap
@pytest.mark.timeout(60)
def test_host_sockets_are_unreachable(tmp_path):
    unix_path = str(tmp_path / "host.sock")
    with socket.socket(socket.AF_UNIX) as unix, socket.socket() as tcp:
        unix.bind(unix_path)
        unix.listen()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        port = tcp.getsockname()[1]
        result = run(
            f"""
            import socket
            for family, address in ((socket.AF_UNIX, {unix_path!r}), (socket.AF_INET, ('127.0.0.1', {port}))):
                s = socket.socket(family)
                s.settimeout(2)
                try:
                    s.connect(address)
                    print('CONNECTED', address)
                except OSError as exc:
                    print('refused', exc.errno)
            """
        )
        for listener in (unix, tcp):
            listener.setblocking(False)
            with pytest.raises(BlockingIOError):
                listener.accept()
    assert "CONNECTED" not in result.output and result.output.count("refused") == 2


@needs_bwrap
@pytest.mark.timeout(60)
def test_fifo_as_stdout_cannot_hang_the_call():
    """Before, replacing the captured stdout file with a FIFO hung ``env.step`` forever."""
    result = run(
        """
        import os, time
        os.mkfifo('fifo')
        fd = os.open('fifo', os.O_RDWR)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        time.sleep(60)
        """,
        timeout_s=2,
    )
    assert not result.ok and result.error == "timeout"


@needs_bwrap
@pytest.mark.timeout(60)
def test_cannot_signal_the_caller():
    got: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    try:
        result = run(
            f"""
            import os, signal
            for pid in ({os.getpid()}, os.getppid()):
                try:
                    os.kill(pid, signal.SIGUSR1)
                    print('sent', pid)
                except OSError as exc:
                    print('refused', pid, exc.errno)
            """
        )
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert result.ok and not got, result.output


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


@needs_bwrap
@pytest.mark.timeout(60)
def test_daemon_does_not_outlive_the_call():
    marker = f"orchenv-daemon-{uuid.uuid4().hex}"
    result = run(
        f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                print('daemon-up', flush=True)
                os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', {marker!r}])
            os._exit(0)
        time.sleep(0.5)
        """
    )
    assert "daemon-up" in result.output
    assert _processes_with(marker) == []


# -- read_file -------------------------------------------------------------------------------------------


def test_read_file_refuses_a_planted_hard_link(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    secret = tmp_path / "root-only.txt"
    secret.write_text("TOP-SECRET")
    secret.chmod(0o600)
    os.link(secret, box / "problem2.txt")
    result = read_file("problem2.txt", box)
    assert (
        not result.ok and result.error == "hard link refused" and "TOP-SECRET" not in result.output
    )


@needs_bwrap
def test_sandbox_cannot_plant_links_in_the_task_folder(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    code = f"import os; os.link('/usr/bin/env', {str(box / 'x')!r}); os.symlink('/', 'y')"
    run(code)
    assert list(box.iterdir()) == []


@pytest.mark.timeout(60)
def test_read_file_symlink_race(tmp_path):
    """A thread swaps ``sub`` between a real dir and a symlink to an outside dir while
    ``read_file`` reads ``sub/f.txt``: it never returns the outside file."""
    box, outside = tmp_path / "box", tmp_path / "outside"
    box.mkdir()
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE")
    real = tmp_path / "real"
    real.mkdir()
    (real / "f.txt").write_text("inside")
    os.rename(real, box / "sub")
    os.symlink(outside, box / "other")  # swapped atomically with sub (RENAME_EXCHANGE)
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        pytest.skip("no renameat2 in this libc: cannot swap a dir and a symlink atomically")
    here = os.open(box, os.O_RDONLY | os.O_DIRECTORY)
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            if libc.renameat2(here, b"sub", here, b"other", 2) == 0:  # 2: RENAME_EXCHANGE
                swaps[0] += 1

    outcomes: dict[str, int] = {}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        for _ in range(3000):
            result = read_file("sub/f.txt", box)
            assert "OUTSIDE" not in result.output
            key = "read" if result.ok else str(result.error)
            outcomes[key] = outcomes.get(key, 0) + 1
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
        os.close(here)
    assert swaps[0] > 0 and outcomes.get("symlink refused", 0) > 0, outcomes
    assert outcomes.get("read", 0) > 0, outcomes  # both states were seen


def test_read_file_fifo_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    result = read_file("pipe", tmp_path)
    assert not result.ok and result.error == "not a regular file"


# -- temp dirs -----------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_an_env_never_closed_leaves_no_temp_dir(tmp_path):
    script = textwrap.dedent(
        """
        from orchenv.envs.puppeteer.env import PuppeteerEnv
        for sandbox in ("bwrap", "unsafe-no-isolation"):
            env = PuppeteerEnv(sandbox=sandbox)
            env.reset(seed=0)
            env.step(f"<agent>{env.pool.names[0]}:read_file</agent>")
            env.step(f"<agent>{env.pool.names[0]}:run_python</agent>")
        import tempfile, os
        print(os.listdir(tempfile.gettempdir()))
        """
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=100
    )
    assert proc.returncode == 0, proc.stderr
    assert "orchenv-puppeteer-" in proc.stdout  # it existed while the env was alive
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("orchenv-")] == []


def test_env_reports_the_containment_of_each_call(monkeypatch):
    from orchenv.envs.puppeteer.env import PuppeteerEnv

    env = PuppeteerEnv()
    _, info = env.reset(seed=0)
    assert info["sandbox"] == MODE
    python = f"<agent>{env.pool.names[0]}:run_python</agent>"  # its model writes the program
    _, _, _, _, info = env.step(python)
    assert info["tool_calls"][0]["containment"] == MODE
    monkeypatch.setattr(sandbox_module, "_probe_cache", {"bwrap": "no bwrap (test)"})
    _, _, _, _, info = env.step(python)
    assert info["tool_calls"][0]["containment"] == "refused" and not info["tool_calls"][0]["ok"]
    assert info["sandbox"] == "refused" and "no bwrap (test)" in env.history[-1][1]
    env.close()
    unsafe = PuppeteerEnv(sandbox=UNSAFE)
    unsafe.reset(seed=0)
    _, _, _, _, info = unsafe.step(f"<agent>{unsafe.pool.names[0]}:run_python</agent>")
    assert info["tool_calls"][0]["containment"] == UNSAFE and info["sandbox"] == UNSAFE
    unsafe.close()
