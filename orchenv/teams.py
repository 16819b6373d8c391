"""Role games and their PettingZoo views.

A ``RoleGame`` is a task played by several roles (planner, searcher, answerer,
...) that cooperate through a ``SharedMemory``: each role observes the context
a router gives it, answers with text, and the game folds that text into memory
and into the task's engine. One game class serves every view:

* ``RoleAECEnv``: PettingZoo's turn-based API. Roles act one after another in
  ``game.roles`` order; a role sees what earlier roles wrote this round (the
  staged pipeline of seed 004, appendix B). After the last role the round ends.
* ``RoleParallelEnv``: PettingZoo's parallel API. Every role observes the
  memory as it was at the start of the round and all act at once.
* Gymnasium controller views (one learner, the other roles played by pool
  agents) live with each environment and drive the same game.

Rewards are team rewards: ``end_round()`` sets what every live role earned
that round (usually the task score at the end, 0 before).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector

from orchenv.error import EnvStateError
from orchenv.spaces import AnyText, TextObservation


class RoleGame(ABC):
    """A multi-role task over shared memory; see the module docstring.

    Subclasses set ``roles`` and ``max_rounds`` and implement ``_reset``,
    ``observe``, ``act`` and ``_end_round``; they update ``self.done`` and
    ``self.round_rewards``. ``self.np_random`` is seeded by ``reset``.
    """

    roles: tuple[str, ...] = ()
    max_rounds: int = 3
    name: str = "role_game"

    def __init__(self) -> None:
        self.np_random, _ = seeding.np_random(None)
        self.round = 0
        self.done = False
        self.truncated = False
        self.round_rewards: dict[str, float] = {}
        self._infos: dict[str, dict[str, Any]] = {}

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> None:
        """Start a new task (``options`` as the Gymnasium views take them)."""
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        self.round = 0
        self.done = False
        self.truncated = False
        self.round_rewards = {role: 0.0 for role in self.roles}
        self._infos = {role: {} for role in self.roles}
        self._reset(dict(options or {}))

    @abstractmethod
    def _reset(self, options: dict[str, Any]) -> None:
        """Pick the task and fill the initial memory."""

    @abstractmethod
    def observe(self, role: str) -> str:
        """The role's prompt now: task, stage and the context routed to it."""

    @abstractmethod
    def act(self, role: str, text: str) -> dict[str, Any]:
        """Apply one role's text; never raise on malformed text. Returns the role's info."""

    def end_round(self) -> None:
        """Close the round: memory update, engine advance, ``round_rewards``, done flags."""
        self.round_rewards = {role: 0.0 for role in self.roles}
        self._end_round()
        self.round += 1
        if not self.done and self.round >= self.max_rounds:
            self.truncated = True
            self._on_truncate()

    @abstractmethod
    def _end_round(self) -> None:
        """Game-specific end of round; may set ``done`` and ``round_rewards``."""

    def _on_truncate(self) -> None:  # noqa: B027  (optional hook)
        """Called once when the round limit ends an unfinished task (e.g. to score it)."""

    def rewards(self) -> dict[str, float]:
        return dict(self.round_rewards)

    def info(self, role: str) -> dict[str, Any]:
        return dict(self._infos.get(role, {}))

    def set_info(self, role: str, info: dict[str, Any]) -> None:
        self._infos[role] = info

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release engines and processes."""


class RoleAECEnv(AECEnv):
    """PettingZoo turn-based view of a ``RoleGame``."""

    metadata: dict[str, Any] = {
        "name": "orchenv_roles_aec",
        "render_modes": ["ansi"],
        "is_parallelizable": True,
    }  # noqa: RUF012

    def __init__(
        self, game: RoleGame, *, max_obs_chars: int = 1_000_000, render_mode: str | None = None
    ) -> None:
        super().__init__()
        self.game = game
        self.render_mode = render_mode
        self.possible_agents = list(game.roles)
        self._space = AnyText(max_length=max_obs_chars)
        self._started = False

    def observation_space(self, agent: str) -> AnyText:
        return self._space

    def action_space(self, agent: str) -> AnyText:
        return self._space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.game.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: self.game.info(a) for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()
        self._started = True

    def observe(self, agent: str) -> str:
        return TextObservation(self.game.observe(agent))

    def step(self, action: Any) -> None:
        if not self._started:
            raise EnvStateError("call reset() before step()")
        if not self.agents:
            raise EnvStateError("the episode is over: call reset() before step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.infos[agent] = self.game.act(
            agent, action if isinstance(action, str) else repr(action)
        )
        if self._selector.is_last():
            self.game.end_round()
            self.rewards = {a: float(self.game.rewards().get(a, 0.0)) for a in self.agents}
            for a in self.agents:
                self.terminations[a] = self.game.done
                self.truncations[a] = self.game.truncated and not self.game.done
                self.infos[a] = {**self.game.info(a), **self.infos.get(a, {})}
        else:
            self._clear_rewards()
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.game.observe(self.agent_selection)
        return None

    def close(self) -> None:
        self.game.close()


class RoleParallelEnv(ParallelEnv):
    """PettingZoo parallel view of a ``RoleGame``: every role acts each round."""

    metadata: dict[str, Any] = {"name": "orchenv_roles_parallel", "render_modes": ["ansi"]}  # noqa: RUF012

    def __init__(
        self, game: RoleGame, *, max_obs_chars: int = 1_000_000, render_mode: str | None = None
    ) -> None:
        self.game = game
        self.render_mode = render_mode
        self.possible_agents = list(game.roles)
        self.agents: list[str] = []
        self._space = AnyText(max_length=max_obs_chars)

    def observation_space(self, agent: str) -> AnyText:
        return self._space

    def action_space(self, agent: str) -> AnyText:
        return self._space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        self.game.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return (
            {a: TextObservation(self.game.observe(a)) for a in self.agents},
            {a: self.game.info(a) for a in self.agents},
        )

    def step(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise EnvStateError("the episode is over (or never started): call reset()")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise EnvStateError(
                f"actions for roles that are not acting: {sorted(unknown)}; acting: {self.agents}"
            )
        infos: dict[str, dict[str, Any]] = {}
        for agent in self.agents:  # the game's role order, so outcomes do not depend on dict order
            if agent in actions:
                action = actions[agent]
                infos[agent] = self.game.act(
                    agent, action if isinstance(action, str) else repr(action)
                )
        self.game.end_round()
        rewards = {a: float(self.game.rewards().get(a, 0.0)) for a in self.agents}
        terminations = {a: self.game.done for a in self.agents}
        truncations = {a: self.game.truncated and not self.game.done for a in self.agents}
        observations = {a: TextObservation(self.game.observe(a)) for a in self.agents}
        infos = {a: {**self.game.info(a), **infos.get(a, {})} for a in self.agents}
        if self.game.done or self.game.truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        if self.render_mode == "ansi" and self.agents:
            return self.game.observe(self.agents[0])
        return None

    def close(self) -> None:
        self.game.close()
