"""``orch/ALFWorld-v0``: ALFWorld's text household tasks, played by the learner itself.

Seed 004 evaluates on ALFWorld (Shridhar et al., 2021); this is the
single-learner view: the policy reads the task and the engine's feedback and
types the commands. The game engine is alfworld's own (TextWorld PDDL backend,
see ``engine.py``); the role views of seed 004's appendix F live in
``roles.py``.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from orchenv.core import NO_POOL_OWN_TASKS, OrchestrationEnv, Outcome, SharedArguments
from orchenv.envs.alfworld.choices import (
    DEFAULT_SLOTS,
    SLOT_FEATURES,
    STATE_FEATURES,
    command_choices,
    command_features,
    command_shortcuts,
)
from orchenv.envs.alfworld.engine import EXPERTS, ALFWorldEngine, EngineState
from orchenv.envs.alfworld.games import (
    GameCatalog,
    GameInfo,
    GameTasks,
    game_file_list,
    normalize_task_types,
    scan_split,
)
from orchenv.envs.alfworld.sealed import (
    MAX_SEALED_GAMES,
    SEALED_GAMES,
    real_split,
    sealed_game_root,
)
from orchenv.error import ConfigError, EnvStateError, UnknownNameError
from orchenv.parsing import strip_reasoning
from orchenv.pool import Message
from orchenv.tasks import Task

if TYPE_CHECKING:
    from typing_extensions import Unpack

SYSTEM_PROMPT = """\
You are a household robot in a text world. Each turn you read what you see and type one \
command. Copy the command exactly as it appears in the list of admissible commands \
(for example: go to countertop 1). Anything else does nothing and still uses up a turn. \
You have {max_turns} commands to complete the task."""

NOTHING_HAPPENS = "Nothing happens."
#: ``observation_mode``: ``"raw"`` is the engine's text as alfworld's own env returns it;
#: ``"chat"`` is orchenv's prompt (rules, task, feedback, step count, admissible commands)
OBSERVATION_MODES = ("raw", "chat")
#: ``command_matching``: ``"original"`` sends the command as typed (textworld strips the
#: ends, then needs an exact admissible command); ``"lenient"`` first drops reasoning
#: blocks, a leading ``>``, a trailing full stop, case and repeated spaces
COMMAND_MATCHING = ("original", "lenient")
_TASK_RE = re.compile(r"Your task is to:\s*(.*)", re.DOTALL)
_WELCOME_RE = re.compile(r"^-= Welcome to TextWorld, ALFRED! =-\s*")


def split_intro(intro: str) -> tuple[str, str]:
    """(room description, task sentence) from the game's opening text."""
    match = _TASK_RE.search(intro)
    goal = match.group(1).strip() if match else ""
    room = intro[: match.start()] if match else intro
    return _WELCOME_RE.sub("", room).strip(), goal


def original_command(text: str) -> str:
    """A command as alfworld's engine reads it: textworld's ``PddlEnv.step`` strips the ends
    and nothing else, so "Go to sofa 1" or "go to sofa 1." is not "go to sofa 1"."""
    return text.strip()


def normalize_command(text: str) -> str:
    """A command as the engine spells them: no reasoning blocks, lower case, single spaces.

    Also drops a leading ``>`` prompt marker and a trailing full stop, which
    language models often add. This is orchenv's ``command_matching="lenient"`` (and the
    role views' rule); alfworld itself only strips the ends (``original_command``).
    """
    text = strip_reasoning(text).strip().lower()
    text = text.removeprefix(">").strip().rstrip(".").strip()
    return " ".join(text.split())


