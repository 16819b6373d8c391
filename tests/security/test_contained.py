"""Issue 28, part 1: an agent's program cannot kill the run, read the caller's keys, leave
the network namespace or import the host's packages; temp folders of killed runs are swept.

Each test failed before its fix (checked by running it against the previous code).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from orchenv.envs.puppeteer import sandbox as sandbox_module
from orchenv.envs.puppeteer.sandbox import OwnedTempDir
from orchenv.envs.puppeteer.tools import run_python, sandbox_problem

PROBLEM = sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"bwrap unusable here: {PROBLEM}")
ROOT = Path(__file__).resolve().parents[2]


def run(code: str, **kwargs):
    kwargs.setdefault("timeout_s", 10)
    return run_python(textwrap.dedent(code), **kwargs)


def _child(script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


# -- 1. a program that never reads its code cannot kill the caller ----------------------------


@pytest.mark.parametrize("mode", ["bwrap", "unsafe-no-isolation"])
def test_a_program_that_exits_unread_cannot_kill_a_sigpipe_default_caller(mode):
    """1 MB whose first line is a syntax error: the child exits before reading it all. With
    SIGPIPE's default action (what the ``orchenv`` executable had), writing the rest into
    its stdin killed the caller (exit 141) in most runs; the program now comes as a file."""
    if mode == "bwrap" and PROBLEM is not None:
        pytest.skip(f"bwrap unusable here: {PROBLEM}")
    done = _child(
        f"""
        import signal
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        from orchenv.envs.puppeteer.tools import run_python
        code = ")\\n" + ("# " + "\\U0001f600" * 100 + "\\n") * 2500
        for _ in range(8):
            result = run_python(code, sandbox={mode!r}, timeout_s=10)
            assert not result.ok and "SyntaxError" in result.meta["stderr"], result
        print("survived")
        """
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "survived"


def test_the_cli_survives_a_dead_reader_mid_write():
    """Under the ``orchenv`` executable's signal settings, a write into a pipe whose reader
    died raises ``BrokenPipeError`` (handled by the caller), it does not kill the process."""
    done = _child(
        """
        import subprocess, sys
        import orchenv.cli as cli

        def fake_main(argv=None):
            child = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
            child.wait()
            try:
                for _ in range(64):
                    child.stdin.write(b"x" * 65536)
                    child.stdin.flush()
            except BrokenPipeError:
                print("caught", flush=True)
            return 0

        cli.main = fake_main
        sys.exit(cli.console_main())
        """
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "caught"


def test_the_cli_ends_quietly_when_its_stdout_reader_goes_away():
    """``orchenv list | head -c 1``: no traceback, no error line, the SIGPIPE status."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchenv", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141), err
    assert err == ""


# -- 3, 4. seccomp: keyring, socket families, process inspection ------------------------------


@needs_bwrap
def test_the_sandbox_has_no_keyring():
    """The program can neither read a key the caller holds nor leave one behind: keyctl,
    add_key and request_key fail with EPERM (they succeeded on the caller's session ring)."""
    libc = ctypes.CDLL(None, use_errno=True)
    planted = libc.syscall(248 if os.uname().machine == "x86_64" else 217,
                           b"user", b"orchenv-issue28", b"host-secret", 11, -3)  # fmt: skip
    result = run(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        x86 = os.uname().machine == "x86_64"
        ADD, REQ, CTL = (248, 249, 250) if x86 else (217, 218, 219)
        found = libc.syscall(REQ, b"user", b"orchenv-issue28", None, 0)
        print("request", found, ctypes.get_errno())
        added = libc.syscall(ADD, b"user", b"left-behind", b"x", 1, -3)
        print("add", added, ctypes.get_errno())
        print("ctl", libc.syscall(CTL, 0, -3, 0), ctypes.get_errno())
        """
    )
    assert result.ok, result
    lines = dict(line.split(" ", 1) for line in result.output.splitlines())
    for name in ("request", "add", "ctl"):
        assert lines[name] == f"-1 {errno.EPERM}", (name, result.output, planted)
    if planted > 0:  # remove the key the host planted (KEYCTL_UNLINK from the session ring)
        libc.syscall(250 if os.uname().machine == "x86_64" else 219, 9, planted, -3)


@needs_bwrap
def test_only_unix_and_ip_sockets_can_be_made():
    result = run(
        """
        import socket
        for family, kind in ((1, 1), (2, 1), (10, 2), (40, 1), (16, 2), (17, 2), (38, 5), (31, 1)):
            try:
                socket.socket(family, kind).close()
                print(family, "made")
            except OSError as exc:
                print(family, exc.errno)
        try:
            socket.socketpair(socket.AF_UNIX)
            print("pair made")
        except OSError as exc:
            print("pair", exc.errno)
        """
    )
    assert result.ok, result
    got = dict(line.split(" ", 1) for line in result.output.splitlines())
    assert got["1"] == got["2"] == got["10"] == got["pair"] == "made", got
    for family in ("40", "16", "17", "38", "31"):  # vsock, netlink, packet, alg, bluetooth
        assert got[family] == str(errno.EAFNOSUPPORT), (family, got)


@needs_bwrap
def test_ptrace_unshare_io_uring_and_file_handles_are_refused():
    result = run(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        x86 = os.uname().machine == "x86_64"
        calls = {"ptrace": (101, 117, (0, 0, 0, 0)), "unshare": (272, 97, (0x10000000,)),
                 "io_uring_setup": (425, 425, (1, 0)), "bpf": (321, 280, (0, 0, 0)),
                 "open_by_handle_at": (304, 265, (0, 0, 0))}
        for name, (n64, narm, args) in calls.items():
            rc = libc.syscall(n64 if x86 else narm, *args)
            print(name, rc, ctypes.get_errno())
        """
    )
    assert result.ok, result
    for line in result.output.splitlines():
        name, rc, err = line.split()
        assert (rc, int(err)) == ("-1", errno.EPERM), line


