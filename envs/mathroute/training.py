"""PPO through the core discrete view on the MathRoute family: train a controller, log its
training episodes, and play the trained policy as an orchenv controller.

One piece of code for ``examples/sb3_ppo_mathroute.py`` and ``orchenv reproduce 000``:

* :func:`train_ppo` trains stable-baselines3 PPO (MLP policy) on
  :func:`orchenv.discrete.make_discrete_env` (hashed n-grams of the prompt, the turn, the
  action mask and ``MathRouteEnv.observation_features()`` in; one choice per agent, then
  accept, out) and can record every training episode (:class:`TrainingLog`) for learning
  curves;
* :func:`policy_controller` plays the trained policy on the plain text env, as the
  evaluation harness runs it (``orchenv.discrete.MaskedPolicyController``);
* :func:`multipliers_with` is the env's own Lagrange multipliers with the strongest agent's
  replaced (the example's knob).

Needs ``pip install "orchenv[train]"`` (stable-baselines3, torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from orchenv.discrete import MaskedPolicyController, make_discrete_env
from orchenv.error import DependencyError
from orchenv.parsing import extract_tag, match_agent

__all__ = [
    "FEATURES",
    "PPO_DEFAULTS",
    "TrainingLog",
    "learning_curve",
    "multipliers_with",
    "policy_controller",
    "requested_agents",
    "train_ppo",
]

#: the view's options every MathRoute policy here is trained with (``make_discrete_env``):
#: 256 hashed n-grams with numbers counted as themselves (their values carry difficulty)
FEATURES: dict[str, Any] = {"n_features": 256, "raw_numbers": True}

#: PPO hyper-parameters (episodes are at most 3 turns, so no discounting)
PPO_DEFAULTS: dict[str, Any] = {
    "n_steps": 512,
    "batch_size": 256,
    "n_epochs": 10,
    "gamma": 1.0,
    "gae_lambda": 0.95,
    "learning_rate": 1e-3,
    "ent_coef": 0.01,
    "policy_kwargs": {"net_arch": [64, 64]},
}


def multipliers_with(
    env_id: str, strongest: float | None = None, **env_kwargs: Any
) -> dict[str, float]:
    """``gym.make(env_id, **env_kwargs)``'s Lagrange multipliers (Table 9's by default), with
    the strongest agent's set to ``strongest`` when given."""
    env = gym.make(env_id, **env_kwargs)
    try:
        base = env.unwrapped
        multipliers = dict(base.multipliers)  # type: ignore[attr-defined]
        if strongest is not None:
            multipliers[base.pool.strongest()] = float(strongest)  # type: ignore[attr-defined]
    finally:
        env.close()
    return multipliers


class TrainingLog(gym.Wrapper):
    """Appends one dict per finished episode to ``sink``: ``steps`` (this env's steps so far),
    ``return``, ``correct``, ``calls`` (agent -> calls), ``routed_correct`` (calls whose
    answer was right: routing accuracy's numerator), ``false_rejections`` and
    ``false_acceptances``. Several envs may share one ``sink`` (episodes in the order they
    end)."""

    def __init__(self, env: gym.Env, sink: list[dict[str, Any]]) -> None:
        super().__init__(env)
        self.sink = sink
        self.steps = 0
        self._return = 0.0
        self._routed_correct = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._return, self._routed_correct = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        self._return += float(reward)
        self._routed_correct += int(bool((info.get("privileged") or {}).get("response_correct")))
        if terminated or truncated:
            metrics = info.get("metrics") or {}
            self.sink.append(
                {
                    "steps": self.steps,
                    "return": self._return,
                    "correct": bool(info.get("correct", False)),
                    "calls": dict(info.get("agent_calls") or {}),
                    "routed_correct": self._routed_correct,
                    "false_rejections": float(metrics.get("false_rejections", 0.0)),
                    "false_acceptances": float(metrics.get("false_acceptances", 0.0)),
                }
            )
        return obs, reward, terminated, truncated, info


