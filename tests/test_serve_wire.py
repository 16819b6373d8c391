"""orchenv.serve.wire and build_app's checks (issue 29), in process: JSON-safe info without
ground truth, the fork table (issue 36: opaque, bounded, expiring, bound handles; no
pickle), a helpful error for a bad id or argument."""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openenv")

import orchenv  # noqa: E402,F401
import orchenv.serve  # noqa: E402
from orchenv.error import ConfigError, OrchEnvError  # noqa: E402
from orchenv.serve.app import build_app  # noqa: E402
from orchenv.serve.environment import ServeConfig  # noqa: E402
from orchenv.serve.forks import HANDLE_RE, ForkTable, binding  # noqa: E402
from orchenv.serve.wire import safe_repr, wire_safe  # noqa: E402


def test_wire_safe_is_plain_json_without_privileged() -> None:
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]
    info = {
        "privileged": {"answer": "SECRET-ANSWER-7"},
        "nested": [{"privileged": 1, "keep": np.float32(0.5)}],
        "array": np.arange(3),
        "nan": float("nan"),
        "inf": np.float64("inf"),
        "text": "a\ud800b",
        "big": 10**400,
        "tuple": (1, {2}),
        "obj": object(),
        "deep": deep,
    }
    out = wire_safe(info)
    text = json.dumps(out, allow_nan=False)
    text.encode("utf-8")  # no lone surrogate left
    assert "privileged" not in text and "SECRET-ANSWER" not in text
    assert out["obj"] == "<object object>"  # no memory address reaches the client
    assert out["nested"] == [{"keep": 0.5}] and out["array"] == [0, 1, 2]
    assert out["nan"] is None and out["inf"] is None and out["tuple"] == [1, [2]]
    assert "<truncated: too deep>" in text


def _reference_wire_safe(value: Any, depth: int = 0) -> Any:
    """The plain isinstance walk wire_safe's fast path must agree with."""
    if depth > 32:
        return "<truncated: too deep>"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return _reference_wire_safe(value.item(), depth)
    if isinstance(value, np.ndarray):
        return _reference_wire_safe(value.tolist(), depth)
    if isinstance(value, Mapping):
        return {
            _reference_wire_safe(str(k), 0): _reference_wire_safe(v, depth + 1)
            for k, v in value.items()
            if str(k) not in ("privileged",)
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_reference_wire_safe(v, depth + 1) for v in value]
    return safe_repr(value)


class _Str(str):
    pass


def _random_info(rng: np.random.Generator, depth: int = 0) -> Any:
    leaves: list[Any] = [
        "plain",
        "caf\u00e9",
        "a\ud800b",
        "privileged",
        _Str("privileged"),
        1,
        -(10**40),
        True,
        None,
        0.5,
        float("nan"),
        float("-inf"),
        np.float32(1.5),
        np.int64(7),
        np.arange(3),
        np.array([np.nan, 1.0]),
        object,
    ]
    kind = int(rng.integers(0, 8 if depth < 5 else 2))
    if kind <= 1:
        return leaves[int(rng.integers(len(leaves)))]
    if kind == 7:  # a chain past MAX_DEPTH (32), of dicts and lists, ending in a leaf
        chain: Any = leaves[int(rng.integers(len(leaves)))]
        for _ in range(int(rng.integers(28, 40))):
            chain = {"d": chain} if rng.random() < 0.5 else [chain]
        return chain
    children = [_random_info(rng, depth + 1) for _ in range(int(rng.integers(0, 4)))]
    keys: list[Any] = ["privileged", _Str("privileged"), "k\udc80", 3, (1, 2), "x", "caf\u00e9"]
    if kind in (2, 3):
        return {
            (keys[int(rng.integers(len(keys)))] if i == 0 else f"k{i}"): c
            for i, c in enumerate(children)
        }
    if kind == 4:
        return OrderedDict((f"o{i}", c) for i, c in enumerate(children))
    if kind == 5:
        return tuple(children)
    return children


