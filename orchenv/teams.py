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
  agents) live with each environment and drive the same game;
  ``assign_role_agents`` maps their roles to pool agents.

Rewards are team rewards: ``end_round()`` sets what every live role earned
that round (usually the task score at the end, 0 before). An episode ends
``done`` (terminated) when the game's own rule ends it (the task is solved, the
item bought, the planner finishes) and ``truncated`` when ``max_turns`` rounds
pass without that, the same rule as every orchenv env.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector

from orchenv.error import ConfigError, EnvStateError, UnknownNameError
from orchenv.memory import (
    RoleSpec,
    Router,
    RoutingSettings,
    SharedMemory,
    TokenCounter,
    make_role_router,
    make_token_counter,
    render_context,
)
from orchenv.pool import AgentPool, AgentSpec, Backend, Message
from orchenv.spaces import AnyText, TextObservation


@dataclass(frozen=True, kw_only=True)
class TeamRole(RoleSpec):
    """One role of a ``RoleGame``: what routers see of it (``RoleSpec``: appendix E's
    keywords K_i, the static baseline's item types) and the ``stage`` it acts in.

    A game gives its roles' beta_role (eq. 4) in ``default_routing.budget_offsets`` (the
    ``budget_offset`` field stays 0), so that a caller's ``routing=`` changes every budget
    in one place.
    """

    stage: str


