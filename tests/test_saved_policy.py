"""``orchenv.discrete.SavedPolicy``: the one class behind the registered ``*-ppo-policy``
controllers (issue 27). A policy saved to disk and loaded by name plays the same actions as
the in-memory policy it was saved from, per run seed's file; bad input is refused."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import orchenv  # noqa: F401  (registers the env ids and controllers)
from orchenv.controllers import make_controller
from orchenv.discrete import MaskedPolicyController, SavedPolicy, make_discrete_env
from orchenv.error import ConfigError
from orchenv.runner import run_episode

ENV_ID = "orch/BudgetRoute-v0"


def _actions(controller, seeds):
    """The controller texts of one test-split episode per seed."""
    played = []
    for seed in seeds:
        env = gym.make(ENV_ID, split="test")
        record = run_episode(env, controller, seed=seed)
        played.append((record.actions, record.reward))
        env.close()
    return played


def test_a_saved_maskable_policy_plays_by_name_as_in_memory(tmp_path: Path):
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from orchenv.envs.budgetroute.reproduce import N_FEATURES

    env = make_discrete_env(ENV_ID, n_features=N_FEATURES, split="train")
    # an untrained policy (random weights, seeded) is enough: what is checked is that the file,
    # loaded by name, plays what the object it was saved from plays
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, seed=0)
    model.save(tmp_path / "policy-s1.zip")
    env.close()

    saved = make_controller(
        "budgetroute-ppo-policy", model=str(tmp_path / "policy-s{seed}.zip"), seed=1
    )
    assert isinstance(saved, SavedPolicy) and saved.model_path.endswith("policy-s1.zip")
    live = MaskedPolicyController(model, n_features=N_FEATURES)
    assert _actions(saved, range(3)) == _actions(live, range(3))
    with pytest.raises(ConfigError, match="run seed 0"):
        make_controller(
            "budgetroute-ppo-policy", model=str(tmp_path / "policy-s{seed}.zip"), seed=0
        )


@pytest.mark.parametrize("name", ["ppo-policy", "budgetroute-ppo-policy", "orchmas-ppo-policy"])
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "model=PATH"),
        ({"model": "x" * 5000}, "not a usable path"),
        ({"model": "a\x00b"}, "not a usable path"),
        ({"model": "/nonexistent/p-{seed}.zip"}, "reproduce 00"),
        ({"model": "JUNK", "seed": True}, "seed must be an integer"),
        ({"model": "JUNK", "seed": np.int64(0)}, "is not a saved"),
        ({"model": "JUNK"}, "is not a saved"),
    ],
)
def test_every_saved_policy_controller_refuses_bad_input(name, kwargs, match, tmp_path: Path):
    pytest.importorskip("sb3_contrib")
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    kwargs = {k: (str(junk) if v == "JUNK" else v) for k, v in kwargs.items()}
    with pytest.raises(ConfigError, match=match) as caught:
        make_controller(name, **kwargs)
    assert name in str(caught.value) or match == "model=PATH"


def test_the_documented_subclass_works(tmp_path: Path):
    """docs/adding-a-controller.md's ``SavedPolicy`` subclass runs as printed: it refuses a
    missing file with its own name and what makes the files."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "adding-a-controller.md").read_text()
    (block,) = re.findall(r"```py\n(.*?)```", doc, flags=re.S)
    scope: dict = {}
    exec(compile(block, "adding-a-controller.md", "exec"), scope)
    with pytest.raises(ConfigError, match=r"myenv-ppo-policy: no saved policy .* reproduce 999"):
        scope["MyEnvPolicy"](model=str(tmp_path / "p-{seed}.zip"), seed=2)
    assert scope["MyEnvPolicy"].feature_kwargs(None) == {"n_features": 64}
