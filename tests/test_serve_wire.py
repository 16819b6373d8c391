"""orchenv.serve.wire and build_app's checks (issue 29), in process: JSON-safe info without
ground truth, signed snapshots, a helpful error for a bad id or argument."""

from __future__ import annotations

import json
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