class RoleGame(ABC):
    """A multi-role task over a routed ``SharedMemory``; see the module docstring.

    The base owns what every role game shares: the round counter and the horizon
    (``max_turns`` rounds, then ``truncated``), the team rewards, the memory (new
    each episode), the router (``make_role_router`` over the team's roles), each
    role's prompt (its instructions, the task line, the round and stage, its extra
    lines, and the routed memory), and ``act``'s checks (known role, episode still
    running, text cut to ``max_reply_chars``). A subclass writes only its protocol:

    - class attributes: ``team`` (every role it may play, in acting order, as
      ``TeamRole``), ``role_prompts`` (each role's instructions), ``stage_types``
      (appendix E's T_t per stage), and optionally ``default_routing`` (its
      ``RoutingSettings``: budgets, scorer, duplicate test) and ``max_reply_chars``
      (longer role replies are cut before parsing);
    - ``_reset(options)``: pick the task and write the first memory items;
    - ``_task_line()``: the task as the first line of every role's prompt;
    - ``_act(role, text)``: apply one role's (clean, cut) text, return its info;
    - ``_end_round()``: may set ``done`` and ``round_rewards``;
    - ``summary()``: the episode's result, added to every role's info at the end;
    - optional: ``_keywords()`` (per-call keywords for RCR), ``_role_lines(role)``
      (e.g. the commands a role may send now), ``_on_truncate()``, ``close()``.

    ``self.np_random`` is seeded by ``reset``; views that own an RNG may assign theirs.

    Arguments (subclasses pass them on and document them):
        roles: the roles that play, when they depend on the game's arguments (default:
            the whole ``team``).
        max_turns: rounds before truncation.
        router: ``"full"``, ``"static"`` or ``"rcr"``.
        routing: changes to ``default_routing`` (RCR's budgets and scorer, the memory's
            duplicate test): a ``RoutingSettings``, or a mapping of the fields to change
            (``RoutingSettings.updated``); None keeps the defaults.
        token_counter: how memory items are measured (``make_token_counter``; built on
            first use).
    """

    name: str = "role_game"
    #: every role the game may play, in acting order
    team: ClassVar[tuple[TeamRole, ...]] = ()
    #: each role's instructions (its system prompt)
    role_prompts: ClassVar[Mapping[str, str]] = {}
    #: appendix E's preferred item types T_t per stage
    stage_types: ClassVar[Mapping[str, Sequence[str]]] = {}
    #: the routing settings unless ``routing=`` changes them
    default_routing: ClassVar[RoutingSettings] = RoutingSettings()
    #: longer role replies are cut to this many characters before parsing
    max_reply_chars: int = 4000

    def __init__(
        self,
        *,
        roles: Sequence[str] | None = None,
        max_turns: int = 3,
        router: str = "rcr",
        routing: RoutingSettings | Mapping[str, Any] | None = None,
        token_counter: str | TokenCounter | None = "estimate",
    ) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"max_turns must be an int >= 1, got {max_turns!r}")
        team = {role.name: role for role in self.team}
        for name in roles or ():
            if name not in team:
                raise UnknownNameError("role", name, team)
        for name in team:
            if name not in self.role_prompts:
                raise ConfigError(f"{type(self).__name__}.role_prompts has no prompt for {name!r}")
        self._team = team
        #: the roles that play, in acting order
        self.roles: tuple[str, ...] = tuple(team) if roles is None else tuple(roles)
        self.max_turns = max_turns
        self.router_mode = router
        self.routing = self.default_routing.updated(routing)
        self.router: Router = make_role_router(
            router,
            [team[name] for name in self.roles],
            self.routing,
            self.stage_types,
            known=tuple(team),
        )
        self.token_counter = token_counter
        self.np_random, _ = seeding.np_random(None)
        self.round = 0
        self.done = False
        self.truncated = False
        self.round_rewards: dict[str, float] = {}
        self._infos: dict[str, dict[str, Any]] = {}
        self.memory = SharedMemory("estimate", novelty_threshold=self.routing.novelty_threshold)
        self.context_tokens: dict[str, int] = {}  # tokens routed to each role, last time

    @cached_property
    def counter(self) -> TokenCounter:
        """The token counter of the memory (and of simulated agents that share it)."""
        return make_token_counter(self.token_counter)

    # -- the protocol a subclass writes ------------------------------------------------
    @abstractmethod
    def _reset(self, options: dict[str, Any]) -> None:
        """Pick the task and fill the initial memory (``self.memory`` is new and empty)."""

    @abstractmethod
    def _task_line(self) -> str:
        """The task, as the first line of every role's prompt."""

    @abstractmethod
    def _act(self, role: str, text: str, **kwargs: Any) -> dict[str, Any]:
        """Apply one role's text (a ``str`` cut to ``max_reply_chars``); never raise on
        malformed text. Returns the role's info (``invalid_action``, ``parse_error``, ...)."""

    @abstractmethod
    def _end_round(self) -> None:
        """Game-specific end of round; may set ``done`` and ``round_rewards``."""

    @abstractmethod
    def summary(self) -> dict[str, Any]:
        """The episode's result (``task_id``, ``final_answer``, scores), once it has ended."""

    def _keywords(self) -> tuple[str, ...]:
        """Keywords added to every role's list K_i when RCR routes (e.g. the task's words)."""
        return ()

    def _role_lines(self, role: str) -> list[str]:
        """Extra prompt lines for ``role`` now (e.g. the commands it may send)."""
        return []

    def _on_truncate(self) -> None:  # noqa: B027  (optional hook)
        """Called once when the round limit ends an unfinished task (e.g. to score it)."""

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release engines and processes."""

    # -- what the views call ------------------------------------------------------------
    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> None:
        """Start a new task (``options`` as the Gymnasium views take them)."""
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        self.round = 0
        self.done = False
        self.truncated = False
        self.round_rewards = {role: 0.0 for role in self.roles}
        self._infos = {role: {} for role in self.roles}
        self.memory = SharedMemory(self.counter, novelty_threshold=self.routing.novelty_threshold)
        self.context_tokens = {}
        self._reset(dict(options or {}))

    def check_role(self, role: str) -> None:
        """``UnknownNameError`` unless ``role`` plays in this game."""
        if role not in self.roles:
            raise UnknownNameError("role", role, self.roles)

    def role_messages(self, role: str) -> list[Message]:
        """``role``'s chat messages now: its instructions, then the task, the round, its
        stage, its extra lines and the memory the router gives it."""
        self.check_role(role)
        stage = self._team[role].stage
        kwargs: dict[str, Any] = {}
        if self.router_mode == "rcr":
            kwargs = {"keywords": self._keywords(), "now": self.round + 1}
        routing = self.router.route(self.memory, role, stage, **kwargs)
        self.context_tokens[role] = routing.tokens
        lines = [
            self._task_line(),
            f"Round {self.round + 1} of {self.max_turns}; your stage: {stage}.",
            *self.reply_cut_lines(role),
            *self._role_lines(role),
            "Shared memory routed to you:\n" + render_context(routing.items),
        ]
        return [
            {"role": "system", "content": self.role_prompts[role]},
            {"role": "user", "content": "\n".join(lines)},
        ]

    def reply_cut_lines(self, role: str) -> list[str]:
        """A prompt line telling ``role`` its last reply was cut at ``max_reply_chars`` (its
        tags past the cut were not read), or none."""
        cut = self._infos.get(role, {}).get("reply_cut")
        if not cut:
            return []
        return [
            f"Your last reply was cut: only its first {cut['kept']:,} of {cut['chars']:,} "
            "characters were read."
        ]

    def observe(self, role: str) -> str:
        """The role's prompt now, as one string."""
        return "\n\n".join(m["content"] for m in self.role_messages(role))

    def act(self, role: str, text: Any, **kwargs: Any) -> dict[str, Any]:
        """Apply one role's reply; never raises on malformed text. Returns the role's info."""
        self.check_role(role)
        if self.done or self.truncated:
            return {"invalid_action": True, "parse_error": "the episode is over"}
        if not isinstance(text, str):
            text = repr(text)
        info = self._act(role, text[: self.max_reply_chars], **kwargs)
        if len(text) > self.max_reply_chars:  # say so: tags past the cut were not read
            cut = (
                f"the reply was cut: only its first {self.max_reply_chars:,} of "
                f"{len(text):,} characters were read"
            )
            info["reply_cut"] = {"chars": len(text), "kept": self.max_reply_chars}
            if info.get("parse_error"):
                info["parse_error"] = f"{info['parse_error']} ({cut})"
            info.setdefault("notice", cut)
        info.setdefault("context_tokens", self.context_tokens.get(role, 0))
        self.set_info(role, info)
        return info

    def end_round(self) -> None:
        """Close the round: memory update, engine advance, ``round_rewards``, done flags."""
        self.round_rewards = {role: 0.0 for role in self.roles}
        self._end_round()
        self.round += 1
        if not self.done and self.round >= self.max_turns:
            self.truncated = True
            self._on_truncate()

    def rewards(self) -> dict[str, float]:
        return dict(self.round_rewards)

    def info(self, role: str) -> dict[str, Any]:
        """The role's last info; once the episode has ended, with ``summary()``, ``turns``
        (rounds played) and ``memory_tokens``."""
        info = dict(self._infos.get(role, {}))
        if self.done or self.truncated:
            info.update(self.summary(), turns=self.round, memory_tokens=self.memory.total_tokens)
        return info

    def set_info(self, role: str, info: dict[str, Any]) -> None:
        self._infos[role] = info


