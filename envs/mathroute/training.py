"""PPO through the discrete wrappers on the MathRoute family: train a controller, log its
training episodes, and play the trained policy as an orchenv controller.

One piece of code for ``examples/sb3_ppo_mathroute.py`` and ``orchenv reproduce 000``:

* :func:`train_ppo` trains stable-baselines3 PPO (MLP policy) on
  :func:`~orchenv.envs.mathroute.wrappers.make_sb3_env` (hashed text features in,
  ``Discrete(n_agents + 1)`` actions out) and can record every training episode
  (:class:`TrainingLog`) for learning curves;
* :class:`PolicyController` plays the trained policy on a wrapped env (its observations are
  the features) or on the plain text env, as the evaluation harness runs it: bound to the
  env, it computes the same features from the env's state;
* :func:`multipliers_with` is the env's own Lagrange multipliers with the strongest agent's
  replaced (the example's knob).

Needs ``pip install "orchenv[train]"`` (stable-baselines3, torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from orchenv.envs.mathroute.wrappers import DiscreteActions, TextFeatures, make_sb3_env
from orchenv.error import ConfigError, DependencyError
from orchenv.parsing import extract_tag, match_agent

__all__ = [
    "PPO_DEFAULTS",
    "PolicyController",
    "TrainingLog",
    "learning_curve",
    "multipliers_with",
    "requested_agents",
    "train_ppo",
]

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
    split through :func:`make_sb3_env` (``feature_kwargs``: its feature options, e.g.
    ``usage_history``); returns the trained ``stable_baselines3.PPO``. ``log``: a list that
    receives every training episode (:class:`TrainingLog`)."""
    try:
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError as exc:
        raise DependencyError("stable-baselines3", "train", "train_ppo") from exc
    kwargs = {"split": "train", **dict(env_kwargs or {})}
    features = dict(feature_kwargs or {})

    def make() -> gym.Env:
        env = make_sb3_env(env_id, **features, **kwargs)
        return TrainingLog(env, log) if log is not None else env

    vec_env = make_vec_env(make, n_envs=n_envs, seed=seed)
    hyper = {**PPO_DEFAULTS, **dict(ppo_kwargs or {})}
    model = PPO("MlpPolicy", vec_env, seed=seed, device="cpu", verbose=verbose, **hyper)
    model.learn(total_timesteps=timesteps)
    vec_env.close()
    return model


def _find_wrapper(env: gym.Env, kind: type) -> Any:
    while not isinstance(env, kind):
        if not isinstance(env, gym.Wrapper):
            raise TypeError(f"no {kind.__name__} in the wrapper stack")
        env = env.env
    return env


class PolicyController:
    """A trained SB3 policy as an orchenv controller (deterministic: the policy's argmax).

    Two ways to run it:

    * on a :func:`make_sb3_env` env (pass it as ``env``): observations are already the
      feature vectors and the env's ``DiscreteActions`` turns the action into text (which
      the wrapper passes through unchanged);
    * on the plain text env, e.g. in the evaluation harness: ``bind(env)`` (called by
      ``run_episode``) puts the same ``DiscreteActions`` + ``TextFeatures`` stack around the
      bound env to compute the features from its state and to name the action's text. The
      features must be the ones trained on (``feature_kwargs``); ``usage_history`` must be
      off there, since that block is the wrapper's count of episodes it has stepped itself.
      ``feature_max_turns`` fixes the turn feature's scale (``turn / max_turns``) to the
      training horizon when the env plays another one (an inference-time turn ablation).
    """

    privileged = False

    def __init__(
        self,
        model: Any,
        env: gym.Env | None = None,
        *,
        feature_kwargs: Mapping[str, Any] | None = None,
        feature_max_turns: int | None = None,
    ) -> None:
        self.model = model
        self.feature_kwargs = dict(feature_kwargs or {})
        self.feature_max_turns = feature_max_turns
        self.actions: DiscreteActions | None = None
        self._features: TextFeatures | None = None
        self._bound: Any = None
        if env is not None:
            self.actions = _find_wrapper(env, DiscreteActions)

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset (the policy is deterministic); lets the harness reuse it."""

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)
        if self.actions is not None and self._features is None:
            return  # running on a wrapped env: its observations are the features
        if env is self._bound:
            return
        if self.feature_kwargs.get("usage_history", True):
            raise ConfigError(
                "PolicyController on a text env needs a policy trained with "
                "feature_kwargs={'usage_history': False}: the usage block counts episodes "
                "the wrapper stepped itself"
            )
        self.actions = DiscreteActions(env)
        self._features = TextFeatures(self.actions, **self.feature_kwargs)
        if self.feature_max_turns is not None:
            self._features.max_turns = int(self.feature_max_turns)
        self._bound = env

    def features(self, obs: Any, info: dict[str, Any]) -> np.ndarray:
        """The policy's input for this state (``obs`` itself on a wrapped env)."""
        if isinstance(obs, np.ndarray):
            return obs
        if self._features is None:
            raise ConfigError("PolicyController got a text observation before bind(env)")
        self._features._info = info  # the state TextFeatures.observation reads
        return self._features.observation(obs)

    def act(self, obs: Any, info: dict[str, Any]) -> str:
        if self.actions is None:
            raise ConfigError("PolicyController needs a wrapped env or bind(env) first")
        action, _ = self.model.predict(self.features(obs, info), deterministic=True)
        return self.actions.action(action)


def requested_agents(actions: list[str], agents: list[str]) -> list[str]:
    """The agents an episode's controller texts asked for (``<model>`` tags, in order), before
    any usage enforcement re-routed a call."""
    out = []
    for text in actions:
        name = match_agent(extract_tag(text, "model"), agents)
        if name is not None:
            out.append(name)
    return out
