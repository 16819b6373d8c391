"""ALFWorld as a routed four-role team (seed 004, appendix F, Table 7).

Planner, Navigator (the Searcher / Navigator of Table 7), Interactor and
Evaluator share one ``SharedMemory``; before a role acts, a router (``"full"``,
``"static"`` or ``"rcr"`` from ``orchenv.memory.make_router``) picks the memory
items it sees, and that routed context is the role's observation. The household
is one ``ALFWorldEnv`` episode (alfworld's engine) that two roles drive:

* **Planner** (stage ``plan``) writes symbolic sub-goals,
  ``<plan>1. GoTo(fridge 1) 2. Open(fridge 1) 3. PickUp(apple 1, fridge 1) ...</plan>``
  (a ``plan`` item; a new plan replaces the old one).
* **Navigator** (stage ``navigate``) explores: ``go to ...``, ``look``,
  ``examine ...``, ``inventory``.
* **Interactor** (stage ``interact``) handles objects: ``take ... from ...``,
  ``move ... to ...``, ``open`` / ``close``, ``heat`` / ``cool`` / ``clean ... with
  ...``, ``use ...``.
* **Evaluator** (stage ``evaluate``) checks progress:
  ``<feedback>done | not done: what is missing, next sub-goal</feedback>``.

Navigator and Interactor may reply ``pass``. After each command the engine's
answer goes to memory as an ``observation`` item (``> command`` and the
feedback). The team reward is ALFWorld's: 1.0 to every role in the round the
task is completed; without it by ``max_rounds`` the episode is truncated. A
role's empty, malformed or out-of-role text changes nothing and its info says
why; a command of the right kind that the game does not accept still reaches
the engine (which answers "Nothing happens.").

Views: ``alfworld_aec_env`` / ``alfworld_parallel_env`` (PettingZoo, every role
an external policy) and ``ALFWorldControllerEnv`` (Gymnasium: the learner picks
which role acts next and simulated pool agents, ``agents.py``, play the roles).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchenv.core import OrchestrationEnv
from orchenv.envs.alfworld.agents import ROLES, alfworld_role_pool, command_role
from orchenv.envs.alfworld.env import ALFWorldEnv, normalize_command
from orchenv.error import ConfigError, UnknownNameError
from orchenv.memory import (
    AgentOutput,
    Router,
    SharedMemory,
    TokenCounter,
    make_role_router,
    render_context,
)
from orchenv.parsing import extract_tag, strip_reasoning
from orchenv.pool import AgentPool, CallContext, Message, make_pool
from orchenv.tasks import Task
from orchenv.teams import RoleAECEnv, RoleGame, RoleParallelEnv

STAGES = {
    "planner": "plan",
    "navigator": "navigate",
    "interactor": "interact",
    "evaluator": "evaluate",
}
#: preferred item types per stage (appendix E's T_t)
STAGE_TYPES = {
    "plan": ("task", "feedback", "observation"),
    "navigate": ("plan", "feedback", "observation"),
    "interact": ("plan", "feedback", "observation"),
    "evaluate": ("task", "plan", "observation"),
}
#: the static baseline's fixed slices
STATIC_TYPES = {
    "planner": ("task", "plan", "feedback", "observation"),
    "navigator": ("task", "plan"),
    "interactor": ("task", "plan"),
    "evaluator": ("task", "observation"),
}
#: appendix E's role keyword lists K_i (the task's words are added per episode)
ROLE_KEYWORDS = {
    "planner": ("nothing happens", "not done"),
    "navigator": ("you arrive", "you see", "closed"),
    "interactor": ("you pick up", "is open", "carrying"),
    "evaluator": ("you move", "you turn on", "using the"),
}
#: beta_role of eq. (4); seed 004's ALFWorld runs give every agent B_i = 2048 (Table 8)
BUDGET_OFFSETS = {role: 0 for role in ROLES}

ROLE_PROMPTS = {
    "planner": (
        "You are the Planner of a household robot team in ALFWorld, a text world. Decompose the "
        "task into symbolic sub-goals in order and reply <plan>1. GoTo(place) 2. Open(place) "
        "3. PickUp(object, place) ...</plan> (sub-goals: GoTo, Open, Close, PickUp, Put, Heat, "
        "Cool, Clean, Toggle, Examine). Revise the plan when the memory shows it went wrong."
    ),
    "navigator": (
        "You are the Navigator of a household robot team in ALFWorld. You move the robot and "
        "look around: reply with exactly one command from your list (go to ..., look, "
        "examine ..., inventory), or pass when the next step is not a move. What the robot "
        "then sees goes to the shared memory."
    ),
    "interactor": (
        "You are the Interactor of a household robot team in ALFWorld. You handle objects: "
        "reply with exactly one command from your list (take ... from ..., move ... to ..., "
        "open / close ..., heat / cool / clean ... with ..., use ...), or pass when the robot "
        "is not where the next step happens."
    ),
    "evaluator": (
        "You are the Evaluator of a household robot team in ALFWorld. Check the task against "
        "the observations and reply <feedback>done</feedback> when it is complete, or "
        "<feedback>not done: what is missing; next: the next sub-goal</feedback>."
    ),
}

_WORD = re.compile(r"[a-z]{4,}")
_GOAL_STOPWORDS = frozenset({"some", "them", "then", "with", "under", "find", "into", "look"})


class ALFWorldRoleGame(RoleGame):
    """Planner / Navigator / Interactor / Evaluator over shared memory in one ALFWorld game.

    Arguments:
        router: ``"full"``, ``"static"`` or ``"rcr"``.
        max_rounds: rounds before truncation (each role acts once per round in the
            PettingZoo views; one role per round in ``ALFWorldControllerEnv``).
        beta_base / budget_offsets / weights / decay / selector: RCR's budgets (eq. 4)
            and scorer (appendix E); ignored by the other routers.
        token_counter: how memory items are measured (default: the 4-chars estimate).
        novelty_threshold: the memory's duplicate test (``SharedMemory``). 1.0 by default:
            ALFWorld observations are short, and two that differ in one word ("you see a
            creditcard 2" at the coffeetable vs. at the armchair) are different facts.
        expert: ``"planner"`` to compute alfworld's expert plan after every command
            (the simulated agents need it), or None.
        max_action_chars: longer role replies are cut before parsing.
        env_kwargs: ``ALFWorldEnv`` arguments for the household (split, data_dir,
            game_files, task_types).
    """

    name = "alfworld_roles"
    roles = ROLES

    def __init__(
        self,
        *,
        router: str = "rcr",
        max_rounds: int = 15,
        beta_base: int = 2048,
        budget_offsets: Mapping[str, int] | None = None,
        weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
        decay: float = 0.5,
        selector: str = "greedy",
        token_counter: str | TokenCounter | None = "estimate",
        novelty_threshold: float = 1.0,
        expert: str | None = None,
        max_action_chars: int = 4000,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if max_rounds < 1:
            raise ConfigError(f"max_rounds must be >= 1, got {max_rounds}")
        self.max_rounds = max_rounds
        self.router_mode = router
        self.router: Router = make_role_router(
            router,
            ROLES,
            keywords=ROLE_KEYWORDS,
            static_types=STATIC_TYPES,
            budget_offsets=BUDGET_OFFSETS,
            stage_types=STAGE_TYPES,
            overrides=budget_offsets,
            beta_base=beta_base,
            weights=weights,
            decay=decay,
            selector=selector,
        )
        kwargs = dict(env_kwargs or {})
        for key in ("max_steps", "expert"):
            if key in kwargs:
                raise ConfigError(f"env_kwargs may not set {key!r}: the role game sets it")
        # at most two commands per round (Navigator, Interactor): the house never truncates first
        self.house = ALFWorldEnv(max_steps=2 * max_rounds + 2, expert=expert, **kwargs)
        self.token_counter = token_counter
        self.novelty_threshold = novelty_threshold
        self.max_action_chars = max_action_chars
        self.memory = SharedMemory(token_counter, novelty_threshold=novelty_threshold)
        self.context_tokens: dict[str, int] = {}
        self.last_command: str | None = None

    # -- RoleGame ---------------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> None:
        self.house.reset(seed=int(self.np_random.integers(2**31)), options=options)
        self.memory = SharedMemory(self.token_counter, novelty_threshold=self.novelty_threshold)
        self.memory.write("user", "task", f"Task: {self.goal}", round=0, key="task")
        self.memory.write("environment", "observation", self.house.room_description, round=0)
        self.context_tokens = {}
        self.last_command = None

    @property
    def goal(self) -> str:
        return self.house.goal

    @property
    def won(self) -> bool:
        return self.house.state is not None and self.house.state.won

    def _keywords(self) -> tuple[str, ...]:
        """Per-episode keywords added to every role's list: the task's content words."""
        words = _WORD.findall(self.goal.lower())
        return tuple(dict.fromkeys(w for w in words if w not in _GOAL_STOPWORDS))

    def allowed_commands(self, role: str) -> list[str]:
        """The commands ``role`` may send now (what its prompt lists)."""
        if role not in ("navigator", "interactor") or self.done or self.truncated or self.won:
            return []
        assert self.house.state is not None
        return [c for c in self.house.state.admissible_commands if command_role(c) == role]

    def role_messages(self, role: str) -> list[Message]:
        if role not in ROLES:
            raise UnknownNameError("role", role, ROLES)
        kwargs: dict[str, Any] = {}
        if self.router_mode == "rcr":
            kwargs = {"keywords": self._keywords(), "now": self.round + 1}
        routing = self.router.route(self.memory, role, STAGES[role], **kwargs)
        self.context_tokens[role] = routing.tokens
        parts = [
            f"Your task is to: {self.goal}",
            f"Round {self.round + 1} of {self.max_rounds}; your stage: {STAGES[role]}.",
        ]
        commands = self.allowed_commands(role)
        if commands:
            parts.append("Commands you may send now: " + "; ".join(commands) + "; pass")
        parts.append("Shared memory routed to you:\n" + render_context(routing.items))
        return [
            {"role": "system", "content": ROLE_PROMPTS[role]},
            {"role": "user", "content": "\n".join(parts)},
        ]

    def observe(self, role: str) -> str:
        return "\n\n".join(m["content"] for m in self.role_messages(role))

    def act(self, role: str, text: str) -> dict[str, Any]:
        if role not in ROLES:
            raise UnknownNameError("role", role, ROLES)
        if self.done or self.truncated:
            return {"invalid_action": True, "parse_error": "the episode is over"}
        if not isinstance(text, str):
            text = repr(text)
        text = text[: self.max_action_chars]
        if role in ("navigator", "interactor"):
            info = self._act_command(role, text)
        else:
            info = self._act_writer(role, text)
        info["context_tokens"] = self.context_tokens.get(role, 0)
        self.set_info(role, info)
        return info

    def _act_writer(self, role: str, text: str) -> dict[str, Any]:
        kind = "plan" if role == "planner" else "feedback"
        body = extract_tag(text, kind)
        if body is None:
            body = strip_reasoning(text).strip()
        if not body:
            example = (
                "<plan>1. GoTo(...) ...</plan>" if kind == "plan" else "<feedback>...</feedback>"
            )
            return {
                "invalid_action": True,
                "parse_error": f"the {role} wrote nothing; expected {example}",
            }
        key = f"{role}:{kind}"  # the latest plan / progress report replaces the previous one
        stored = self.memory.update([AgentOutput(role, body, type=kind, key=key)], self.round + 1)
        return {"invalid_action": False, "parse_error": None, "stored": len(stored)}

    def _act_command(self, role: str, text: str) -> dict[str, Any]:
        command = normalize_command(text)
        if command in ("pass", "action: pass", ""):
            if command:
                return {"invalid_action": False, "parse_error": None, "command": None}
            return {
                "invalid_action": True,
                "parse_error": f"the {role} sent nothing; send a command or pass",
            }
        if self.won:  # a command earlier this round completed the task
            return {
                "invalid_action": False,
                "parse_error": None,
                "command": None,
                "note": "the task is complete",
            }
        owner = command_role(command)
        if owner != role:
            mine = (
                "go to / look / examine / inventory"
                if role == "navigator"
                else "take / move / open / close / heat / cool / clean / use"
            )
            error = f"{command[:60]!r} is not a {role} command; the {role} sends {mine}, or pass."
            return {"invalid_action": True, "parse_error": error}
        _, _, _, _, step_info = self.house.step(command)
        assert self.house.state is not None
        self.last_command = command
        feedback = self.house.state.feedback
        self.memory.write(role, "observation", f"> {command}\n{feedback}", round=self.round + 1)
        return {
            "invalid_action": bool(step_info["invalid_action"]),
            "parse_error": step_info["parse_error"],
            "command": command,
            "feedback": feedback,
        }

    def _end_round(self) -> None:
        if self.won:
            self.done = True
            self.round_rewards = {role: 1.0 for role in ROLES}

    def info(self, role: str) -> dict[str, Any]:
        info = super().info(role)
        if self.done or self.truncated:
            assert self.house.game is not None
            info.update(
                won=self.won,
                correct=self.won,
                task_id=self.house.game.id,
                final_answer=self.last_command,
                turns=self.round,
                memory_tokens=self.memory.total_tokens,
            )
        return info

    def close(self) -> None:
        self.house.close()


def alfworld_aec_env(**kwargs: Any) -> RoleAECEnv:
    """PettingZoo AEC view (roles act in turn, each sees this round's earlier writes)."""
    return RoleAECEnv(ALFWorldRoleGame(**kwargs))


def alfworld_parallel_env(**kwargs: Any) -> RoleParallelEnv:
    """PettingZoo parallel view (every role acts each round on the round's start memory)."""
    return RoleParallelEnv(ALFWorldRoleGame(**kwargs))


# -- the Gymnasium controller view ----------------------------------------------------------
CONTROLLER_SYSTEM = """\
You coordinate a household robot team in ALFWorld. Each step, pick the one role that acts next:
- planner: writes the sub-goals that complete the task;
- navigator: moves the robot and looks around (go to, look, examine, inventory);
- interactor: handles objects (take, move, open, close, heat, cool, clean, use);
- evaluator: checks whether the task is done and what comes next.
Reply <role>NAME</role>. The team has {max_steps} steps; every call costs tokens."""

ROLE_ALIASES = {"searcher": "navigator", "executor": "interactor", "verifier": "evaluator"}


def parse_role(text: str) -> tuple[str | None, str | None]:
    """(role, None) from ``<role>NAME</role>``, or (None, what was wrong). Never raises."""
    name = extract_tag(text, "role")
    if name is None:
        return None, f"no <role>NAME</role> tag found; NAME is one of {', '.join(ROLES)}"
    key = re.sub(r"[^a-z]", "", name.lower())
    role = ROLE_ALIASES.get(key, key)
    if role not in ROLES:
        return None, f"unknown role {name[:40]!r}; expected one of {', '.join(ROLES)}"
    return role, None


class ALFWorldControllerEnv(OrchestrationEnv):
    """Pick which role of a routed ALFWorld team acts next; pool agents play the roles.

    ## Description
    The roles of seed 004's appendix F (Planner, Navigator, Interactor,
    Evaluator) share a memory through a router (full / static / RCR) and play
    one ALFWorld game (alfworld's engine). The learner is the coordinator: each
    step it names one role; that role's pool agent reads its routed context and
    replies (a plan, a command, feedback); a command goes to the engine and the
    engine's answer to memory. Offline the pool is simulated (``agents.py``):
    agents follow alfworld's planner with a documented error rate that is
    higher when the next sub-goal is not in their routed context, so calling
    the Planner or Evaluator at the right time and picking the role whose kind
    of command is due both pay off. Each call is metered through the pool
    (tokens, dollars at the agents' prices).

    ## Action format
    ``<role>planner|navigator|interactor|evaluator</role>`` (``searcher`` is an
    alias of navigator). Anything else is invalid: ``format_penalty``, no call,
    the step still counts.

    ## Observation
    The coordinator's prompt: the roles, the task, the step count, the latest
    engine feedback and the whole shared memory as YAML-like blocks.
    ``info["role"]``, ``info["agent_text"]``, ``info["command"]`` and
    ``info["feedback"]`` describe the step; ``info["privileged"]["expert_plan"]``
    is alfworld's plan (for analysis, not for policies).

    ## Rewards
    1.0 on the step the task is completed (ALFWorld's reward), plus
    ``format_penalty`` for an invalid action, minus ``cost_weight`` x the step's
    dollar cost. ``info["constraint_costs"]`` counts the calls per agent.

    ## Episode end
    Terminated when the task is complete, truncated after ``max_steps`` steps.
    The last info holds ``correct`` (= won), ``task_id``, ``final_answer`` (the
    last command) and ``turns``.

    ## Arguments
    ``pool`` ("alfworld-roles" = the simulated agents, or a pool name / file /
    ``AgentPool`` with an agent per role), ``role_agents`` (role -> agent name),
    ``seed`` (the simulated agents' luck), ``router``, ``max_steps``,
    ``beta_base``, ``budget_offsets``, ``weights``, ``decay``, ``selector``,
    ``token_counter``, ``format_penalty``, ``cost_weight``, and the games:
    ``split``, ``data_dir``, ``game_files``, ``task_types`` (as ``ALFWorldEnv``).

    ## Version history
    - v0: initial version.
    """

    def __init__(
        self,
        *,
        pool: str | AgentPool = "alfworld-roles",
        role_agents: Mapping[str, str] | None = None,
        seed: int = 0,
        router: str = "rcr",
        max_steps: int = 30,
        beta_base: int = 2048,
        budget_offsets: Mapping[str, int] | None = None,
        weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
        decay: float = 0.5,
        selector: str = "greedy",
        token_counter: str | TokenCounter | None = "estimate",
        format_penalty: float = -0.1,
        cost_weight: float = 0.0,
        split: str = "train",
        data_dir: str | os.PathLike[str] | None = None,
        game_files: Sequence[str | os.PathLike[str]] | None = None,
        task_types: Sequence[str | int] | None = None,
        max_obs_chars: int = 1_000_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_obs_chars=max_obs_chars, render_mode=render_mode)
        if max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {max_steps}")
        if cost_weight < 0:
            raise ConfigError(f"cost_weight must be >= 0 (it subtracts dollars), got {cost_weight}")
        house = {"split": split, "data_dir": data_dir, "game_files": game_files}
        self.game = ALFWorldRoleGame(
            router=router,
            max_rounds=max_steps,
            beta_base=beta_base,
            budget_offsets=budget_offsets,
            weights=weights,
            decay=decay,
            selector=selector,
            token_counter=token_counter,
            expert="planner",
            env_kwargs={**house, "task_types": task_types},
        )
        self.max_steps = max_steps
        self.split = split
        self._pool_arg = pool
        self._role_agents_arg = dict(role_agents or {})
        self.backend_seed = seed
        self.format_penalty = format_penalty
        self.cost_weight = cost_weight
        self.role_agents: dict[str, str] = {}
        self._last: dict[str, Any] = {}

    @property
    def pool(self) -> AgentPool:
        self._ensure_built()
        assert self._pool is not None
        return self._pool

    def _ensure_built(self) -> None:
        if self._pool is not None:
            return
        if isinstance(self._pool_arg, AgentPool):
            self._pool = self._pool_arg
        elif self._pool_arg == "alfworld-roles":
            self._pool = alfworld_role_pool(
                seed=self.backend_seed, token_counter=self.game.token_counter
            )
        else:
            self._pool = make_pool(self._pool_arg)
        unknown = set(self._role_agents_arg) - set(ROLES)
        if unknown:
            raise UnknownNameError("role in role_agents", sorted(unknown)[0], ROLES)
        agents = {role: self._role_agents_arg.get(role, role) for role in ROLES}
        for role, agent in agents.items():
            if agent not in self._pool.names:
                raise UnknownNameError(
                    f"pool agent for role {role!r} (set role_agents=)", agent, self._pool.names
                )
        self.role_agents = agents

    def valid_agents(self) -> list[str]:
        return [self.role_agents[r] for r in ROLES] if self.role_agents else []

    def demo_action(self, rng: np.random.Generator) -> str:
        """A random well-formed coordinator reply: one role in a ``<role>`` tag."""
        return f"<role>{ROLES[int(rng.integers(len(ROLES)))]}</role>"

    # -- episode ------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self._ensure_built()
        self.game.np_random = self.np_random
        self.game.reset(options=options)
        self._last = {}
        return self._observation()

    def _messages(self) -> list[Message]:
        game = self.game
        latest = (
            self.game.house.steps[-1][1]
            if self.game.house.steps
            else self.game.house.room_description
        )
        parts = [
            f"Your task is to: {game.goal}",
            f"Step {min(self.turn + 1, self.max_steps)} of {self.max_steps}.",
            f"Latest observation: {latest}",
            "Shared memory:\n" + render_context(game.memory.items),
        ]
        return [
            {"role": "system", "content": CONTROLLER_SYSTEM.format(max_steps=self.max_steps)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _observation(self) -> tuple[str, dict[str, Any]]:
        messages = self._messages()
        house = self.game.house
        assert house.state is not None and house.game is not None
        return self.render_messages(messages), {
            "messages": messages,
            "round": self.game.round,
            "router": self.game.router_mode,
            "task_id": house.game.id,
            "task_type": house.game.task_type,
            "won": house.state.won,
            "privileged": {"expert_plan": list(house.state.expert_plan)},
            **self._last,
        }

    def _task_view(self) -> Task:
        """What the simulated agents may know: the game, its state and alfworld's plan."""
        house = self.game.house
        assert house.state is not None and house.game is not None
        return Task(
            id=house.game.id,
            prompt=self.game.goal,
            answers=(),
            meta={
                "expert_plan": house.state.expert_plan,
                "admissible_commands": house.state.admissible_commands,
                "won": house.state.won,
            },
        )

    def _step_episode(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        game = self.game
        self.turn += 1
        self.transcript.append({"turn": self.turn, "role": "coordinator", "text": action[:4000]})
        role, error = parse_role(action)
        reward = 0.0
        self._last = {
            "role": role,
            "agent_text": None,
            "command": None,
            "feedback": None,
            "role_invalid": False,
        }
        if error is not None:
            reward += self.format_penalty
        else:
            assert role is not None
            context = CallContext(task=self._task_view(), turn=self.turn)
            completion = self.call_agent(self.role_agents[role], game.role_messages(role), context)
            acted = game.act(role, completion.text)
            self._last.update(
                agent_text=completion.text[:4000],
                command=acted.get("command"),
                feedback=acted.get("feedback"),
                role_invalid=bool(acted.get("invalid_action")),
            )
        game.end_round()
        reward += sum(game.rewards().values()) / len(ROLES)  # the team reward, once
        reward -= self.cost_weight * self._step_meter.cost_usd
        obs, extra = self._observation()
        if error is not None:
            extra.update(invalid_action=True, parse_error=error)
        if game.done or game.truncated:
            extra.update(
                correct=game.won,
                task_id=game.house.game.id if game.house.game else None,
                final_answer=game.last_command,
                turns=self.turn,
                memory_tokens=game.memory.total_tokens,
            )
        return obs, reward, game.done, game.truncated and not game.done, extra

    def close(self) -> None:
        self.game.close()
        super().close()
