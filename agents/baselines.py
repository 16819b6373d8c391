"""Controllers that apply to every orchenv env: the env's own random valid moves, and one of
the env's pool agents playing the controller."""

from __future__ import annotations

from typing import Any

import numpy as np

from orchenv.controllers import env_label
from orchenv.error import ConfigError, UnknownNameError


class EnvRandomController:
    """Random well-formed moves of whatever env it is bound to (the env's ``demo_action``).

    The one baseline that applies to every registered env: a floor for comparisons and a
    smoke test for new envs. Not privileged.
    """

    privileged = False

    def __init__(self, *, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self._env: Any = None

    def reseed(self, seed: int) -> None:
        """Restart the random stream from ``seed`` (the evaluation harness seeds each episode)."""
        self.rng = np.random.default_rng(seed)

    def bind(self, env: Any) -> None:
        self._env = getattr(env, "unwrapped", env)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self._env is None or not hasattr(self._env, "demo_action"):
            raise ConfigError(
                "env-random needs bind(env) with an orchenv env first "
                "(orchenv.runner.run_episodes and orchenv eval do this)"
            )
        return self._env.demo_action(self.rng)


class PoolAgentController:
    """Plays the controller with one of the env's own pool agents (e.g. MultihopQA's ``planner``).

    Each turn it sends the env's chat messages to ``agent`` through ``env.consult``, so
    the call is charged to the episode like any other agent call, and returns the reply
    as the action. With the simulated multihop pool this is the paper's Planner; with a
    live pool it is a prompted LLM controller. Not privileged: it sees only the prompt.
    """

    privileged = False

    def __init__(self, *, agent: str = "planner") -> None:
        self.agent = agent
        self._env: Any = None

    def bind(self, env: Any) -> None:
        env = getattr(env, "unwrapped", env)
        names = env.pool.names
        if self.agent not in names:
            raise UnknownNameError(
                f"pool agent of {env_label(env)} for pool-agent", self.agent, names
            )
        self._env = env

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self._env is None:
            raise ConfigError(
                "pool-agent needs bind(env) first (orchenv.runner.run_episodes and orchenv eval do this)"
            )
        return self._env.consult(self.agent, info["messages"]).text