def test_wire_safe_fast_path_agrees_with_the_plain_walk() -> None:
    rng = np.random.default_rng(29)
    for _ in range(400):
        info = _random_info(rng)
        out = wire_safe(info)
        assert out == _reference_wire_safe(info)
        text = json.dumps(out, allow_nan=False)
        text.encode("utf-8")
        assert '"privileged":' not in text
    env: Any = gym.make("orch/MathRoute-v0").unwrapped
    _, info = env.reset(seed=0)
    assert "privileged" in info and wire_safe(info) == _reference_wire_safe(info)


def test_fork_table_handles_are_opaque_bounded_expiring_and_bound() -> None:
    """Issue 36: a handle is random text, not env data; the table is bounded, expires and
    refuses a handle minted under another binding (env id, env arguments, version)."""
    bound = binding("orch/MathRoute-v0", {"env_kwargs": {}}, "1")
    table = ForkTable(bound, capacity=3, ttl_s=60)
    recording = {"seed": 3, "actions": ["<model>x</model>"]}
    handles = [table.put(dict(recording)) for _ in range(5)]
    assert all(HANDLE_RE.match(h) for h in handles) and len(set(handles)) == 5
    assert len(table) == 3  # the oldest went first
    with pytest.raises(ConfigError, match="unknown or expired"):
        table.get(handles[0])
    assert table.get(handles[-1])["actions"] == recording["actions"]
    for bad in (5, None, "!!!", "A" * 10, "fork-" + "A" * 31, "fork-" + "A" * 10_000):
        with pytest.raises(ConfigError):
            table.get(bad)
    small = ForkTable(bound, max_chars=10_000)  # the table's budget of action characters
    kept = [small.put({"seed": 1, "actions": ["x" * 4000]}) for _ in range(5)]
    assert len(small) == 2 and small.get(kept[-1])["seed"] == 1
    short = ForkTable(bound, ttl_s=0.05)
    handle = short.put(dict(recording))
    time.sleep(0.1)
    with pytest.raises(ConfigError, match="expired"):
        short.get(handle)
    assert binding("orch/MathRoute-v0", {"env_kwargs": {"x": 1}}, "1") != bound
    assert binding("orch/MathRoute-v0", {"env_kwargs": {}}, "2") != bound


def test_fork_table_folder_is_shared_json_and_checks_the_binding(tmp_path: Path) -> None:
    mine = ForkTable(binding("orch/MathRoute-v0", {}, "1"), folder=str(tmp_path))
    theirs = ForkTable(binding("orch/MathRoute-v0", {"split": "test"}, "1"), folder=str(tmp_path))
    handle = mine.put({"seed": 1, "actions": []})
    path = tmp_path / f"{handle}.json"
    assert json.loads(path.read_text())["seed"] == 1  # JSON, never a pickle
    assert path.stat().st_mode & 0o077 == 0
    small = ForkTable(mine.bound_to, folder=str(tmp_path / "small"), max_chars=10_000)
    (tmp_path / "small").mkdir()
    for _ in range(5):
        small.put({"seed": 1, "actions": ["x" * 4000]})
    assert len(small) == 2  # the folder's budget too
    twin = ForkTable(binding("orch/MathRoute-v0", {}, "1"), folder=str(tmp_path))
    assert twin.get(handle)["seed"] == 1  # another worker reads it
    with pytest.raises(ConfigError, match="other env arguments"):
        theirs.get(handle)


def test_no_pickle_on_the_serve_path() -> None:
    """Issue 36: nothing under orchenv/serve imports pickle (the old snapshots were pickles a
    server would load from a client's bytes)."""
    folder = Path(orchenv.serve.__file__).parent
    for path in folder.glob("*.py"):
        text = path.read_text("utf-8")
        assert "import pickle" not in text and "Unpickler" not in text, path


def test_build_app_fails_loudly_on_a_bad_id_or_argument() -> None:
    with pytest.raises(OrchEnvError, match="orchenv list"):
        build_app(ServeConfig(env_id="orch/Nope-v0"))
    with pytest.raises(OrchEnvError, match="bogus"):
        build_app(ServeConfig(env_id="orch/MathRoute-v0", env_kwargs={"bogus": 1}))
