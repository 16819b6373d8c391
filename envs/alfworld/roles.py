"""ALFWorld as a routed four-role team (seed 004, appendix F, Table 7).

Planner, Navigator (the Searcher / Navigator of Table 7), Interactor and
Evaluator share one ``SharedMemory``; before a role acts, a router (``"full"``,
``"static"`` or ``"rcr"``, built by ``orchenv.teams.RoleGame`` from the tables
below) picks the memory items it sees, and that routed context is the role's
observation. The household
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
task is completed; without it by ``max_turns`` rounds the episode is truncated. A
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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from orchenv.core import OrchestrationEnv, Outcome, SharedArguments, arguments_for
from orchenv.envs.alfworld.agents import ROLES, alfworld_role_pool, command_role, subgoal
from orchenv.envs.alfworld.choices import role_choices, role_shortcuts
from orchenv.envs.alfworld.env import NOTHING_HAPPENS, ALFWorldEnv, normalize_command
from orchenv.envs.alfworld.sealed import SEALED_GAMES
from orchenv.error import ConfigError
from orchenv.memory import AgentOutput, RoutingSettings, TokenCounter, render_context
from orchenv.parsing import extract_tag, is_placeholder, strip_reasoning
from orchenv.pool import AgentPool, CallContext, Message
from orchenv.tasks import Task, TaskSource
from orchenv.teams import (
    RoleAECEnv,
    RoleGame,
    RoleParallelEnv,
    TeamRole,
    assign_role_agents,
    inner_env_kwargs,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

_WORD = re.compile(r"[a-z]{4,}")
_GOAL_STOPWORDS = frozenset({"some", "them", "then", "with", "under", "find", "into", "look"})


class ALFWorldRoleGame(RoleGame):
    """Planner / Navigator / Interactor / Evaluator over shared memory in one ALFWorld game.

    Arguments:
        max_turns: rounds before truncation (each role acts once per round in the
            PettingZoo views; one role per round in ``ALFWorldControllerEnv``).
        env_kwargs: ``ALFWorldEnv`` arguments for the household (split, data_dir,
            game_files, task_types).
        expert: ``"planner"`` to compute alfworld's expert plan after every command
            (the simulated agents need it), or None.
        router: ``"full"``, ``"static"`` or ``"rcr"``.
        routing: changes to ``default_routing`` (``RoutingSettings``: RCR's budgets, eq. 4,
            and scorer, appendix E; the memory's duplicate test), as a ``RoutingSettings``
            or a mapping of the fields to change. The duplicate test is 1.0 by default
            (``novelty_threshold``): ALFWorld observations are short, and two that differ
            in one word ("you see a creditcard 2" at the coffeetable vs. at the armchair)
            are different facts.
        token_counter: how memory items are measured (default: the 4-chars estimate).

    ``done`` when the task is complete (every role earns 1.0 that round);
    ``truncated`` after ``max_turns`` rounds without that.
    """

    name = "alfworld_roles"
    #: Table 7's roles in acting order: stage, appendix E's keywords K_i (the task's words are
    #: added per episode) and the static baseline's slice
    team = (
        TeamRole(
            "planner",
            stage="plan",
            keywords=("nothing happens", "not done"),
            static_types=("task", "plan", "feedback", "observation"),
        ),
        TeamRole(
            "navigator",
            stage="navigate",
            keywords=("you arrive", "you see", "closed"),
            static_types=("task", "plan"),
        ),
        TeamRole(
            "interactor",
            stage="interact",
            keywords=("you pick up", "is open", "carrying"),
            static_types=("task", "plan"),
        ),
        TeamRole(
            "evaluator",
            stage="evaluate",
            keywords=("you move", "you turn on", "using the"),
            static_types=("task", "observation"),
        ),
    )
    #: each role's instructions (its system prompt)
    role_prompts: ClassVar[Mapping[str, str]] = {
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
    #: preferred item types per stage (appendix E's T_t)
    stage_types: ClassVar[Mapping[str, Sequence[str]]] = {
        "plan": ("task", "feedback", "observation"),
        "navigate": ("plan", "feedback", "observation"),
        "interact": ("plan", "feedback", "observation"),
        "evaluate": ("task", "plan", "observation"),
    }
    #: eq. (4): seed 004's ALFWorld runs give every agent B_i = 2048 (Table 8); the duplicate
    #: test keeps every observation that differs in a word (see Arguments)
    default_routing: ClassVar[RoutingSettings] = RoutingSettings(
        beta_base=2048, novelty_threshold=1.0
    )

    def __init__(
        self,
        *,
        max_turns: int = 15,
        env_kwargs: Mapping[str, Any] | None = None,
        expert: str | None = None,
        router: str = "rcr",
        routing: RoutingSettings | Mapping[str, Any] | None = None,
        token_counter: str | TokenCounter | None = "estimate",
    ) -> None:
        super().__init__(**arguments_for(super().__init__, locals()))
        # at most two commands a round: the Navigator's and the Interactor's
        house = inner_env_kwargs(env_kwargs, rounds=max_turns, actions_per_round=2, expert=expert)
        self.house = ALFWorldEnv(**house)
        self.last_command: str | None = None
        #: whether the newest plan or evaluator feedback still describes the game: it named
        #: the expert's next sub-goal when written and every command since followed the expert
        #: (None without an expert: not tracked). A command that strays or fails makes it stale.
        self.guidance_fresh: bool | None = None

    # -- RoleGame ---------------------------------------------------------------------------
    def _reset(self, options: dict[str, Any]) -> None:
        self.house.reset(seed=int(self.np_random.integers(2**31)), options=options)
        self.memory.write("user", "task", f"Task: {self.goal}", round=0, key="task")
        self.memory.write("environment", "observation", self.house.room_description, round=0)
        self.last_command = None
        self.guidance_fresh = False if self.house.expert is not None else None

    @property
    def goal(self) -> str:
        return self.house.goal

    @property
    def won(self) -> bool:
        return self.house.state is not None and self.house.state.won

    def _task_line(self) -> str:
        return f"Your task is to: {self.goal}"

    def _keywords(self) -> tuple[str, ...]:
        """Per-episode keywords added to every role's list: the task's content words."""
        words = _WORD.findall(self.goal.lower())
        return tuple(dict.fromkeys(w for w in words if w not in _GOAL_STOPWORDS))

    def agent_task(self) -> Task:
        """What the simulated agents (``agents.py``) may know: the game, its state and
        alfworld's plan (``expert="planner"`` keeps the plan current), as the task of a
        ``CallContext``."""
        state, game = self.house.state, self.house.game
        assert state is not None and game is not None, "reset() first"
        meta = {
            "expert_plan": state.expert_plan,
            "admissible_commands": state.admissible_commands,
            "won": state.won,
            "guidance_fresh": self.guidance_fresh,
        }
        return Task(id=game.id, prompt=self.goal, answers=(), meta=meta)

    def allowed_commands(self, role: str) -> list[str]:
        """The commands ``role`` may send now (what its prompt lists)."""
        if role not in ("navigator", "interactor") or self.done or self.truncated or self.won:
            return []
        assert self.house.state is not None
        return [c for c in self.house.state.admissible_commands if command_role(c) == role]

    def _role_lines(self, role: str) -> list[str]:
        commands = self.allowed_commands(role)
        return ["Commands you may send now: " + "; ".join(commands) + "; pass"] if commands else []

    def _act(self, role: str, text: str, **kwargs: Any) -> dict[str, Any]:
        if role in ("navigator", "interactor"):
            return self._act_command(role, text)
        return self._act_writer(role, text)

    def _act_writer(self, role: str, text: str) -> dict[str, Any]:
        kind = "plan" if role == "planner" else "feedback"
        body = extract_tag(text, kind)
        if body is None:
            body = strip_reasoning(text).strip()
        if not body:
            example = (
                "a numbered plan such as <plan>1. GoTo(fridge 1) 2. Open(fridge 1)</plan>"
                if kind == "plan"
                else "a progress report such as <feedback>the apple is in hand; next: go to the "
                "countertop</feedback>"
            )
            return {
                "invalid_action": True,
                "parse_error": f"the {role} wrote nothing; expected {example}",
            }
        key = f"{role}:{kind}"  # the latest plan / progress report replaces the previous one
        stored = self.memory.update([AgentOutput(role, body, type=kind, key=key)], self.round + 1)
        plan = self._expert_plan()
        if plan is not None:
            # the newest guidance is fresh when it names the sub-goal that is really next
            self.guidance_fresh = bool(plan) and subgoal(plan[0]) in body
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
        plan = self._expert_plan()
        _, _, _, _, step_info = self.house.step(command)
        if plan is not None and not (plan and command == plan[0]):
            self.guidance_fresh = False  # strayed from the plan or failed: the guidance is stale
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

    def _expert_plan(self) -> list[str] | None:
        """alfworld's current plan (None without an expert)."""
        state = self.house.state
        if self.house.expert is None or state is None:
            return None
        return list(state.expert_plan)

    def _end_round(self) -> None:
        if self.won:
            self.done = True
            self.round_rewards = {role: 1.0 for role in ROLES}

    def summary(self) -> dict[str, Any]:
        assert self.house.game is not None
        return {
            "won": self.won,
            "correct": self.won,
            "task_id": self.house.game.id,
            "final_answer": self.last_command,
        }

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
Reply with the chosen role's name inside a <role> tag. The team has {max_turns} steps; every \
call costs tokens.

Example reply (choose the role that should act now):
<role>navigator</role>"""

#: the notice's filled-in reply (issue 31: a small model copies a bare ``<role>NAME</role>``)
EXAMPLE_ROLE_REPLY = "<role>planner</role>"

ROLE_ALIASES = {"searcher": "navigator", "executor": "interactor", "verifier": "evaluator"}


def parse_role(text: str) -> tuple[str | None, str | None]:
    """(role, None) from ``<role>NAME</role>``, or (None, what was wrong). Never raises."""
    name = extract_tag(text, "role")
    if name is None:
        return None, (
            f"no <role> tag found; it holds one of {', '.join(ROLES)}, for example "
            f"{EXAMPLE_ROLE_REPLY}"
        )
    if is_placeholder(name):
        return None, (
            f"{name[:40]!r} is a placeholder; name one of {', '.join(ROLES)}, for example "
            f"{EXAMPLE_ROLE_REPLY}"
        )
    key = re.sub(r"[^a-z]", "", name.lower())
    role = ROLE_ALIASES.get(key, key)
    if role not in ROLES:
        return None, (
            f"unknown role {name[:40]!r}; expected one of {', '.join(ROLES)}, for example "
            f"{EXAMPLE_ROLE_REPLY}"
        )
    return role, None


class ALFWorldControllerEnv(OrchestrationEnv):
    """Pick which role of a routed ALFWorld team acts next; pool agents play the roles.

    ## Description
    The roles of seed 004's appendix F (Planner, Navigator, Interactor,
    Evaluator) share a memory through a router (full / static / RCR) and play
    one ALFWorld game (alfworld's engine). The learner is the coordinator: each
    turn it names one role; that role's pool agent reads its routed context and
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
    the turn still counts, and the next observation repeats the request with the
    error.

    ## Observation
    The coordinator's prompt: the roles, the task, the step count, the latest
    engine feedback and the whole shared memory as YAML-like blocks.
    ``info["role"]``, ``info["agent_text"]``, ``info["command"]`` and
    ``info["feedback"]`` describe the step, ``info["round"]``, ``info["router"]``,
    ``info["task_type"]`` and ``info["won"]`` the team;
    ``info["privileged"]["expert_plan"]`` is alfworld's plan (for analysis, not
    for policies).

    ## Rewards
    1.0 on the turn the task is completed (ALFWorld's reward), plus
    ``format_penalty`` for an invalid action, minus ``cost_weight`` x the turn's
    dollar cost. ``info["constraint_costs"]`` counts the calls per agent.

    ## Episode end
    ``terminated`` when the task is complete; ``truncated`` after ``max_turns``
    turns without that. The last info holds ``correct`` (= won), ``task_id``,
    ``final_answer`` (the last command), ``memory_tokens``, ``turns`` and
    ``metrics``: ``success`` (1.0 or 0.0) and ``rounds`` (the team's rounds, one
    per turn).

    ## Arguments
    - ``role_agents``: role -> agent name, for pools whose agents are not named
      after the roles.
    - ``seed``: the simulated agents' luck.
    - ``router``: ``"rcr"`` (default), ``"full"`` or ``"static"``.
    - ``routing``: changes to ``ALFWorldRoleGame.default_routing``, a
      ``RoutingSettings`` or a mapping of its fields: RCR's per-role token budgets
      (``beta_base``, ``budget_offsets``; eq. 4, default 2048 for every role, Table 8),
      importance score (``weights``, ``decay``; appendix E), selection (``selector``:
      ``"greedy"``, Algorithm 1, or ``"exact"``) and the memory's duplicate test
      (``novelty_threshold``, default 1.0).
    - ``token_counter``: how memory items are measured (default: 4 chars/token).
    - ``cost_weight``: dollars-to-reward weight of the call cost (default 0, >= 0).
    - ``data_dir``, ``game_files``, ``task_types``: the games, as for ``ALFWorldEnv``.
    - ``sealed_games``: games a sealed env generates for its split, as for ``ALFWorldEnv``
      (issue 37: with the shared argument `sealed` the team plays games drawn under the
      board's secret, ``sealed.py``).

    ## Discrete actions
    ``action_choices()`` (for ``orchenv.discrete`` and ``orchenv audit``): one
    ``<role>NAME</role>`` per role in ``ROLES`` order, all available in every state.
    ``audit_strategies()`` names the shortcuts the audit must find clearly worse than the
    best response (``choices.py``); ``observation_features()`` adds the last role called
    and what came of it, and whether the memory holds a plan and feedback.

    ## Shared arguments
    - ``pool``: ``"alfworld-roles"`` (default: the simulated agents), or a pool name, pool file
      or ``AgentPool`` with an agent per role.
    - ``split``: the ALFWorld split, as for ``orch/ALFWorld-v0``.
    - ``max_turns``: coordinator turns per episode (default 20, about twice the longest bundled
      plan plus a planner call; it was 30 before issue 25, when a fixed schedule had turns to
      spare. Raise it for the full ALFWorld data, whose plans are longer).

    ## Version history
    - v0: initial version. Since the one-shape refactor the horizon argument is
      ``max_turns`` (it was ``max_steps``), an invalid action's next observation
      carries the shared notice, ``info["metrics"]`` is new, ``backend`` /
      ``backend_kwargs`` are accepted, and the simulated agents draw their luck
      from ``orchenv.seeding`` (BLAKE2b; it was SHA-256), so individual episodes
      differ from before while the calibrated rates stay the same. RCR's ``beta_base``,
      ``budget_offsets``, ``weights``, ``decay`` and ``selector`` arguments are now
      the fields of one ``routing`` argument.
    - Issue 25: the role choice matters. Guidance goes stale after a command that strays
      from alfworld's plan or fails (the actors are unguided until the planner or the
      evaluator renews it), ``max_turns`` defaults to 20 (was 30), ``skill_action`` /
      ``realistic_skill`` for the audit's skill reference, and the shortcuts include the
      best fixed schedule found by ``coordination.search_schedules``. Success rates of
      fixed schedules drop (``docs/alfworld.md``).
    - Issue 38: an actor called out of turn jumps ahead to a planned verb and sends
      ``close`` only when nothing else is on offer (``agents.py``): the tell meter read right
      from wrong off the replies' lengths and number counts.
    - Issue 37: ``sealed_games``; a sealed env plays games drawn under the board's secret.
    """

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "pool": "alfworld-roles",
        "max_turns": 20,
        "format_penalty": -0.1,
    }

    #: shared arguments this env has no use for (passing one is an error)
    unused_shared_arguments = ("task_source", "task_source_kwargs")

    def __init__(
        self,
        *,
        role_agents: Mapping[str, str] | None = None,
        seed: int = 0,
        router: str = "rcr",
        routing: RoutingSettings | Mapping[str, Any] | None = None,
        token_counter: str | TokenCounter | None = "estimate",
        cost_weight: float = 0.0,
        data_dir: str | os.PathLike[str] | None = None,
        game_files: Sequence[str | os.PathLike[str]] | None = None,
        task_types: Sequence[str | int] | None = None,
        sealed_games: int = SEALED_GAMES,
        **shared: Unpack[SharedArguments],
    ) -> None:
        super().__init__(**shared)
        if cost_weight < 0:
            raise ConfigError(f"cost_weight must be >= 0 (it subtracts dollars), got {cost_weight}")
        house = {"split": self.split, "data_dir": data_dir, "game_files": game_files}
        # issue 37: a sealed team plays games drawn under the board's secret (sealed.py)
        house.update(sealed=self._sealed, sealed_games=sealed_games)
        self.game = ALFWorldRoleGame(
            **arguments_for(ALFWorldRoleGame, {**locals(), "max_turns": self.max_turns}),
            expert="planner",
            env_kwargs={**house, "task_types": task_types},
        )
        self._role_agents_arg = dict(role_agents or {})
        self._role_agents: dict[str, str] | None = None
        self.backend_seed = seed
        self.cost_weight = cost_weight
        self._last: dict[str, Any] = {}

    def _build_pool(self) -> AgentPool:
        if self._pool_arg == "alfworld-roles":
            return alfworld_role_pool(seed=self.backend_seed, token_counter=self.game.counter)
        return super()._build_pool()

    def _build_task_source(self) -> TaskSource:
        """The household's games, so ``task_source.size`` and ``task_index`` work here too
        (the audit plans distinct games with them); episodes still draw through the game."""
        return self.game.house.task_source

    @property
    def role_agents(self) -> dict[str, str]:
        """Role -> the pool agent that plays it."""
        if self._role_agents is None:
            self._role_agents = assign_role_agents(self.pool.names, ROLES, self._role_agents_arg)
        return self._role_agents

    def valid_agents(self) -> list[str]:
        return [self.role_agents[r] for r in ROLES]

    def demo_action(self, rng: np.random.Generator) -> str:
        """A random well-formed coordinator reply: one role in a ``<role>`` tag."""
        return f"<role>{ROLES[int(rng.integers(len(ROLES)))]}</role>"

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def action_choices(self) -> list[str | None]:
        """One choice per role (see "Discrete actions" above)."""
        return role_choices()

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the best response (``choices.py``)."""
        return role_shortcuts()

    # -- the audit's skill reference (issue 25) -----------------------------------------
    #: the coordinator's skill: calling the role the next sub-goal needs. No paper reports how
    #: often a learned coordinator picks it; the level here is measured, not a paper number:
    #: the share of decisions at which ``coordination.adaptive_coordinator`` (which reads only
    #: the observation) picks the same role as ``skill_action(skilled=True)``
    realistic_skill: ClassVar[float | None] = 0.95
    realistic_skill_source: ClassVar[str] = (
        "measured, not a paper number (docs/alfworld.md): the observation-only adaptive "
        "coordinator (envs/alfworld/coordination.py) picks the skilled choice at 0.978 +- 0.025 "
        "of its decisions (135 decisions, 16 train-game episodes); 0.95 is about the interval's "
        "lower end"
    )

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """Skilled (privileged: alfworld's plan and whether the team's guidance still holds):
        the planner when no fresh plan or feedback guides the actors (at the start, after a
        command strayed or failed), else the actor whose kind of command the plan's next step
        is. Unskilled: a uniformly random role, whatever the game."""
        house = self.game.house
        if house.state is None:
            return None
        if not skilled:
            return self.demo_action(rng)
        plan = list(house.state.expert_plan)
        if not self.game.guidance_fresh or not plan:
            return "<role>planner</role>"
        return f"<role>{command_role(plan[0]) or 'navigator'}</role>"

    def observation_features(self) -> np.ndarray:
        """What the coordinator saw happen: the last role called (one-hot over ``ROLES``),
        whether it sent no command (a pass or a plan), whether the engine answered "Nothing
        happens.", and whether the memory holds a plan and evaluator feedback."""
        last = self._last.get("role")
        types = {item.type for item in self.game.memory.items}
        steps = self.game.house.steps
        return np.array(
            [
                *(float(last == role) for role in ROLES),
                float(last is not None and self._last.get("command") is None),
                float(bool(steps) and steps[-1][1].strip() == NOTHING_HAPPENS),
                float("plan" in types),
                float("feedback" in types),
            ],
            dtype=np.float32,
        )

    # -- episode ------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.game.np_random = self.np_random
        self.game.reset(options=options)
        house = self.game.house
        assert house.game is not None
        self.task = Task(id=house.game.id, prompt=self.game.goal, answers=())
        self._last = {}
        return {}

    def _messages(self) -> list[Message]:
        game = self.game
        latest = game.house.steps[-1][1] if game.house.steps else game.house.room_description
        parts = [
            f"Your task is to: {game.goal}",
            f"Step {min(self.turn + 1, self.max_turns)} of {self.max_turns}.",
            f"Latest observation: {latest}",
            "Shared memory:\n" + render_context(game.memory.items),
        ]
        cut = self._last.get("reply_cut")
        if cut:
            parts.append(
                f"Note: the {self._last.get('role')}'s last reply was cut: only its first "
                f"{cut['kept']:,} of {cut['chars']:,} characters were read."
            )
        return [
            {"role": "system", "content": CONTROLLER_SYSTEM.format(max_turns=self.max_turns)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _observation_info(self) -> dict[str, Any]:
        house = self.game.house
        assert house.state is not None and house.game is not None
        return {
            "round": self.game.round,
            "router": self.game.router_mode,
            "task_type": house.game.task_type,
            "won": house.state.won,
            "privileged": {"expert_plan": list(house.state.expert_plan)},
            **self._last,
        }

    def consult_context(self, name: str) -> CallContext:
        """A consulted call gets what a routed one does (issue 38): the role game's agent
        task (the simulated role backend reads the expert plan from it) and the turn."""
        return CallContext(task=self._task_view(), turn=self.turn)

    def _task_view(self) -> Task:
        """What the simulated agents may know (``ALFWorldRoleGame.agent_task``)."""
        return self.game.agent_task()

    def _apply(self, action: str) -> Outcome:
        game = self.game
        role, error = parse_role(action)
        self._last = {
            "role": role,
            "agent_text": None,
            "command": None,
            "feedback": None,
            "role_invalid": False,
        }
        if role is not None:
            context = CallContext(task=self._task_view(), turn=self.turn)
            completion = self.call_agent(self.role_agents[role], game.role_messages(role), context)
            acted = game.act(role, completion.text)
            self._last.update(
                agent_text=completion.text[:4000],
                command=acted.get("command"),
                feedback=acted.get("feedback"),
                role_invalid=bool(acted.get("invalid_action")),
            )
            if "reply_cut" in acted:  # issue 28: a cut reply is said, in info and observation
                self._last["reply_cut"] = acted["reply_cut"]
        game.end_round()
        reward = sum(game.rewards().values()) / len(ROLES)  # the team reward, once
        reward -= self.cost_weight * self._step_meter.cost_usd
        return Outcome(reward=reward, done=game.done, error=error)

    def _summary(self) -> dict[str, Any]:
        game = self.game
        return {
            "correct": game.won,
            "final_answer": game.last_command,
            "memory_tokens": game.memory.total_tokens,
            "metrics": {"success": float(game.won), "rounds": float(game.round)},
        }

    def close(self) -> None:
        self.game.close()
        super().close()
