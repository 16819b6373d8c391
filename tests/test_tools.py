"""``orchenv.envs.puppeteer.tools``: results, limits and refusals of the three tools.

The escape attempts against the sandbox are in ``tests/security/test_sandbox.py``.
"""

from __future__ import annotations

import os

import pytest

from orchenv.envs.puppeteer import sandbox
from orchenv.envs.puppeteer.env import PuppeteerEnv
from orchenv.envs.puppeteer.tools import (
    UNSAFE,
    containment_mode,
    network_isolation_mode,
    read_file,
    run_python,
    sandbox_problem,
    search,
    write_task_files,
)
from orchenv.error import ConfigError, UnknownNameError

PROBLEM = sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"bwrap unusable here: {PROBLEM}")


@needs_bwrap
def test_runs_code():
    result = run_python("print(123456789 * 987654321)", timeout_s=5)
    assert result.ok and result.output.strip() == str(123456789 * 987654321)
    assert result.meta["containment"] == containment_mode()
    assert result.meta["network"] == network_isolation_mode() == "netns"


@needs_bwrap
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("code", "errors"),
    [
        ("import os\nwhile True:\n    os.fork()", {"timeout", "process limit"}),
        ("while True:\n    pass", {"timeout", "cpu limit"}),
        ("x = bytearray(10 * 1024**3)", {"memory"}),
        (
            "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)",
            {"network blocked"},
        ),
        ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", {"output limit"}),
    ],
    ids=["fork-bomb", "infinite-loop", "10GB", "network", "endless-output"],
)
def test_hostile_code_is_contained(code, errors):
    result = run_python(code, timeout_s=1.5)
    assert not result.ok and result.error in errors, (result.error, result.meta)
    assert run_python("print('still here')", timeout_s=5).ok  # the caller keeps running


@needs_bwrap
def test_scratch_is_the_writable_cwd():
    code = "import os; open('a.txt', 'w').write('hi'); print(os.getcwd(), open('a.txt').read())"
    result = run_python(code, timeout_s=5)
    assert result.ok and result.output.split() == ["/scratch", "hi"]
    again = run_python("import os; print(os.listdir('.'))", timeout_s=5)
    assert again.output.strip() == "[]"  # a fresh scratch per call


@needs_bwrap
def test_output_truncated():
    result = run_python("print('x' * 100000)", timeout_s=5, max_output_chars=100)
    assert result.ok and len(result.output) < 200 and result.meta["truncated"]


@pytest.mark.parametrize("code", [None, 42, "\udcff", "print('\x00')", "x" * 1_000_001], ids=repr)
def test_bad_code_never_raises(code):
    result = run_python(code, timeout_s=5)
    assert isinstance(result.ok, bool) and (result.error is None) == result.ok


def test_bad_limits_never_raise():
    result = run_python("print(1)", timeout_s="soon")  # type: ignore[arg-type]
    assert not result.ok and "invalid limits" in result.error


def test_unsafe_mode_runs_without_isolation():
    result = run_python("import os; print(os.getcwd())", timeout_s=5, sandbox=UNSAFE)
    assert result.ok and "orchenv-py-" in result.output
    assert result.meta["containment"] == UNSAFE and not os.path.exists(result.output.strip())


def test_read_file_inside_and_traversal(tmp_path):
    box = tmp_path / "box"
    (box / "sub").mkdir(parents=True)
    (box / "a.txt").write_text("hello")
    (box / "sub" / "b.txt").write_text("nested")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", box / "link.txt")
    os.symlink(tmp_path, box / "dirlink")
    assert read_file("a.txt", box).output == "hello"
    assert read_file("./sub//b.txt", box).output == "nested"
    for bad in ("../secret.txt", str(tmp_path / "secret.txt"), "a/../../secret.txt"):
        result = read_file(bad, box)
        assert not result.ok and result.error == "outside sandbox" and "secret" not in result.output
    for bad in ("link.txt", "dirlink/secret.txt"):
        result = read_file(bad, box)
        assert not result.ok and result.error == "symlink refused" and "secret" not in result.output
    assert read_file("missing.txt", box).error == "no such file"
    assert read_file("sub", box).error == "not a regular file"


@pytest.mark.parametrize(
    "path",
    ["", "a\x00b", "\udcff", "\ud800", "x" * 256, "a/" + "y" * 300, "/" * 5000, ".", None, 7],
    ids=repr,
)
def test_read_file_bad_paths_never_raise(tmp_path, path):
    result = read_file(path, tmp_path)
    assert not result.ok and result.error


def test_read_file_caps_what_it_reads(tmp_path):
    (tmp_path / "big.txt").write_text("y" * 100_000)
    result = read_file("big.txt", tmp_path, max_chars=50)
    assert result.ok and result.output.startswith("y" * 50) and result.meta["truncated"]


def test_write_task_files_then_read_them(tmp_path):
    files = {"problem.txt": "How many?", "orders.csv": "item,quantity\nbolts,3\n"}
    assert write_task_files(files, tmp_path) == ["problem.txt", "orders.csv"]
    assert read_file("orders.csv", tmp_path).output == files["orders.csv"]
    write_task_files({"problem.txt": "second task"}, tmp_path)  # an old file is replaced
    assert read_file("problem.txt", tmp_path).output == "second task"


def test_write_task_files_never_follows_a_planted_symlink(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    os.symlink(outside, box / "problem.txt")
    write_task_files({"problem.txt": "task text"}, box)
    assert outside.read_text() == "keep me"
    assert not (box / "problem.txt").is_symlink()
    assert read_file("problem.txt", box).output == "task text"


@pytest.mark.parametrize("name", ["../x.txt", "a/b.txt", "/etc/passwd", ".hidden", "", "x\x00"])
def test_write_task_files_refuses_paths(tmp_path, name):
    with pytest.raises(ConfigError, match="plain names"):
        write_task_files({name: "x"}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_search_relevant():
    docs = {
        "fr": "Paris is the capital of France",
        "de": "Berlin is the capital of Germany",
        "py": "Python integers have arbitrary precision",
    }
    result = search("python integer precision", docs, k=2)
    assert result.ok and result.meta["hits"][0][0] == "py"
    assert not search("zzzz", docs).ok


@needs_bwrap
def test_without_a_cgroup_meta_says_the_tree_is_not_bound(monkeypatch):
    monkeypatch.setattr(sandbox.Cgroup, "create", classmethod(lambda cls, *a: None))
    result = run_python("print('ok')", timeout_s=5)
    assert result.ok and result.meta["containment"] == "bwrap+rlimit"
    assert not result.meta["tree_memory_bound"]


def test_env_checks_the_sandbox_name():
    with pytest.raises(UnknownNameError, match="Did you mean 'bwrap'"):
        PuppeteerEnv(sandbox="bwarp")
