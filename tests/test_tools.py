"""Containment of ``orchenv.envs.puppeteer.tools``: every hostile program is stopped and reported."""

from __future__ import annotations

import os

import pytest

from orchenv.envs.puppeteer.tools import network_isolation_mode, read_file, run_python, search


def test_runs_code():
    result = run_python("print(123456789 * 987654321)", timeout_s=3)
    assert result.ok and result.output.strip() == str(123456789 * 987654321)
    assert result.meta["network"] == network_isolation_mode()


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
    ],
    ids=["fork-bomb", "infinite-loop", "10GB", "network"],
)
def test_hostile_code_is_contained(code, errors):
    result = run_python(code, timeout_s=1.5)
    assert not result.ok and result.error in errors, (result.error, result.meta)
    assert run_python("print('still here')", timeout_s=3).ok  # the caller keeps running


def test_socket_stub_mode_blocks_network():
    code = "import socket\nsocket.socket()"
    result = run_python(code, timeout_s=3, network="socket-stub")
    assert result.error == "network blocked" and result.meta["network"] == "socket-stub"


def test_write_outside_sandbox_refused(tmp_path):
    target = tmp_path / "pwned.txt"
    result = run_python(f"open({str(target)!r}, 'w').write('x')", timeout_s=3)
    assert result.error == "write refused" and not target.exists()
    inside = run_python("open('a.txt', 'w').write('hi'); print(open('a.txt').read())")
    assert inside.ok and inside.output.strip() == "hi"


def test_output_truncated():
    result = run_python("print('x' * 100000)", timeout_s=3, max_output_chars=100)
    assert result.ok and len(result.output) < 200 and result.meta["truncated"]


def test_read_file_inside_and_traversal(tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    (box / "a.txt").write_text("hello")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", box / "link.txt")
    assert read_file("a.txt", box).output == "hello"
    for bad in ("../secret.txt", str(tmp_path / "secret.txt"), "link.txt", "a/../../secret.txt"):
        result = read_file(bad, box)
        assert not result.ok and result.error == "outside sandbox" and "secret" not in result.output
    assert read_file("missing.txt", box).error == "no such file"


def test_search_relevant():
    docs = {
        "fr": "Paris is the capital of France",
        "de": "Berlin is the capital of Germany",
        "py": "Python integers have arbitrary precision",
    }
    result = search("python integer precision", docs, k=2)
    assert result.ok and result.meta["hits"][0][0] == "py"
    assert not search("zzzz", docs).ok