def inner_env_kwargs(
    env_kwargs: Mapping[str, Any] | None,
    *,
    rounds: int,
    actions_per_round: int,
    **fixed: Any,
) -> dict[str, Any]:
    """The arguments of the single-agent env a role game plays in (a shop, a household).

    The caller's ``env_kwargs`` plus what the game sets itself (``fixed``, and the env's
    ``max_turns``: ``actions_per_round`` actions in each of ``rounds`` rounds and two more,
    so the env never truncates before the game does); ``ConfigError`` when ``env_kwargs``
    sets one of those.
    """
    kwargs = dict(env_kwargs or {})
    for key in ("max_turns", *fixed):
        if key in kwargs:
            raise ConfigError(f"env_kwargs may not set {key!r}: the role game sets it")
    return {**kwargs, **fixed, "max_turns": actions_per_round * rounds + 2}


def role_agent_pool(
    name: str,
    backend_name: str,
    backend: Backend,
    calibration: Mapping[str, Mapping[str, float]],
) -> AgentPool:
    """One simulated agent per role (the keys of ``calibration``, each with its calibration),
    named after its role and served by ``backend`` (as ``backend_name``, told the role in
    ``backend_kwargs``), at Qwen2.5-7B-Instruct prices and 60 tokens/s: seed 004 names no
    role models."""
    specs = [
        AgentSpec.priced(
            role,
            "Qwen/Qwen2.5-7B-Instruct",
            "qwen2.5-7b-instruct",
            backend=backend_name,
            calibration={**values, "tokens_per_second": 60.0},
            backend_kwargs={"role": role},
        )
        for role, values in calibration.items()
    ]
    return AgentPool(specs, {backend_name: backend}, name=name)


def assign_role_agents(
    agents: Sequence[str],
    roles: Sequence[str],
    overrides: Mapping[str, str],
    *,
    known: Sequence[str] | None = None,
) -> dict[str, str]:
    """Role -> the pool agent that plays it: the agent named like the role, unless
    ``overrides`` (a ``role_agents`` argument) says otherwise.

    ``agents`` are the pool's agent names. ``UnknownNameError`` for an override of a
    role not in ``known`` (default: ``roles``) and for an agent the pool does not have.
    """
    unknown = sorted(set(overrides) - set(known if known is not None else roles))
    if unknown:
        raise UnknownNameError("role in role_agents", unknown[0], known or roles)
    chosen = {role: overrides.get(role, role) for role in roles}
    for role, agent in chosen.items():
        if agent not in agents:
            raise UnknownNameError(
                f"pool agent for role {role!r} (set role_agents=)", agent, agents
            )
    return chosen


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
