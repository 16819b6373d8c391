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

    **Call limits** (issue 38). Its turns are agent calls, and on an id with a per-episode
    call limit (``env.calls_left()`` is not None: OrchMAS's ``max_calls``, BudgetRoute's
    one call per turn but the last) consulted calls count against the limit as routed ones
    do. When the calls left are fewer than the turns left, it cannot play the episode to
    its end, so it refuses with a ``ConfigError`` before it makes any call of that turn: at
    ``bind`` once the episode has started (``orchenv.runner`` resets, then binds), else at
    the first ``act``, never halfway through an episode it could have foreseen.
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
        if getattr(env, "task", None) is not None:  # an episode is under way
            self._check_call_limit(env)

    def _check_call_limit(self, env: Any) -> None:
        """Raise ``ConfigError`` when the episode's calls left cannot pay one consult per
        turn left (see the class docstring)."""
        calls_left = getattr(env, "calls_left", None)
        left = calls_left() if callable(calls_left) else None
        if left is None:
            return
        turns = max(1, int(env.max_turns) - int(env.turn))
        if left < turns:
            raise ConfigError(
                f"pool-agent plays each turn by consulting {self.agent!r}, so it needs one "
                f"agent call per turn; {env_label(env)} allows {left} more call(s) this "
                f"episode (its per-episode call limit counts consulted and routed calls "
                f"alike) for {turns} turn(s) left. Use a controller whose turns are not "
                "agent calls (env-random, a scripted or trained controller), or an env "
                "setting without a call limit"
            )

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self._env is None:
            raise ConfigError(
                "pool-agent needs bind(env) first (orchenv.runner.run_episodes and orchenv eval do this)"
            )
        self._check_call_limit(self._env)
        return self._env.consult(self.agent, info["messages"]).text
