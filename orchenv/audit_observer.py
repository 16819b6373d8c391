"""The audit's **observer's reference**: the best policy learned from observations only.

The skill reference (``orchenv.audit``) plays the paper's skill with the privileged truth; it
says what the skill is worth, not whether a learner can acquire it from what the controller
sees. The observer's reference answers that: a ``MaskablePPO`` (sb3-contrib) trained for a fixed
budget of env steps on the env's **train** split through the discrete view
(``orchenv.discrete.make_discrete_env``: the env's ``action_choices`` as actions, hashed
n-grams of the observation plus the env's ``observation_features`` as input), then played
greedily on the audited tasks beside every other policy. The audit reports it with the best
blind policy and ``skill@realistic`` (paired by task) and says whether the skill is learnable
from the observation at that budget: the learned policy above the best blind policy beyond the
95% interval.

A fixed budget is a floor, not a ceiling: a policy that fails to learn in 4,096 steps may learn
in a million. The figure says what a researcher's first classical-RL baseline will find.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from orchenv.discrete import MaskedPolicyController, make_discrete_env, orch_base
from orchenv.error import ConfigError, DependencyError, OrchEnvError

logger = logging.getLogger(__name__)

__all__ = ["OBSERVER", "OBSERVER_FEATURES", "train_observer"]

OBSERVER = "observer-ppo"
#: the discrete view's features (those of tests/test_ppo_every_env.py)
OBSERVER_FEATURES: dict[str, Any] = {"n_features": 64}
#: MaskablePPO's settings (those of tests/test_ppo_every_env.py)
OBSERVER_PPO: dict[str, Any] = {
    "n_steps": 256,
    "batch_size": 64,
    "n_epochs": 4,
    "learning_rate": 3e-3,
    "gamma": 1.0,
    "policy_kwargs": {"net_arch": [64]},
}


def _splits(env_id: str, kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    env = gym.make(env_id, **kwargs)
    try:
        return tuple(orch_base(env).task_source.splits)
    except OrchEnvError:
        return ()
    finally:
        env.close()


def train_observer(
    env_id: str,
    *,
    steps: int,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
) -> tuple[MaskedPolicyController, dict[str, Any]]:
    """Train the observer's reference on ``env_id``'s train split for ``steps`` env steps.

    Returns the greedy controller (``MaskedPolicyController``, played by ``orchenv.audit`` like
    a trained row) and a description (steps, split, features, PPO settings). Needs
    ``sb3-contrib`` and ``torch`` (the ``train`` extra): a ``DependencyError`` says so.
    """
    if steps < 1:
        raise ConfigError(f"observer steps must be >= 1, got {steps}")
    try:
        import torch
        from sb3_contrib import MaskablePPO
    except ImportError as exc:
        raise DependencyError("sb3-contrib", "train", "the audit's observer reference") from exc
    kwargs = {k: v for k, v in dict(env_kwargs or {}).items() if k != "split"}
    split = "train" if "train" in _splits(env_id, kwargs) else None
    if split is not None:
        kwargs["split"] = split
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    env = make_discrete_env(env_id, **OBSERVER_FEATURES, **kwargs)
    try:
        model = MaskablePPO("MlpPolicy", env, seed=seed, device="cpu", **OBSERVER_PPO)
        model.learn(steps)
    finally:
        env.close()
        torch.set_num_threads(threads)
    info = {
        "steps": steps,
        "split": split or "the env's default",
        "features": dict(OBSERVER_FEATURES),
        "ppo": {k: v for k, v in OBSERVER_PPO.items() if k != "policy_kwargs"}
        | {"net_arch": OBSERVER_PPO["policy_kwargs"]["net_arch"]},
        "seed": seed,
    }
    logger.info("observer reference for %s trained: %s", env_id, info)
    return MaskedPolicyController(model, **OBSERVER_FEATURES), info