def learning_curve(
    episodes: list[dict[str, Any]], agents: list[str], *, points: int = 10
) -> list[dict[str, float]]:
    """:class:`TrainingLog` episodes in ``points`` consecutive chunks (training order): per
    chunk the mean return, accuracy, routing accuracy (right answers per call), each agent's
    share of all calls (eq. 2) and calls per episode, and false rejections per episode.
    ``fraction`` is the chunk's end as a fraction of training."""
    out: list[dict[str, float]] = []
    if not episodes:
        return out
    bounds = np.linspace(0, len(episodes), min(points, len(episodes)) + 1).astype(int)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        chunk = episodes[lo:hi]
        calls = {a: sum(e["calls"].get(a, 0) for e in chunk) for a in agents}
        total = max(sum(calls.values()), 1)
        row: dict[str, float] = {
            "fraction": hi / len(episodes),
            "episodes": float(len(chunk)),
            "return": float(np.mean([e["return"] for e in chunk])),
            "accuracy": float(np.mean([e["correct"] for e in chunk])),
            "routing_accuracy": sum(e["routed_correct"] for e in chunk) / total,
            "false_rejections": float(np.mean([e["false_rejections"] for e in chunk])),
        }
        for agent in agents:
            row[f"share/{agent}"] = calls[agent] / total
            row[f"per_episode/{agent}"] = calls[agent] / len(chunk)
        out.append(row)
    return out


def train_ppo(
    timesteps: int,
    *,
    seed: int = 0,
    env_id: str = "orch/MathRoute-v0",
    n_envs: int = 4,
    env_kwargs: Mapping[str, Any] | None = None,
    feature_kwargs: Mapping[str, Any] | None = None,
    ppo_kwargs: Mapping[str, Any] | None = None,
    log: list[dict[str, Any]] | None = None,
    verbose: int = 0,
) -> Any:
    """PPO (MLP policy, :data:`PPO_DEFAULTS` updated by ``ppo_kwargs``) on ``env_id``'s train
    split through :func:`orchenv.discrete.make_discrete_env` (``feature_kwargs``: its feature
    options, :data:`FEATURES` by default); returns the trained ``stable_baselines3.PPO``.
    Plain PPO does not read the action mask: a masked index it picks is refused by the env
    (format penalty), which it learns to avoid. ``log``: a list that receives every
    training episode (:class:`TrainingLog`)."""
    try:
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError as exc:
        raise DependencyError("stable-baselines3", "train", "train_ppo") from exc
    kwargs = {"split": "train", **dict(env_kwargs or {})}
    features = dict(FEATURES if feature_kwargs is None else feature_kwargs)

    def make() -> gym.Env:
        env = make_discrete_env(env_id, **features, **kwargs)
        return TrainingLog(env, log) if log is not None else env

    vec_env = make_vec_env(make, n_envs=n_envs, seed=seed)
    hyper = {**PPO_DEFAULTS, **dict(ppo_kwargs or {})}
    model = PPO("MlpPolicy", vec_env, seed=seed, device="cpu", verbose=verbose, **hyper)
    model.learn(total_timesteps=timesteps)
    vec_env.close()
    return model


def policy_controller(
    model: Any,
    *,
    feature_kwargs: Mapping[str, Any] | None = None,
    feature_max_turns: int | None = None,
) -> MaskedPolicyController:
    """A policy trained by :func:`train_ppo` as an orchenv controller on the text env: its
    greedy choice among the available ones. ``feature_kwargs`` must be the ones trained with
    (:data:`FEATURES` by default); ``feature_max_turns`` fixes the turn feature's scale to the
    training horizon when the env plays another one (an inference-time turn ablation)."""
    features = dict(FEATURES if feature_kwargs is None else feature_kwargs)
    if feature_max_turns is not None:
        features["max_turns"] = int(feature_max_turns)
    return MaskedPolicyController(model, **features)


def requested_agents(actions: list[str], agents: list[str]) -> list[str]:
    """The agents an episode's controller texts asked for (``<model>`` tags, in order), before
    any usage enforcement re-routed a call."""
    out = []
    for text in actions:
        name = match_agent(extract_tag(text, "model"), agents)
        if name is not None:
            out.append(name)
    return out