class ALFWorldEnv(OrchestrationEnv):
    """Complete an ALFWorld household task by typing text commands.

    ## Description
    One episode is one ALFWorld game: a room with receptacles (countertop 1,
    fridge 1, ...) and objects, and a task of one of ALFWorld's six types
    (pick_and_place_simple, look_at_obj_in_light, pick_clean_then_place_in_recep,
    pick_heat_then_place_in_recep, pick_cool_then_place_in_recep,
    pick_two_obj_and_place). The engine is alfworld's TextWorld PDDL backend
    (textworld ``PddlEnv`` with alfworld's ``AlfredDemangler`` / ``AlfredInfos``
    wrappers), in process. Games: the full ALFWorld set when ``data_dir`` or the
    ``ALFWORLD_DATA`` variable points at it (``json_2.1.1/{train,valid_seen,
    valid_unseen}``), else the small set bundled with orchenv (three games per task
    type: two in ``train``, one in ``valid_unseen``; written by
    ``orchenv.envs.alfworld.authoring``), or the ``game_files`` given. There is no
    agent pool in this view: ``info["calls"]`` is always empty and every cost is 0
    (``orchenv.envs.alfworld.roles`` has the views with agents).

    ## Action format
    One text command, e.g. ``go to fridge 1``, ``take apple 1 from countertop 1``,
    ``heat apple 1 with microwave 1``, ``use desklamp 1``. By default it is matched as
    alfworld matches it (``command_matching="original"``): textworld strips the ends and
    needs the admissible command exactly, so ``> Go to fridge 1.`` does nothing.
    ``command_matching="lenient"`` (orchenv's earlier rule, a departure that raises
    success for chatty policies) first removes ``<think>`` blocks, a leading ``>``, a
    trailing full stop, case and repeated spaces. A command outside
    ``info["admissible_commands"]`` is still
    sent to the engine, which answers "Nothing happens." and leaves the game as
    it was; the step counts, ``info["invalid_action"]`` is True,
    ``info["parse_error"]`` suggests the closest admissible command and
    ``format_penalty`` (default 0) is added to the reward. Commands longer than
    ``max_command_chars`` are answered "Nothing happens." without reaching the
    engine. Nothing the policy types raises.

    ## Observation
    ``observation_mode="raw"`` (default): the engine's text exactly as alfworld's own
    text env returns it: at reset the game's opening (the
    ``-= Welcome to TextWorld, ALFRED! =-`` banner, the room, ``Your task is to: ...``),
    after a command its feedback; ``info["messages"]`` is that text as one user message.
    ``observation_mode="chat"`` (orchenv's prompt, a named departure): the task
    sentence, the latest feedback (at reset: the room description without banner and
    task line), ``Step k of N`` and the admissible commands, after a system message with
    the rules; with ``history > 0`` the last commands and their feedback too. A command
    outside the admissible list gets only the engine's "Nothing happens." (as in ALFWorld;
    the notice other orchenv envs add is off, ``shows_invalid_notice = False``), while
    ``info["parse_error"]`` says why.

    ``info`` carries what alfworld's env requests from textworld (``EnvInfos(won=True,
    admissible_commands=True, extras=["gamefile"])``, plus ``"expert_plan"`` with an
    expert), under the same keys, one game instead of a batch: ``won``,
    ``admissible_commands`` (``help`` included), ``extra.gamefile`` (the game's path
    after a reset, None after a command, as alfworld's ``AlfredInfos`` leaves it) and,
    with ``expert`` set, ``extra.expert_plan`` (also in ``info["privileged"]``:
    for imitation learning and tests, not for policies). ``info["feedback"]`` is the
    engine's text of the step in every mode; ``goal``, ``task_type`` and ``task_id``
    are orchenv's.

    ## Rewards
    The engine's: 1.0 on the step that completes the task, else 0.0 (plus
    ``format_penalty`` on a step whose command was not admissible).

    ## Episode end
    ``terminated`` when the task is complete (``info["won"]``); ``truncated`` when
    ``max_turns`` commands (default 50, as in ALFWorld's evaluations) pass without
    completing it. The last ``info`` holds ``correct`` (= won), ``task_id`` (the
    game's id), ``final_answer`` (the last command), ``turns`` and
    ``metrics["success"]`` (1.0 when won).

    ## Arguments
    - ``data_dir``: an ALFWorld data folder (overrides ``ALFWORLD_DATA``).
    - ``game_files``: explicit ``game.tw-pddl`` paths, each beside its
      ``traj_data.json`` (an empty list is a ``DataError``).
    - ``task_types``: names or ALFWorld's ids 1-6 to keep (default: all six).
    - ``expert``: ``None``, ``"planner"`` or ``"handcoded"``: adds alfworld's expert's
      plan to ``info["privileged"]``.
    - ``observation_mode``: ``"raw"`` (default, alfworld's text) or ``"chat"``.
    - ``command_matching``: ``"original"`` (default, alfworld's) or ``"lenient"``.
    - ``history``: previous steps shown in the chat observation (default 0; needs
      ``observation_mode="chat"``).
    - ``max_command_chars``: longer commands never reach the engine (default 1,000).
    - ``choice_slots``: the size of the discrete action set (default 16; see below).
    - ``sealed_games``: how many games a sealed env (the shared argument `sealed`, a
      board's secret) generates for its split (default 20; ``sealed.py``). A sealed env plays
      games drawn under the secret, not the bundled ones, so ``data_dir`` and ``game_files``
      are refused with it; ``info["extra.gamefile"]`` shows the opaque task id.

    ## Discrete actions
    ``action_choices()`` (for ``orchenv.discrete`` and ``orchenv audit``; ``choices.py``):
    ``choice_slots`` slots holding the admissible commands grouped by verb (take, move,
    put, open, close, heat, cool, clean, slice, use, toggle, then go, examine, look,
    inventory; the engine's order within a verb; ``help`` left out), ``None`` past the
    last. The bundled games never have more than 14 such commands; a room with more than
    ``choice_slots`` loses its last ones (raise it for the full ALFWorld data).
    ``audit_strategies()`` names the shortcuts the audit must find clearly worse than the
    best response. ``observation_features()`` adds, per slot, what its command says
    against the goal line and the transcript (its verb, whether it names the goal's object
    or destination, goes somewhere unexplored since the hands last changed, advances the
    goal or goes toward it), then what is in hand and what the goal asks for
    (``choices.command_features``; read from the text the agent was shown only).

    ``reset(options={"task_id": ...})`` plays that game (from any split),
    ``{"task_type": ...}`` draws a game of that type, ``{"task_index": i}`` the i-th
    game of the split (of that type, with ``task_type``). An empty game list (no
    game in the split, or none of the task type) is a ``DataError`` before the
    engine starts.

    ``fork()`` copies the episode by replaying its commands on a fresh engine
    (the C planner state cannot be copied); it costs one game load plus the
    replayed steps. ``close()`` hands the engine back.

    ## Shared arguments
    - ``split``: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"``; aliases: ``"test"`` and
      alfworld's ``"eval_out_of_distribution"`` are ``valid_unseen``, ``"validation"`` and
      ``"eval_in_distribution"`` are ``valid_seen``.
    - ``max_turns``: commands per episode (default 50).
    - ``format_penalty``: added when a command was not admissible (default 0.0, as in ALFWorld).

    ## Version history
    - v0: initial version. Since the one-shape refactor the horizon argument is
      ``max_turns`` (it was ``max_steps``); ``format_penalty`` (default 0) and ``info["metrics"]`` are new; a
      ``task_index`` out of range is an ``IndexError`` (it was a ``ConfigError``).
      Rewards and the horizon rule are unchanged.
      Issue 16: ``observation_mode`` (default ``"raw"``, alfworld's text; the former
      observation is ``"chat"``) and ``command_matching`` (default ``"original"``; the
      former rule is ``"lenient"``); ``info`` adds ``feedback``, ``extra.gamefile`` and,
      with an expert, ``extra.expert_plan``; the split aliases ``eval_in_distribution``
      and ``eval_out_of_distribution``.
      Issue 37: ``sealed_games``; a sealed env (shared argument `sealed`) plays games
      drawn under the board's secret (``sealed.py``); public episodes unchanged.
    """

    _shared_attrs: ClassVar[tuple[str, ...]] = ("_pool", "_task_source", "_catalog")
    #: the original protocol answers an inadmissible command with "Nothing happens." only
    shows_invalid_notice: ClassVar[bool] = False

    #: defaults for the shared arguments (``OrchestrationEnv`` documents them)
    shared_defaults = {
        "max_turns": 50,
    }

    #: the learner acts alone on tasks of its own (passing one of these is an error)
    unused_shared_arguments = NO_POOL_OWN_TASKS

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        game_files: Sequence[str | os.PathLike[str]] | None = None,
        task_types: Sequence[str | int] | None = None,
        expert: str | None = None,
        observation_mode: str = "raw",
        command_matching: str = "original",
        history: int = 0,
        max_command_chars: int = 1000,
        choice_slots: int = DEFAULT_SLOTS,
        sealed_games: int = SEALED_GAMES,
        **shared: Unpack[SharedArguments],
    ) -> None:
        super().__init__(**shared)
        if (
            isinstance(sealed_games, bool)
            or not isinstance(sealed_games, int)
            or not 1 <= sealed_games <= MAX_SEALED_GAMES
        ):
            raise ConfigError(
                f"sealed_games must be an int from 1 (an empty game list hangs alfworld) to "
                f"{MAX_SEALED_GAMES} (each is checked by alfworld's planner), "
                f"got {str(sealed_games)[:40]}"
            )
        if self._sealed is not None and (data_dir is not None or game_files is not None):
            raise ConfigError(
                "a sealed ALFWorld env plays games generated under the board's secret "
                "(envs/alfworld/sealed.py): drop data_dir / game_files (they would be public)"
            )
        self.sealed_games = sealed_games
        if choice_slots < 1:
            raise ConfigError(f"choice_slots must be >= 1, got {choice_slots}")
        self.choice_slots = int(choice_slots)
        if expert is not None and expert not in EXPERTS:
            raise UnknownNameError("ALFWorld expert", str(expert), EXPERTS)
        if history < 0 or max_command_chars < 1:
            raise ConfigError("history must be >= 0 and max_command_chars >= 1")
        if observation_mode not in OBSERVATION_MODES:
            raise UnknownNameError(
                "ALFWorld observation_mode", str(observation_mode), OBSERVATION_MODES
            )
        if command_matching not in COMMAND_MATCHING:
            raise UnknownNameError(
                "ALFWorld command_matching", str(command_matching), COMMAND_MATCHING
            )
        if history and observation_mode != "chat":
            raise ConfigError(
                f"history={history} shows past steps in orchenv's chat prompt; the raw "
                'observation is the engine\'s text only: pass observation_mode="chat" too'
            )
        self.observation_mode = observation_mode
        self.command_matching = command_matching
        self.data_dir = data_dir
        self.game_files = None if game_files is None else game_file_list(game_files)
        self.task_types = None if task_types is None else normalize_task_types(task_types)
        self.expert = expert
        #: the skill reference's private planner engine and what it has replayed
        self._shadow_engine: ALFWorldEngine | None = None
        self._shadow: tuple[str, list[str], EngineState] | None = None
        self.history = history
        self.max_command_chars = max_command_chars
        self._catalog: GameCatalog | None = None
        self._engine: ALFWorldEngine | None = None
        # episode state
        self.game: GameInfo | None = None
        self.goal = ""
        self.state: EngineState | None = None
        self.steps: list[tuple[str, str]] = []  # (command, feedback)
        self._room = ""

    # -- games ----------------------------------------------------------------------------
    @property
    def catalog(self) -> GameCatalog:
        """Every game the env can find (built on first use; shared by copies and forks)."""
        if self._catalog is None:
            if self._sealed is not None:
                # issue 37: games drawn under the board's secret, in a private cache folder
                split = real_split(self.split)
                root = sealed_game_root(self._sealed, split, self.sealed_games)
                self._catalog = GameCatalog({split: scan_split(root, split)}, "sealed", None)
            else:
                self._catalog = GameCatalog.build(
                    data_dir=self.data_dir, game_files=self.game_files
                )
        return self._catalog

    def _build_task_source(self) -> GameTasks:
        return GameTasks(self.catalog, self.task_types)

    @property
    def room_description(self) -> str:
        """What the game's opening text says about the room (without the task line)."""
        return self._room

    def pick_task(self, options: Mapping[str, Any]) -> Task:
        """The episode's game: ``options["task_id"]``, else one of ``options["task_type"]``
        (the ``task_index``-th, or drawn with ``np_random``), else as every env does."""
        if "task_type" not in options or "task_id" in options:
            return super().pick_task(options)
        (kind,) = normalize_task_types([options["task_type"]])
        source = self.task_source
        assert isinstance(source, GameTasks)
        index = options.get("task_index")
        if index is None:
            index = self.np_random.integers(source.size(self.split, kind))
        return source.get(self.split, int(index), kind)

    # -- observation ----------------------------------------------------------------------
    def _messages(self) -> list[Message]:
        assert self.state is not None
        if self.observation_mode == "raw":
            return [{"role": "user", "content": self.state.feedback}]
        parts = [f"Your task is to: {self.goal}"]
        shown = self.steps[-self.history :] if self.history else []
        if shown:
            lines = [f"> {command}\n{feedback}" for command, feedback in shown]
            parts.append("Recent steps:\n" + "\n".join(lines))
        latest = self.steps[-1][1] if self.steps else self._room
        parts.append(f"Observation: {latest}")
        commands = "\n".join(f"- {c}" for c in self.state.admissible_commands)
        parts.append(
            f"Step {min(self.turn + 1, self.max_turns)} of {self.max_turns}. "
            f"Admissible commands:\n{commands}"
        )
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(max_turns=self.max_turns)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _observation_info(self) -> dict[str, Any]:
        assert self.state is not None and self.game is not None
        extra: dict[str, Any] = {
            "feedback": self.state.feedback,
            "admissible_commands": list(self.state.admissible_commands),
            "won": self.state.won,
            # a sealed game's path names the private cache: the opaque id stands for it
            "extra.gamefile": self.state.gamefile
            if self._sealed is None
            else self.public_task_id(),
            "goal": self.goal,
            "task_type": self.game.task_type,
        }
        if self.expert is not None:
            extra["extra.expert_plan"] = list(self.state.expert_plan)
            extra["privileged"] = {"expert_plan": list(self.state.expert_plan)}
        return extra

    # -- episode ----------------------------------------------------------------------------
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.task = self.pick_task(options)
        self.game = self.task.meta["game"]
        if self._engine is None:
            self._engine = ALFWorldEngine(self.game.path, expert=self.expert)
        else:
            self._engine.switch(self.game.path)
        self.state = self._engine.reset()
        self._room, self.goal = split_intro(self.state.feedback)
        self.steps = []
        return {}

    def _apply(self, action: str) -> Outcome:
        assert self.state is not None and self._engine is not None
        admissible = self.state.admissible_commands
        error = None
        if len(action) > self.max_command_chars:
            command = action[:60] + "..."
            error = (
                f"the command has {len(action)} characters; commands are short phrases such as "
                f"{admissible[0]!r} (at most {self.max_command_chars} characters)."
            )
            self.state = EngineState(
                NOTHING_HAPPENS, admissible, self.state.won, 0.0, self.state.expert_plan
            )
        else:
            if self.command_matching == "lenient":
                command = normalize_command(action)
            else:
                command = original_command(action)
            if command not in admissible:
                error = self._command_error(command, admissible)
            self.state = self._engine.step(command)
        self.steps.append((command, self.state.feedback))
        self.transcript.append(
            {"turn": self.turn, "role": "environment", "text": self.state.feedback}
        )
        won = self.state.won
        return Outcome(reward=1.0 if won else 0.0, done=won, error=error)

    def _summary(self) -> dict[str, Any]:
        assert self.state is not None
        won = self.state.won
        return {
            "correct": won,
            "final_answer": self.steps[-1][0] if self.steps else None,
            "metrics": {"success": float(won)},
        }

    @staticmethod
    def _command_error(command: str, admissible: Sequence[str]) -> str:
        if not command:
            return "the command is empty; reply with one of the admissible commands."
        lenient = normalize_command(command)
        if lenient in admissible:  # only case, '>', a full stop or spacing differ
            hint = (
                f" Did you mean {lenient!r}? Commands are matched exactly, as in alfworld "
                '(command_matching="lenient" would accept this one).'
            )
        else:
            close = difflib.get_close_matches(command, list(admissible), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
        return (
            f"{command[:80]!r} is not an admissible command now (the engine answers "
            f"{NOTHING_HAPPENS!r}); copy one from the list, e.g. {admissible[0]!r}.{hint}"
        )

    # -- discrete actions (orchenv.discrete, orchenv audit) -------------------------------
    def action_choices(self) -> list[str | None]:
        """The admissible commands in fixed slots (see "Discrete actions" above)."""
        if self.state is None:
            return [None] * self.choice_slots
        return command_choices(self.state.admissible_commands, self.choice_slots)

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Shortcuts that must score clearly below the best response (``choices.py``)."""
        return command_shortcuts()

    def observation_features(self) -> np.ndarray:
        """Per choice slot, what its command says against the goal line and the transcript
        (verb, names the goal's object or receptacle, an unexplored place, a step that
        advances the goal), then the episode's state (in hand, changed, placed; what the
        goal asks for): ``choices.command_features``. Nothing privileged is read."""
        if self.state is None:
            size = self.choice_slots * len(SLOT_FEATURES) + len(STATE_FEATURES)
            return np.zeros(size, dtype=np.float32)
        features = command_features(self.goal, self.steps, self.action_choices())
        return np.array(features, dtype=np.float32)

    # -- helpers --------------------------------------------------------------------------
    def demo_action(self, rng: np.random.Generator) -> str:
        """A random admissible command (``"look"`` before the first reset)."""
        if self.state is None:
            return "look"
        commands = self.state.admissible_commands
        return commands[int(rng.integers(len(commands)))]

    # -- the audit's skill reference (issue 25) ---------------------------------------------
    #: ALFWorld's skill is grounding: typing the command that advances the task. A
    #: calibration, not a paper number: at s=0.25 the skill reference wins 0.75 +- 0.22 of the
    #: bundled games within 50 commands (16 episodes, docs/alfworld.md), about the 71% the
    #: ReAct paper (Yao et al. 2023) reports for its best LLM prompt on ALFWorld; ALFWorld's
    #: own text agent BUTLER (26-37%) lies between s=0.1 (0.19) and s=0.25
    realistic_skill: ClassVar[float | None] = 0.25
    realistic_skill_source: ClassVar[str] = (
        "orchenv's calibration (docs/alfworld.md): at s=0.25 the skill reference wins about "
        "as often as an LLM agent on ALFWorld (ReAct's 71%, Yao et al. 2023)"
    )

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """Skilled: the next command of alfworld's planner expert (privileged; replanned from
        the current state). Unskilled: a uniformly random admissible command (``help``
        left out), which does not depend on the game's solution."""
        if self.state is None:
            return None
        commands = [c for c in self.state.admissible_commands if c != "help"]
        if skilled:
            plan = self._skill_plan()
            if plan and plan[0] in self.state.admissible_commands:
                return plan[0]
        return commands[int(rng.integers(len(commands)))] if commands else "look"

    def _skill_plan(self) -> list[str]:
        """The planner expert's plan from the current state: the env's own expert when it
        is the planner, else a private planner engine that replays this episode's commands
        (kept between calls, so each decision replays only the new commands)."""
        assert self.state is not None and self.game is not None
        if self.expert == "planner":
            return list(self.state.expert_plan)
        commands = [command for command, _ in self.steps]
        shadow = self._shadow
        if shadow is None or shadow[0] != self.game.path or commands[: len(shadow[1])] != shadow[1]:
            if self._shadow_engine is None:
                self._shadow_engine = ALFWorldEngine(self.game.path, expert="planner")
            else:
                self._shadow_engine.switch(self.game.path)
            state = self._shadow_engine.reset()
            shadow = (self.game.path, [], state)
        path, done, state = shadow
        engine = self._shadow_engine
        assert engine is not None
        for command in commands[len(done) :]:
            state = engine.step(command)
            done = [*done, command]
        self._shadow = (path, done, state)
        return list(state.expert_plan)

    def expert_plan(self) -> list[str]:
        """alfworld's expert's next commands from here (needs ``expert=...``)."""
        if self.expert is None:
            raise ConfigError('expert_plan() needs ALFWorldEnv(expert="planner") (or "handcoded")')
        if self.state is None:
            raise EnvStateError("expert_plan() before reset(); call env.reset() first")
        return list(self.state.expert_plan)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._shadow_engine is not None:
            self._shadow_engine.close()
            self._shadow_engine = None
        self._shadow = None
        super().close()
