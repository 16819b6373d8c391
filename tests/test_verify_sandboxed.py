"""Sandboxed re-execution (issue 37 item 3): ``orchenv verify BUNDLE --rerun --board B --key K
--out DIR`` plays the bundle's Python entry point under bubblewrap against a sealed referee
over its Unix socket; the referee's signed record is the row.

Entry points in temp bundles: an honest controller class, one that tries to read the key
file, the board and the runs folder, one that tries the network, one that crashes; saved
policies and missing entry points are refused; without bwrap nothing runs.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("openenv")

import orchenv  # noqa: E402,F401
from orchenv.error import ConfigError, DataError  # noqa: E402
from orchenv.eval.board import make_spec, sealed_status, write_spec  # noqa: E402
from orchenv.eval.rundir import read_episode_log  # noqa: E402
from orchenv.verify import sandbox  # noqa: E402
from orchenv.verify.keys import read_key, write_key  # noqa: E402
from orchenv.verify.sandbox import rerun_entry_point  # noqa: E402

MATH = "orch/MathRoute-v0"
EPISODES = 3
ROOT = Path(__file__).resolve().parents[1]

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"
)

HONEST = '''
class Router:
    """Route to the strongest agent, accept its draft (reads only what the wire shows)."""

    def __init__(self, agent: str) -> None:
        self.agent = agent

    def act(self, observation, info):
        if info.get("phase") == "verify":
            return "<verdict>True</verdict>"
        return f"<model>{self.agent}</model>"
'''


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("sandboxed")
    key_file = write_key(root / "secret" / "board.key")
    key = read_key(key_file)
    spec = make_spec(MATH, pool="system1", split="test", sealed_episodes=EPISODES, key=key)
    board_file = write_spec(root / "secret" / "board.json", spec)
    return {"root": root, "key_file": key_file, "key": key, "spec": spec, "board": board_file}


def _bundle(root: Path, name: str, source: str, entry: str, kwargs: dict | None = None) -> Path:
    bundle = root / "bundles" / name
    bundle.mkdir(parents=True)
    (bundle / "policy.py").write_text(textwrap.dedent(source), encoding="utf-8")
    (bundle / "entry_point.json").write_text(
        json.dumps({"entry_point": entry, "kwargs": kwargs or {}}), encoding="utf-8"
    )
    return bundle


def _rerun(board: dict, bundle: Path, name: str, **kw: float) -> sandbox.Rerun:
    return rerun_entry_point(
        bundle, board["board"], board["key_file"], board["root"] / "runs" / name, **kw
    )


@needs_bwrap
def test_an_honest_entry_point_is_refereed_and_signed(board: dict) -> None:
    bundle = _bundle(
        board["root"], "honest", HONEST, "policy:Router", {"agent": "Qwen3-30B-A3B-Instruct"}
    )
    result = _rerun(board, bundle, "honest")
    assert result.status == "complete" and result.exit_code == 0, result.stderr_tail
    assert sealed_status(result.out, board["spec"], board["key"]) == "sealed"
    rows = read_episode_log(result.out / "episodes.jsonl")
    assert [r["episode"] for r in rows] == list(range(EPISODES))
    assert all(r["actions"][0] == "<model>Qwen3-30B-A3B-Instruct</model>" for r in rows)
    assert all("referee_abandoned" not in r["metrics"] for r in rows)


@needs_bwrap
def test_an_entry_point_cannot_read_the_key_or_the_board(board: dict) -> None:
    runs = board["root"] / "runs"
    source = f"""
    import os, sys
    TRIED = False

    def act(observation):
        global TRIED
        if not TRIED:
            TRIED = True
            for path in ({str(board["key_file"])!r}, {str(board["board"])!r}):
                try:
                    with open(path) as fh:
                        print("READ", path, fh.read()[:100], file=sys.stderr)
                except OSError as exc:
                    print("REFUSED", path, type(exc).__name__, file=sys.stderr)
            try:
                print("READ", os.listdir({str(runs)!r}), file=sys.stderr)
            except OSError as exc:
                print("REFUSED", type(exc).__name__, file=sys.stderr)
        return "<model>Qwen2.5-1.5B-Instruct</model>" if "<verdict>" not in observation[-2000:] else "<verdict>True</verdict>"
    """
    bundle = _bundle(board["root"], "thief", source, "policy:act")
    result = _rerun(board, bundle, "thief", timeout_s=120)
    assert result.stderr_tail.count("REFUSED") == 3, result.stderr_tail
    assert "READ" not in result.stderr_tail
    assert board["key"].hex() not in result.stderr_tail
    assert sealed_status(result.out, board["spec"], board["key"]) == "sealed"
    assert len(read_episode_log(result.out / "episodes.jsonl")) == EPISODES


@needs_bwrap
def test_an_entry_point_has_no_network(board: dict) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    source = f"""
    import socket, sys

    def act(observation):
        for where in (("127.0.0.1", {port}), ("1.1.1.1", 53), ("pypi.org", 443)):
            try:
                socket.create_connection(where, timeout=3).close()
                print("CONNECTED", where, file=sys.stderr)
            except OSError as exc:
                print("NO-NETWORK", where, type(exc).__name__, file=sys.stderr)
        raise SystemExit(3)  # leave after the first step: the referee still counts all
    """
    bundle = _bundle(board["root"], "netcat", source, "policy:act")
    try:
        result = _rerun(board, bundle, "netcat", timeout_s=120)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing reached the host's loopback
    finally:
        listener.close()
    assert result.stderr_tail.count("NO-NETWORK") == 3, result.stderr_tail
    assert "CONNECTED" not in result.stderr_tail
    assert result.exit_code == 3 and result.status == "abandoned"
    assert sealed_status(result.out, board["spec"], board["key"]) == "sealed"
    rows = read_episode_log(result.out / "episodes.jsonl")
    assert len(rows) == EPISODES and all(r["metrics"]["referee_abandoned"] == 1 for r in rows)
    assert all(not r["correct"] for r in rows)


@needs_bwrap
def test_a_crash_before_playing_is_still_refereed(board: dict) -> None:
    bundle = _bundle(board["root"], "crash", "raise ImportError('boom')\n", "policy:act")
    result = _rerun(board, bundle, "crash", timeout_s=120)
    assert result.exit_code not in (0, None) and "boom" in result.stderr_tail
    assert result.status == "abandoned"
    assert sealed_status(result.out, board["spec"], board["key"]) == "sealed"
    assert [r["reward"] for r in read_episode_log(result.out / "episodes.jsonl")] == [0.0] * 3


WEIGHTS_POLICY = '''
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

AGENTS = ["Qwen2.5-1.5B-Instruct", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct"]


class Linear:
    """A saved linear policy: weights in safetensors (tensors only, no code), loaded here."""

    def __init__(self) -> None:
        tensors = load_file(str(Path(__file__).with_name("policy.safetensors")))
        self.w, self.b = tensors["w"], tensors["b"]

    def act(self, observation, info):
        if info.get("phase") == "verify":
            return "<verdict>True</verdict>"
        x = np.array([len(observation) / 1000.0, 1.0])
        return f"<model>{AGENTS[int(np.argmax(self.w @ x + self.b))]}</model>"
'''


@needs_bwrap
def test_a_saved_policy_ships_as_safetensors_weights_and_is_re_executed(board: dict) -> None:
    """The safe form of a saved policy: its weights in safetensors (tensors, no code) and the
    Python that uses them, named in entry_point.json; it plays in the sandbox like any entry
    point. (Pickled forms, an SB3 .zip, torch .pt, are refused: the next test.)"""
    import numpy as np
    from safetensors.numpy import save_file

    bundle = _bundle(board["root"], "weights", WEIGHTS_POLICY, "policy:Linear")
    w = np.zeros((3, 2), dtype=np.float32)
    w[2, 1] = 1.0  # the bias column picks the strongest agent on every task
    save_file({"w": w, "b": np.zeros(3, dtype=np.float32)}, str(bundle / "policy.safetensors"))
    result = _rerun(board, bundle, "weights")
    assert result.status == "complete" and result.exit_code == 0, result.stderr_tail
    assert sealed_status(result.out, board["spec"], board["key"]) == "sealed"
    rows = read_episode_log(result.out / "episodes.jsonl")
    assert [r["actions"][0] for r in rows] == ["<model>Qwen3-30B-A3B-Instruct</model>"] * EPISODES


def test_saved_policies_and_bundles_without_an_entry_point_are_refused(
    board: dict, tmp_path: Path
) -> None:
    bundle = _bundle(tmp_path, "pickled", "def act(o):\n    return o\n", "policy:act")
    (bundle / "policy.pkl").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(DataError, match="saved policies"):
        _rerun(board, bundle, "pickled")
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(DataError, match="entry_point.json"):
        _rerun(board, bare, "bare")
    outside = _bundle(tmp_path, "outside", "x = 1\n", "os:system")
    with pytest.raises(DataError, match="not a .py file of the bundle"):
        _rerun(board, outside, "outside")
    assert not (board["root"] / "runs" / "pickled").exists()


def test_a_key_inside_the_bundle_is_refused(board: dict, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "withkey", "def act(o):\n    return o\n", "policy:act")
    inner = write_key(bundle / "board.key")
    with pytest.raises(ConfigError, match="inside"):
        rerun_entry_point(bundle, board["board"], inner, tmp_path / "runs" / "withkey")


def test_no_bwrap_fails_loudly(board: dict, tmp_path: Path, monkeypatch) -> None:
    bundle = _bundle(tmp_path, "nobwrap", "def act(o):\n    return o\n", "policy:act")
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="bubblewrap"):
        _rerun(board, bundle, "nobwrap")
    assert not (board["root"] / "runs" / "nobwrap").exists()


def test_the_cli_needs_key_and_out(board: dict, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "cli", "def act(o):\n    return o\n", "policy:act")
    proc = subprocess.run(
        [sys.executable, "-m", "orchenv", "verify", str(bundle), "--board", str(board["board"])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "--key" in proc.stderr
