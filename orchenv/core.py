"""``OrchestrationEnv``: the base every orchenv environment shares; it owns the episode.

What is the same in every env lives here, once: the text spaces, the common arguments
(pool, task source, split, ``max_turns``, ``format_penalty``), lazy building of the pool
and the tasks (no I/O in ``__init__``), normalising the controller's action, the turn
counter and the transcript, the "your previous reply could not be used" notice, the
horizon rule, metering of agent calls, the info schema (``orchenv.info``) and ``fork()``.

A subclass writes only its protocol:

- ``_reset_episode(options) -> dict``: pick the task (``self.pick_task(options)``), set up
  its state, return env-specific info for the first step;
- ``_apply(action) -> Outcome``: parse and apply one action (always a clean ``str``);
  never raise on malformed text, return ``Outcome(error=...)`` instead;
- ``_messages() -> list[Message]``: the controller's chat messages for the next turn
  (the base renders them as the one-string observation and adds the notice);
- ``_summary() -> dict``: the episode's result (``final_answer``, ``correct`` or
  ``score``, ``metrics``), called once when the episode ends;
- ``demo_action(rng)``: a random well-formed action (tests, docs, ``env-random``).

Episode end, one rule for every env
-----------------------------------
``terminated=True`` when the controller's action was itself terminal (it answered,
accepted, stopped, bought, finished the task) or left nothing to do; ``truncated=True``
when turn ``max_turns`` passed without such a decision (the episode was cut short). Both
end the episode; the final state is graded either way and ``info`` carries the summary.

The one exception is declared in one place, the class attribute ``horizon_is_terminal``:
an env whose paper makes the last turn itself terminal (a fixed-horizon MDP whose last
state is graded as the answer, e.g. seed 000's three turns) reports ``terminated`` at
``max_turns``, so learners do not bootstrap a value past a horizon that is part of the task.

A failed step
-------------
When a step raises (a live backend failed, a server timed out), the episode is marked failed:
``failure`` says why, later ``step()`` calls raise ``EnvStateError``, and the caller retries
the episode whole from ``reset()`` (the eval harness does, serving the calls that already
succeeded from the episode's journal: ``orchenv.eval.journal``). Resuming mid-step is not
offered: a half-applied action has no well-defined state to resume from.

Format penalty
--------------
An action the env cannot use (``Outcome.error``) uses up its turn, changes nothing, and
adds ``format_penalty`` to that step's reward; the next observation repeats the request
with the error.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

import gymnasium as gym
import numpy as np

from orchenv.error import ConfigError, EnvStateError, NoTaskSourceError
from orchenv.info import StepInfo
from orchenv.pool import (
    NO_AGENTS,
    AgentPool,
    CallContext,
    Completion,
    Message,
    UsageMeter,
    make_pool,
    seal_backends,
)
from orchenv.schema import show
from orchenv.seeding import seal_task_id, sealed_int
from orchenv.spaces import AnyText
from orchenv.tasks import Task, TaskSource, make_task_source, pick_task, sealed_task_source

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: what the notice after an unusable action says after the parse error
DEFAULT_FORMAT_REMINDER = "Reply again in the required format."


@dataclass
class Outcome:
    """What one controller action did (returned by a subclass's ``_apply``).

    Attributes:
        reward: the step's reward before any format penalty.
        done: the action was terminal (final answer, accept, stop, buy, task finished).
        error: why the action could not be used; ``None`` for a usable action. The base
            adds ``format_penalty``, sets ``info["invalid_action"]`` and shows the notice.
        info: env-specific info for this step.
    """

    reward: float = 0.0
    done: bool = False
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


#: the longest action (in characters) an env reads; a longer one is refused unparsed, so no
#: parser ever sees more. 256 Ki characters is about 64k tokens: room for a long reasoning
#: trace, far below what a hostile controller could send. Envs override ``max_action_chars``.
MAX_ACTION_CHARS = 262_144


def normalize_action(action: Any, max_chars: int = MAX_ACTION_CHARS) -> tuple[str, str | None]:
    """``(text, refusal)``: the controller's action as a clean ``str`` for the env, and why it
    cannot be used at all (``None`` when it can be parsed).

    Done once, before any state changes, so nothing downstream has to guard against odd
    input: lone surrogates (which no encoder accepts; a valid pair is joined) and NUL
    characters (which C libraries, file names and subprocess arguments reject) become
    U+FFFD. A non-``str`` action, or one longer than ``max_chars``, is refused: the env then
    sees only a short marker (so its parsers never scan megabytes) and the step reports the
    refusal as its ``parse_error``.
    """
    if not isinstance(action, str):
        marker = "" if action is None else f"<non-text action of type {type(action).__name__}>"
        return marker, f"the action must be a str, got {type(action).__name__}"
    if len(action) > max_chars:
        return (
            f"<action of {len(action):,} characters, not read>",
            f"action longer than {max_chars:,} characters ({len(action):,}); it was not read. "
            "Reply with a shorter action.",
        )
    try:
        action.encode("utf-8")
    except UnicodeEncodeError:
        action = action.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if "\x00" in action:
        action = action.replace("\x00", "\ufffd")
    return str.__str__(action), None  # a plain str, also for str subclasses


#: characters shown escaped in observations: C0 controls but tab, newline and carriage
#: return; DEL and C1 controls; bidi embeddings, overrides and isolates (issue 28: NUL and
#: ESC from a tool's output or an agent's reply reached the controller as they were)
_CONTROL_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


#: the ASCII characters of ``_CONTROL_CHARS`` (C0 controls but tab, newline and carriage
#: return, and DEL), as bytes for ``bytes.translate``
_ASCII_CONTROLS = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a character ``escape_controls`` would escape.

    The same answer as ``_CONTROL_CHARS.search(text) is not None``, about 4x faster on
    ASCII text (every prompt and draft of the math envs): there the class is
    ``_ASCII_CONTROLS``, which ``bytes.translate`` deletes in C. Other text goes through
    the regex (issue 40: the search was a tenth of a MathRoute step)."""
    if text.isascii():
        data = text.encode("ascii")
        return len(data.translate(None, _ASCII_CONTROLS)) != len(data)
    return _CONTROL_CHARS.search(text) is not None


#: ``has_controls`` answers kept for texts seen again (a cached system prompt is in every
#: observation): at most ``_SEEN_SIZE`` texts of at most ``_SEEN_CHARS`` characters
_SEEN: dict[str, bool] = {}
_SEEN_SIZE = 256
_SEEN_CHARS = 16_384


def _has_controls_seen(text: str) -> bool:
    """``has_controls``, remembered for plain ``str`` texts up to ``_SEEN_CHARS``."""
    if type(text) is not str or len(text) > _SEEN_CHARS:
        return has_controls(text)
    found = _SEEN.get(text)
    if found is None:
        found = has_controls(text)
        if len(_SEEN) >= _SEEN_SIZE:
            _SEEN.clear()
        _SEEN[text] = found
    return found


def escape_controls(text: str) -> str:
    """``text`` with control and bidi-override characters written as escapes (``\\x1b``,
    ``\\u202e``), so what a model or a terminal shows is what the text says."""
    if not has_controls(text):
        return text
    return _CONTROL_CHARS.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


class SharedArguments(TypedDict, total=False):
    """The arguments every ``OrchestrationEnv`` takes (documented once, in its docstring).

    An env declares only its own arguments and passes these on untouched:
    ``def __init__(self, *, own=1, **shared: Unpack[SharedArguments]) -> None:
    super().__init__(**shared)``; its defaults for them are its ``shared_defaults``.
    """

    pool: str | AgentPool | None
    task_source: str | TaskSource | None
    task_source_kwargs: Mapping[str, Any] | None
    split: str
    max_turns: int
    format_penalty: float
    backend: str | None
    backend_kwargs: Mapping[str, Any] | None
    max_obs_chars: int
    render_mode: str | None
    sealed: str | None


#: the base's defaults for the shared arguments (an env overrides some in ``shared_defaults``)
SHARED_DEFAULTS: dict[str, Any] = {
    "pool": None,
    "task_source": None,
    "task_source_kwargs": None,
    "split": "train",
    "max_turns": 1,
    "format_penalty": 0.0,
    "backend": None,
    "backend_kwargs": None,
    "max_obs_chars": 1_000_000,
    "render_mode": None,
    "sealed": None,
}

#: ``unused_shared_arguments`` of an env whose learner acts alone (no agent pool, so no
#: backends) on tasks the env brings itself (no task source)
NO_POOL_OWN_TASKS = ("pool", "task_source", "task_source_kwargs", "backend", "backend_kwargs")


def arguments_for(function: Callable[..., Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that ``function`` takes as keyword arguments (a ``**shared``
    parameter takes the shared arguments, ``SharedArguments``).

    Builds a collaborator from the same arguments (e.g. a role game from its env's locals).
    Envs no longer need it for the base: they pass ``**shared`` on (see ``SharedArguments``).
    """
    names = []
    for name, param in inspect.signature(function).parameters.items():
        if param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.append(name)
        elif param.kind is param.VAR_KEYWORD:
            names += list(SHARED_DEFAULTS)
    return {name: values[name] for name in names if name in values}


def _replace_text(value: Any, old: str, new: str) -> Any:
    """``value`` with ``old`` written as ``new`` in every string inside it (dicts, lists,
    tuples); other values unchanged. A sealed env's info and observation go through it."""
    if isinstance(value, str):
        return value.replace(old, new) if old in value else value
    if isinstance(value, dict):
        return {k: _replace_text(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_text(v, old, new) for v in value]
    if type(value) is tuple:  # not a named tuple: its fields stay as they are
        return tuple(_replace_text(v, old, new) for v in value)
    return value


#: the heading of the section ``shared_arguments_section`` adds to an env's docstring
SHARED_DEFAULTS_HEADING = "## Shared argument defaults"


def shared_arguments_section(cls: type[OrchestrationEnv]) -> str:
    """The section an env's docstring gets (at its end): its defaults for the shared
    arguments and the ones it does not use (``OrchestrationEnv`` documents them)."""
    defaults = {**SHARED_DEFAULTS, **cls.shared_defaults}
    taken = [n for n in SHARED_DEFAULTS if n not in cls.unused_shared_arguments]
    lines = [
        SHARED_DEFAULTS_HEADING,
        "The arguments every orchenv env takes are documented once, in "
        "``orchenv.core.OrchestrationEnv``; this env's defaults for them:",
        "",
        *(f"- {name} = {defaults[name]!r}" for name in taken),
    ]
    if cls.unused_shared_arguments:
        lines += [
            "",
            f"Not used here (passing one is an error): {', '.join(cls.unused_shared_arguments)}.",
        ]
    return "\n".join(lines)


class OrchestrationEnv(gym.Env[str, str], ABC):
    """Text-in, text-out environment around an agent pool (see the module docstring).

    Shared arguments: every env takes these keyword arguments (``SharedArguments``), and they
    are documented here only. An env's ``## Arguments`` names its own arguments; its
    ``shared_defaults`` give its defaults for these (its docstring ends with them, under
    "## Shared argument defaults"), and an optional ``## Shared arguments`` section says only
    what is particular to the env (the presets its ``pool`` accepts, its split names). An env
    that has no use for some of them (no agent pool, tasks of its own) lists them in
    ``unused_shared_arguments``; passing one is a ``ConfigError``.

    Args:
        pool: a preset name (``orchenv.pool.list_presets()``), a pool file, an ``AgentPool``,
            or ``None`` for envs where the learner acts alone.
        task_source: a registered task-source name or a ``TaskSource``.
        task_source_kwargs: arguments for a named task source.
        split: the split episodes draw tasks from.
        max_turns: the horizon, in controller turns (see "Episode end" above).
        format_penalty: added to the reward of a step whose action could not be used.
        backend, backend_kwargs: override the pool's backends (e.g. ``"openai"`` with
            ``{"base_url": ...}``).
        max_obs_chars: longer observations keep their head and tail.
        render_mode: ``None`` or ``"ansi"`` (the transcript).
        sealed: ``None`` (public tasks), or a board's sealed-plan secret (a hex string from
            ``orchenv.eval.board.sealed_plan``; never the board's key). The secret is mixed
            into the task source's seed, the task draw and the seed of every seeded backend
            of the pool (env-built pools too), so sealed tasks and the pool's luck on them
            cannot be enumerated from public code; every public ``info`` field and the
            observation name the task only by an opaque id (``orchenv.seeding.seal_task_id``);
            reset options that choose a task are refused.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012
    #: attributes that ``fork()`` shares instead of copying (backends, datasets, indexes)
    _shared_attrs: ClassVar[tuple[str, ...]] = ("_pool", "_task_source")
    #: appended to the notice that follows an unusable action
    format_reminder: ClassVar[str] = DEFAULT_FORMAT_REMINDER
    #: whether the next observation carries that notice; envs that reproduce an original
    #: protocol whose own feedback already says so (ALFWorld's "Nothing happens.") turn it off
    shows_invalid_notice: ClassVar[bool] = True
    #: True when the paper's horizon is part of the task (the last turn is terminal):
    #: reaching ``max_turns`` is then ``terminated``; otherwise it is ``truncated``
    horizon_is_terminal: ClassVar[bool] = False
    #: the longest action the env reads (``normalize_action``): longer ones are refused unread
    max_action_chars: ClassVar[int] = MAX_ACTION_CHARS
    #: this env's defaults for the shared arguments (the others keep ``SHARED_DEFAULTS``)
    shared_defaults: ClassVar[Mapping[str, Any]] = {}
    #: shared arguments this env has no use for: passing one is a ``ConfigError``
    unused_shared_arguments: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check ``shared_defaults`` / ``unused_shared_arguments`` name shared arguments, and
        add the env's defaults for them to its docstring (a "## Shared arguments" section)."""
        super().__init_subclass__(**kwargs)
        for attr in ("shared_defaults", "unused_shared_arguments"):
            unknown = sorted(set(getattr(cls, attr)) - set(SHARED_DEFAULTS))
            if unknown:
                raise TypeError(
                    f"{cls.__name__}.{attr} names {unknown}, which are not shared arguments "
                    f"({', '.join(SHARED_DEFAULTS)})"
                )
        own = "shared_defaults" in vars(cls) or "unused_shared_arguments" in vars(cls)
        if own and cls.__doc__ and SHARED_DEFAULTS_HEADING not in cls.__doc__:
            cls.__doc__ = inspect.cleandoc(cls.__doc__) + "\n\n" + shared_arguments_section(cls)

    def __init__(self, **shared: Unpack[SharedArguments]) -> None:
        unknown = sorted(set(shared) - set(SHARED_DEFAULTS))
        if unknown:  # a misspelt argument: name it, with the closest known one
            name = unknown[0]
            close = difflib.get_close_matches(name[:100], list(SHARED_DEFAULTS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"{type(self).__name__}() got an unexpected keyword argument {show(name)}{hint} "
                f"({len(unknown)} unknown in all); the shared ones are "
                f"{', '.join(SHARED_DEFAULTS)}, its own are in its docstring"
            )
        unused = [name for name in shared if name in self.unused_shared_arguments]
        if unused:
            raise ConfigError(
                f"{type(self).__name__} does not use {', '.join(unused)} (its "
                "unused_shared_arguments); see its docstring for what it takes"
            )
        args: dict[str, Any] = {**SHARED_DEFAULTS, **self.shared_defaults, **shared}
        pool, task_source = args["pool"], args["task_source"]
        task_source_kwargs, split = args["task_source_kwargs"], args["split"]
        max_turns, format_penalty = args["max_turns"], args["format_penalty"]
        backend, backend_kwargs = args["backend"], args["backend_kwargs"]
        max_obs_chars, render_mode = args["max_obs_chars"], args["render_mode"]
        sealed = args["sealed"]
        if sealed is not None and not (
            isinstance(sealed, str) and re.fullmatch(r"[0-9a-fA-F]{32,1024}", sealed)
        ):
            raise ConfigError(
                "sealed must be a board's sealed-plan secret (32 to 1,024 hex digits "
                f"from orchenv.eval.board.sealed_plan), got {show(sealed)}"
            )
        #: the sealed-plan secret (``sealed``); None on public tasks
        self._sealed: str | None = sealed
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode {render_mode!r} is not supported; use one of {self.metadata['render_modes']}"
            )
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"max_turns must be an int >= 1, got {max_turns!r}")
        self.render_mode = render_mode
        self.observation_space = AnyText(max_length=max_obs_chars)
        self.action_space = AnyText(max_length=self.max_action_chars)
        self.max_obs_chars = max_obs_chars
        self.max_turns = max_turns
        self.format_penalty = float(format_penalty)
        if not math.isfinite(self.format_penalty):  # NaN would reach every summary (issue 28)
            raise ConfigError(f"format_penalty must be a finite number, got {format_penalty!r}")
        self.split = split
        self._pool_arg = pool
        self._task_source_arg = task_source
        self._task_source_kwargs = dict(task_source_kwargs or {})
        self._backend = backend
        self._backend_kwargs = dict(backend_kwargs or {})
        self._pool: AgentPool | None = None
        self._task_source: TaskSource | None = None
        self._started = False
        self._done = False
        #: why the episode failed (an exception out of a step, e.g. a backend error), else None
        self.failure: str | None = None
        self.turn = 0
        self.transcript: list[dict[str, Any]] = []
        self.notice = ""
        self.meter = UsageMeter()
        self._step_meter = UsageMeter()
        self._step_calls: list[dict[str, Any]] = []
        self._consulted: list[Completion] = []
        #: every call ``consult()`` made this episode (they count against ``calls_left``)
        self.consulted: list[Completion] = []
        self.task: Task | None = None

    # -- the protocol a subclass writes ------------------------------------------------
    @abstractmethod
    def _reset_episode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Start an episode (set ``self.task``); return env-specific info for ``reset``."""

    @abstractmethod
    def _apply(self, action: str) -> Outcome:
        """Parse and apply one action; never raise on malformed text."""

    @abstractmethod
    def _messages(self) -> list[Message]:
        """The controller's chat messages for the next turn (without the notice)."""

    @abstractmethod
    def _summary(self) -> dict[str, Any]:
        """The episode's result: ``final_answer``, ``correct`` or ``score``, ``metrics``."""

    @abstractmethod
    def demo_action(self, rng: np.random.Generator) -> str:
        """A random well-formed action for the current state.

        Used by the shared test suite (determinism, ``fork()``), by docs, by the
        ``env-random`` controller and by smoke tests of new envs.
        """

    # -- optional: a discrete view for classical RL and the audit (orchenv.discrete) -------
    def action_choices(self) -> list[str | None]:
        """The discrete action set in the current state: the canonical text of each choice.

        The list has the same length in every state of an env instance; ``None`` marks a
        choice unavailable now (masked). Computed without privileged information: it is what
        a learned policy picks from (``orchenv.discrete.ChoiceActions``) and what
        ``orchenv audit`` searches over.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no discrete action set (action_choices); "
            "see docs/adding-an-env.md"
        )

    def audit_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Named shortcut strategies ``orchenv audit`` must find clearly worse than the best
        response (never call an agent, always the same agent, reject everything, ...). Each
        maps the current state to an action text without privileged information."""
        return {}

    def control_strategies(self) -> dict[str, Callable[[OrchestrationEnv], str]]:
        """Honest observation-only plans ``orchenv audit`` reports as controls beside the skill
        reference (e.g. the scripted plan in other words): never flagged, not in the gap."""
        return {}

    #: the controller ``orchenv run`` / ``orchenv eval`` play when none is named
    default_controller: ClassVar[str] = "env-random"
    #: the skill level ``s`` in [0, 1] that a learner reading only the observation realistically
    #: reaches (``orchenv audit`` compares shortcuts with the skill reference at this level);
    #: ``None``: the env names none (the audit then uses ``DEFAULT_REALISTIC_SKILL``)
    realistic_skill: ClassVar[float | None] = None
    #: where ``realistic_skill`` comes from (e.g. "seed 000 reports verifier accuracy 0.8")
    realistic_skill_source: ClassVar[str] = ""

    def skill_action(self, skilled: bool, rng: np.random.Generator) -> str | None:
        """The next action of ``orchenv audit``'s *skill reference* (a policy of skill ``s``).

        The audit calls this once per decision and passes ``skilled=True`` with probability
        ``s``: then return what the paper's skill does here *with the privileged truth* (a
        verifier that knows whether the draft is right, the role that fits the task, the
        context the next role needs, stopping exactly when the draft is right). With
        ``skilled=False`` return the no-skill default (what a policy without that skill does:
        a fixed or random choice that does not depend on the truth). The action text must be
        one a learner could emit (valid, well formed). ``None`` (the default): the env has no
        skill reference and the audit says so.
        """
        return None

    def observation_features(self) -> np.ndarray:
        """Env-specific numbers for ``orchenv.discrete.ObservationFeatures`` (empty: none)."""
        return np.zeros(0, dtype=np.float32)

    def _observation_info(self) -> dict[str, Any]:
        """Env-specific info that describes the next observation (e.g. its phase)."""
        return {}

    # -- lazily built collaborators (no I/O in __init__) --------------------------------
    def _build_pool(self) -> AgentPool:
        """The agent pool, built on first use from the ``pool`` argument."""
        if self._pool_arg is None:
            return cast(AgentPool, NO_AGENTS)  # the learner acts alone; NoAgents refuses calls
        return make_pool(self._pool_arg, backend=self._backend, backend_kwargs=self._backend_kwargs)

    def _build_task_source(self) -> TaskSource:
        """The task source, built on first use from the ``task_source`` argument."""
        if self._task_source_arg is None:
            raise NoTaskSourceError(f"{type(self).__name__} has no task source")
        if self._sealed is not None:
            return sealed_task_source(self._task_source_arg, self._task_source_kwargs, self._sealed)
        return make_task_source(self._task_source_arg, **self._task_source_kwargs)

    @property
    def pool(self) -> AgentPool:
        if self._pool is None:
            if self._sealed is not None and isinstance(self._pool_arg, AgentPool):
                raise ConfigError(
                    "a sealed env builds its own pool (a preset name or pool file): a pool "
                    "object passed in is shared, and its backends cannot be sealed for it alone"
                )
            pool = self._build_pool()
            if self._sealed is not None and isinstance(pool, AgentPool):
                seal_backends(pool, self._sealed)
            self._pool = pool
        return self._pool

    def public_task_id(self) -> str:
        """The id ``info["task_id"]`` shows: the task's id, or its opaque stand-in in a sealed
        env (``sealed``; only the board's secret maps it back: ``orchenv.seeding``)."""
        if self.task is None:
            return ""
        if self._sealed is None:
            return self.task.id
        return seal_task_id(self.task.id, self._sealed)

    @property
    def task_source(self) -> TaskSource:
        if self._task_source is None:
            source = self._build_task_source()
            self.split = source.resolve_split(self.split)  # "train" on a test-only source
            source.check_split(self.split)
            self._task_source = source
        return self._task_source

    def valid_agents(self) -> list[str]:
        """Agents the controller may call now (drives action masks)."""
        return list(self.pool.names)

    # -- state that outlives an episode ----------------------------------------------------
    def lifetime_state(self) -> dict[str, Any] | None:
        """State that carries from one episode to the next (e.g. a usage ledger), or ``None``.

        The evaluation harness logs it after each episode and restores it on resume, so a
        resumed run is exact without knowing any env's internals.
        """
        return None

    def load_lifetime_state(self, state: Mapping[str, Any] | None) -> None:
        """Restore what ``lifetime_state`` returned (``None``: start fresh)."""

    # -- Gymnasium API --------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._started, self._done = True, False
        self.failure = None
        self.turn = 0
        self.transcript = []
        self.notice = ""
        self.meter = UsageMeter()
        self._step_meter = UsageMeter()
        self._step_calls = []
        self._consulted = []
        self.consulted = []
        self.task = None
        extra = self._reset_episode(dict(options or {}))
        if self.task is not None:
            extra.setdefault("task_id", self.public_task_id())
        return self._finish(extra, invalid=False, parse_error=None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise EnvStateError("step() called before reset(); call env.reset() first")
        if self.failure is not None:
            raise EnvStateError(
                f"step() called after the episode failed ({self.failure[:200]}); call reset() "
                "to start it again"
            )
        if self._done:
            raise EnvStateError(
                "step() called after the episode ended (terminated or truncated); call reset()"
            )
        action, refused = normalize_action(action, self.max_action_chars)
        self._step_meter = UsageMeter()
        self._step_calls = []
        for completion in self._consulted:  # calls the controller made since the last step
            self._step_meter.record(completion)
            self._step_calls.append({**self._call_record(completion), "consult": True})
        self.turn += 1  # consults are priced as calls made at this step (call_charge)
        consult_charge = sum(float(self.call_charge(c)) for c in self._consulted)
        consulted, self._consulted = bool(self._consulted), []
        self.transcript.append({"turn": self.turn, "role": "controller", "text": action})
        try:
            outcome = self._apply(action)
        except BaseException as exc:  # a backend failed mid-step: the episode cannot go on
            self._done = True
            self.failure = f"{type(exc).__name__}: {exc}"
            raise
        if refused is not None:  # the env saw a marker; the step reports why
            outcome.error = refused
        reward = float(outcome.reward) - consult_charge
        if consulted:
            outcome.info["consult_charge"] = consult_charge
        if outcome.error is not None:
            reward += self.format_penalty
            self.notice = outcome.error or "malformed reply."
        else:
            self.notice = ""
        at_horizon = self.turn >= self.max_turns
        terminated = bool(outcome.done) or (at_horizon and self.horizon_is_terminal)
        truncated = at_horizon and not terminated
        self._done = terminated or truncated
        extra: dict[str, Any] = {}
        if self.task is not None:
            extra["task_id"] = self.public_task_id()
        extra.update(outcome.info)
        if self._done:
            extra.update(self._summary())
            extra["turns"] = self.turn
        obs, info = self._finish(
            extra, invalid=outcome.error is not None, parse_error=outcome.error
        )
        return obs, reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(
            f"[turn {e.get('turn')}] {e.get('role')}: {e.get('text', '')}" for e in self.transcript
        )

    # -- helpers for subclasses -------------------------------------------------------------
    def call_agent(
        self, name: str, messages: Sequence[Message], context: CallContext | None = None
    ) -> Completion:
        """Call a pool agent, meter it for this step and the episode, log it in the transcript."""
        if context is None:
            context = CallContext(task=self.task, turn=self.turn)
        completion = self.pool.call(name, messages, context)
        self.meter.record(completion)
        self._step_meter.record(completion)
        self._step_calls.append(self._call_record(completion))
        self.transcript.append(
            {
                "turn": self.turn,
                "role": name,
                "text": completion.text,
                "cost_usd": completion.cost_usd,
            }
        )
        return completion

    def pick_task(self, options: Mapping[str, Any]) -> Task:
        """The episode's task (``orchenv.tasks.pick_task``: ``task``, ``task_id``,
        ``task_index`` options, else a draw from ``self.split`` with ``np_random``)."""
        if self._sealed is None:
            return pick_task(self.task_source, self.split, options, self.np_random)
        chosen = sorted(k for k in ("task", "task_id", "task_index") if k in options)
        if chosen:
            raise ConfigError(
                f"a sealed env draws its own tasks: reset option(s) {', '.join(chosen)} are "
                "refused (the board assigns sealed tasks; nobody chooses them)"
            )
        draw = int(self.np_random.integers(2**63))  # the run's seed, mixed with the secret
        rng = np.random.default_rng(sealed_int(self._sealed.encode(), "orchenv-task-draw", draw))
        return pick_task(self.task_source, self.split, {}, rng)

    @property
    def is_last_turn(self) -> bool:
        """Whether the turn about to be played is the last one before the horizon."""
        return self.turn + 1 >= self.max_turns

    def turn_line(self, unit: str = "Turn") -> str:
        """``(Turn t of T.)`` for the turn about to be played."""
        return f"({unit} {self.turn + 1} of {self.max_turns}.)"

    @staticmethod
    def render_messages(messages: Sequence[Message]) -> str:
        """Chat messages as the one-string observation (contents joined by blank lines)."""
        return "\n\n".join([m["content"] for m in messages])

    # -- one price for every call (issue 38) ----------------------------------------------------
    def call_charge(self, completion: Completion) -> float:
        """The reward one agent call costs (subtracted from the return), whichever path made it.

        An env whose reward charges its routed calls (MathRoute's ``-lambda_a``, MultihopQA's
        token penalty) returns that charge here for a call of ``completion.agent`` with
        ``completion``'s tokens, and its routed path uses the same method, so a call made
        through ``consult()`` costs exactly what a routed one does. The base env subtracts
        it from the reward of the step after the consult (``info["consult_charge"]``).
        Default 0: the env's reward prices calls only through their dollar cost (a budget
        read from ``self.meter``, which counts consulted calls too) or not at all.
        """
        return 0.0

    def calls_left(self) -> int | None:
        """Agent calls this episode may still make under the env's per-episode call limit,
        routed and consulted together (``self.consulted``); ``None``: the env has no call
        limit. ``consult()`` refuses a call when none is left, and an env with a limit reads
        this before each routed call."""
        return None

    def consult_context(self, name: str) -> CallContext:
        """The ``CallContext`` a consulted call of ``name`` gets: the task and the turn. An env
        whose routed calls pass more (a simulated role backend that needs the task's
        privileged meta) overrides it, so a consult reaches the agent as a routed call does."""
        return CallContext(task=self.task, turn=self.turn)

    def consult(self, name: str, messages: Sequence[Message]) -> Completion:
        """Call a pool agent on the controller's behalf (a verifier, self-consistency samples).

        For controllers that use pool agents outside the env's action protocol, e.g. a
        cascade whose verifier is an agent. The call is charged to the episode exactly as a
        routed call of the same agent and tokens: its cost, tokens and ``agent_calls``; the
        env's reward charge (``call_charge``, taken from the next step's reward and shown in
        its ``info["consult_charge"]``); the env's per-episode call limit (``calls_left``:
        raises ``EnvStateError`` when no call is left). It is reported in the next step's
        ``info["calls"]`` with ``"consult": True`` and in its ``constraint_costs``.
        """
        if not self._started or self._done:
            raise EnvStateError("consult() needs an episode in progress; call reset() first")
        left = self.calls_left()
        if left is not None and left <= 0:
            raise EnvStateError(
                f"consult({show(name)}) refused: {type(self).__name__}'s per-episode call limit "
                "is used up (routed and consulted calls count alike); answer or stop instead"
            )
        completion = self.pool.call(name, messages, self.consult_context(name))
        self.meter.record(completion)
        self._consulted.append(completion)
        self.consulted.append(completion)
        self.transcript.append(
            {"turn": self.turn, "role": f"{name} (consulted)", "text": completion.text}
        )
        return completion

    def constraint_costs(self) -> np.ndarray:
        """Per-agent call indicator (counts) for this step, in pool order (weakest first)."""
        names = self.pool.names
        costs = np.zeros(len(names), dtype=np.float32)
        calls = self._step_meter.calls
        if calls:  # most steps call nobody (issue 40: zeros, then the agents called)
            for i, name in enumerate(names):
                count = calls.get(name, 0)
                if count:
                    costs[i] = count
        return costs

    # -- internals ------------------------------------------------------------------------------
    @staticmethod
    def _call_record(completion: Completion) -> dict[str, Any]:
        return {
            "agent": completion.agent,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "token_source": completion.token_source,
            "cost_usd": completion.cost_usd,
            "latency_s": completion.latency_s,
            "cached": completion.cached,
            # server usage checked against the agent's own tokenizer (live backends only)
            **({"metering": completion.meta["metering"]} if "metering" in completion.meta else {}),
            # cut at max_tokens (the summaries report the share: orchenv.runner)
            **({"truncated": True} if completion.meta.get("finish_reason") == "length" else {}),
        }

    def _with_notice(self, messages: list[Message]) -> list[Message]:
        """The messages with the unusable-action notice appended to the last user message."""
        if not self.notice or not self.shows_invalid_notice:
            return messages
        text = f"Your previous reply could not be used: {self.notice} {self.format_reminder}"
        out = [dict(m) for m in messages]
        for m in reversed(out):
            if m.get("role") == "user":
                m["content"] = f"{m['content']}\n\n{text}"
                break
        else:
            out.append({"role": "user", "content": text})
        return out  # type: ignore[return-value]

    def _truncate_obs(self, obs: str) -> str:
        if len(obs) <= self.max_obs_chars:
            return obs
        marker = "\n[... truncated ...]\n"
        keep = self.max_obs_chars - len(marker)
        return obs[: keep // 2] + marker + obs[-(keep - keep // 2) :]

    def _finish(
        self, extra: dict[str, Any], *, invalid: bool, parse_error: str | None
    ) -> tuple[str, dict[str, Any]]:
        """The observation (the would-be next prompt, also at the episode's end, for logs)
        and the step's info in the schema of ``orchenv.info.StepInfo``."""
        messages = [
            {**m, "content": escape_controls(m["content"])}
            if isinstance(m.get("content"), str) and _has_controls_seen(m["content"])
            else m
            for m in self._with_notice(self._messages())
        ]
        obs = self._truncate_obs(self.render_messages(messages))
        info: StepInfo = {
            "messages": messages,
            "turn": self.turn,
            "cost_usd": self._step_meter.cost_usd,
            "tokens": {
                "prompt": self._step_meter.prompt_tokens,
                "completion": self._step_meter.completion_tokens,
            },
            "episode_cost_usd": self.meter.cost_usd,
            "agent_calls": dict(self.meter.calls),
            "calls": list(self._step_calls),
            "constraint_costs": self.constraint_costs(),
            "valid_agents": [] if self._done else self.valid_agents(),
            "invalid_action": invalid,
            "parse_error": parse_error,
        }
        # the TypedDict is a plain dict at run time: extended in place, not copied
        out: dict[str, Any] = info  # type: ignore[assignment]
        out.update(self._observation_info())
        out.update(extra)
        if self._sealed is not None and self.task is not None:  # no public field names it
            real, opaque = self.task.id, self.public_task_id()
            obs, out = _replace_text(obs, real, opaque), _replace_text(out, real, opaque)
        return obs, out

    # -- tree rollouts ----------------------------------------------------------------------------
    def fork(self) -> OrchestrationEnv:
        """An independent copy in the same state, sharing the pool's backends and the tasks.

        Stepping the copy never affects this env; identical actions from identical
        states give identical results (with simulated or replayed agents).
        """
        shared = {name: getattr(self, name, None) for name in self._shared_attrs}
        memo: dict[int, Any] = {id(v): v for v in shared.values() if v is not None}
        clone = copy.copy(self)
        clone.__dict__ = copy.deepcopy(self.__dict__, memo)
        return clone
