"""orchenv.serve.wire and build_app's checks (issue 29), in process: JSON-safe info without
ground truth, signed snapshots, a helpful error for a bad id or argument."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openenv")

import orchenv  # noqa: E402,F401
from orchenv.error import ConfigError, OrchEnvError  # noqa: E402
from orchenv.serve.app import build_app  # noqa: E402
from orchenv.serve.environment import ServeConfig  # noqa: E402
from orchenv.serve.wire import export_snapshot, import_snapshot, wire_safe  # noqa: E402


def test_wire_safe_is_plain_json_without_privileged() -> None:
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]
    info = {
        "privileged": {"answer": "42"},
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
    assert "privileged" not in text and "42" not in text
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
    return _reference_wire_safe(repr(value)[:10_000], 0)


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


def test_snapshot_restores_state_and_refuses_forgeries() -> None:
    key, other = b"k" * 32, b"o" * 32
    env: Any = gym.make("orch/MathRoute-v0").unwrapped
    env.reset(seed=3)
    snap = export_snapshot(env, key, "orch/MathRoute-v0", {"prompt": "p"})
    twin: Any = gym.make("orch/MathRoute-v0").unwrapped
    assert import_snapshot(twin, snap, key, "orch/MathRoute-v0") == {"prompt": "p"}
    action = env.demo_action(np.random.default_rng(0))
    assert twin.step(action)[:4] == env.step(action)[:4]
    assert twin.pool is not None  # its own collaborators, rebuilt as configured
    with pytest.raises(ConfigError, match="signature"):
        import_snapshot(twin, snap, other, "orch/MathRoute-v0")
    with pytest.raises(ConfigError, match="not 'orch/Puppeteer-v0'"):
        import_snapshot(twin, snap, key, "orch/Puppeteer-v0")
    for bad in (5, "!!!", "A" * 10):
        with pytest.raises(ConfigError):
            import_snapshot(twin, bad, key, "orch/MathRoute-v0")


def test_build_app_fails_loudly_on_a_bad_id_or_argument() -> None:
    with pytest.raises(OrchEnvError, match="orchenv list"):
        build_app(ServeConfig(env_id="orch/Nope-v0"))
    with pytest.raises(OrchEnvError, match="bogus"):
        build_app(ServeConfig(env_id="orch/MathRoute-v0", env_kwargs={"bogus": 1}))