def test_the_filter_numbers_match_the_kernel_headers():
    """The hand-written tables against the kernel's own headers, where they are installed."""
    from orchenv.envs.puppeteer import seccomp

    checked = 0
    for machine, header, pattern in (
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", r"#define __NR_(\w+) (\d+)"),
        ("aarch64", "/usr/include/asm-generic/unistd.h", r"#define __NR(?:3264)?_(\w+) (\d+)"),
    ):
        if not os.path.exists(header):
            continue
        defined = {k: int(v) for k, v in re.findall(pattern, Path(header).read_text())}
        for name, number in seccomp._TABLES[machine][1].items():
            if name in defined:
                assert defined[name] == number, (machine, name)
                checked += 1
    if checked == 0:
        pytest.skip("no kernel headers installed")
    assert len(seccomp.filter_program("x86_64")) % 8 == 0
    assert len(seccomp.filter_program("aarch64")) // 8 < 4096


# -- 5. standard library only ------------------------------------------------------------------


@needs_bwrap
def test_host_packages_cannot_be_imported():
    hidden = sandbox_module._hidden_package_dirs(sandbox_module._read_only_roots())
    assert hidden, "no package folder of the host found: nothing to check"
    result = run(
        f"""
        import os, sys
        for path in {hidden!r}:
            print(path, len(os.listdir(path)) if os.path.isdir(path) else "absent")
        sys.path[:0] = {hidden!r}
        try:
            import pip
            print("pip imported")
        except ImportError:
            print("pip absent")
        import json, sqlite3, decimal  # the standard library still imports
        """
    )
    assert result.ok, result
    lines = result.output.splitlines()
    assert lines[-1] == "pip absent"
    assert all(line.endswith((" 0", " absent")) for line in lines[:-1]), lines
    assert result.meta["importable"] == "standard library only"


# -- 9. temp folders of killed runs ---------------------------------------------------------


def test_temp_folders_of_a_killed_process_are_swept():
    """A Puppeteer env's task folder belongs to its process; SIGKILL leaves it behind, and the
    next process to make one removes folders whose owner no longer exists."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from orchenv.envs.puppeteer.sandbox import OwnedTempDir\n"
            "d = OwnedTempDir('orchenv-puppeteer-')\n"
            "print(d.path, flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    left = proc.stdout.readline().strip()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert os.path.isdir(left) and left.startswith(tempfile.gettempdir())
    live = OwnedTempDir("orchenv-puppeteer-")  # ours, alive: kept
    mine = OwnedTempDir("orchenv-py-")
    try:
        assert not os.path.exists(left)
        assert os.path.isdir(live.path) and os.path.isdir(mine.path)
    finally:
        live.cleanup()
        mine.cleanup()
    for _ in range(50):
        if not os.path.exists(live.path):
            break
        time.sleep(0.01)
    assert not os.path.exists(live.path)


# -- 6. SRDD: one run per tool step, and sandbox= honoured ---------------------------------


def _srdd_env(program: str, **kwargs):
    """A Puppeteer env on SRDD tasks whose one agent, ``coder``, writes ``program``."""
    import gymnasium as gym

    import orchenv  # noqa: F401
    from orchenv.pool import AgentPool, AgentSpec
    from orchenv.testing.scripted import ScriptedBackend

    def reply(spec, messages, context):
        import json

        return json.dumps({"action": "run_python", "parameter": program})

    backend = ScriptedBackend({"coder": reply})
    spec = AgentSpec(name="coder", model="coder", tier=0, backend="scripted")
    pool = AgentPool([spec], {"scripted": backend}, name="srdd-coder")
    env = gym.make("orch/Puppeteer-v0", pool=pool, tasks="srdd", **kwargs)
    env.reset(seed=0)
    return env


@needs_bwrap
def test_an_srdd_tool_step_runs_the_program_once():
    """An endless loop: the step took the tool's timeout plus a 10 s grading run of the same
    program; now one sandbox call gives both the output and the grade."""
    env = _srdd_env("while True:\n    pass\n", tool_timeout_s=1.0)
    start = time.perf_counter()
    _, _, _, _, info = env.step("<agent>coder:run_python</agent>")
    took = time.perf_counter() - start
    assert info["tool_calls"][0]["error"] == "timeout"
    assert took < 3.0, took
    assert info["tool_calls"][0]["seccomp"] is True
    assert info["tool_calls"][0]["importable"] == "standard library only"
    env.close()


def test_srdd_grading_honours_the_sandbox_argument(monkeypatch):
    """Without bubblewrap and with ``sandbox="unsafe-no-isolation"``, SRDD code is graded
    (it scored 0 with status "refused": grading ignored ``sandbox=``)."""
    from orchenv.envs.puppeteer.tasks import reference_program

    monkeypatch.setattr(sandbox_module, "_probe_cache", {})
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    env = _srdd_env("print(1)", sandbox="unsafe-no-isolation", tool_timeout_s=5.0)
    base = env.unwrapped
    assert base._grade(reference_program(base.task)) == (1.0, "ok")
    env.close()
