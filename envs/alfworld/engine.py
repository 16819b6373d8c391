"""A thin adapter around ALFWorld's TextWorld PDDL engine.

The engine is alfworld's own stack, in process (no subprocess, no thread):
textworld's ``PddlEnv`` (fast-downward applies the PDDL actions, checks the goal
and plans) under alfworld's ``AlfredDemangler`` (readable names such as
"apple 1"), ``AlfredInfos`` (the game file in the state) and, on request,
``AlfredExpert`` (the planner's or the hand-coded expert's next commands). This
module only adds what an RL environment needs around it:

* **Recycling of engine instances.** Every ``PddlEnv`` loads a private copy of
  fast-downward's shared library, and a copy cannot be unloaded (it stays
  mapped, about 1 MB of memory each). A process that makes thousands of envs
  or forks would grow without bound, so idle engine stacks go to a
  process-wide free list when an engine is closed or garbage collected, and new
  engines take one from there before loading another copy (preferably one
  that holds their game already, which skips parsing the game again).
* **One lock around every engine call.** textworld's PDDL-to-SAS translation
  sets module globals, ``sys.argv`` and ``sys.stdout`` while it runs, and its text
  generation parses with module-level tatsu parsers that keep per-parse state;
  calls are serialised process-wide so threaded vector envs cannot interleave
  them (they are pure Python and hold the GIL anyway), and ``sys.argv`` is
  restored after a load.
* **Fork by replay, when needed.** The C engine state cannot be copied, so ``replay()``
  loads the same game on a fresh engine and replays the commands of the episode so far.
  The PDDL engine is deterministic, so the copy is in the same state. ``copy.deepcopy``
  (what ``env.fork()`` uses) defers that: the copy knows the last state and the commands,
  and loads and replays only when it is sent a command that changes the game.
* **No engine call for a command that does nothing.** textworld's ``PddlEnv.step`` strips
  the command and looks it up among the current state's commands; one that is not there
  yields "Nothing happens." and the same state again (same admissible commands, same
  ``won``, the planner's same plan from the same state; ``extra.gamefile`` None as after
  any step). That result is built here without the engine, which is what makes probing an
  inadmissible command on a fork free. Not with the hand-coded expert: it updates its own
  memory on every observation, so its commands always reach the engine.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchenv.error import DependencyError

log = logging.getLogger(__name__)

#: the experts alfworld provides (``AlfredExpertType``)
EXPERTS = ("planner", "handcoded")

_ENGINE_LOCK = threading.RLock()
_ACQUIRE_LOCK = threading.Lock()
#: idle engine stacks, each an ``_Slot``; every slot's ``PddlEnv`` holds its own copy of
#: fast-downward's library. deque.append is atomic, so finalizers release without a lock.
_IDLE: deque[_Slot] = deque()


class _Slot:
    """A wrapper stack around one ``PddlEnv``, the expert it was built for, the game it holds."""

    __slots__ = ("expert", "loaded", "stack")

    def __init__(self, expert: str | None, stack: Any) -> None:
        self.expert = expert
        self.stack = stack
        self.loaded: str | None = None


def _textworld_modules() -> tuple[Any, Any, Any, Any, Any]:
    """(textworld, PddlEnv, AlfredDemangler, AlfredInfos, AlfredExpert), imported on first use."""
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import (
            AlfredDemangler,
            AlfredExpert,
            AlfredInfos,
        )
        from textworld.envs import PddlEnv
    except ImportError as exc:
        raise DependencyError(
            "alfworld", "alfworld", "orch/ALFWorld-v0 (the ALFWorld engine)"
        ) from exc
    _memoize_textworld_parsing()
    return textworld, PddlEnv, AlfredDemangler, AlfredInfos, AlfredExpert


#: parse trees kept per textworld parser (the grammar's templates and the queries of one set
#: of games are a few thousand strings)
PARSE_CACHE_SIZE = 16_384


def _memoize_textworld_parsing() -> None:
    """Parse each of textworld's grammar templates and logic queries once per process.

    Every command's feedback is written by textworld's text grammar, which re-parses the
    same template strings and conjunctive queries with tatsu on every step: about four
    fifths of a step's CPU here (cProfile of 40 commands). The parse tree depends only on
    the string and the rule, so it is kept (``functools.lru_cache``), and each call still
    converts it with a fresh converter into fresh objects, exactly as before (the
    derivation sets each symbol's context, so symbols are never shared between calls).
    Installed once, on the modules' ``_parse_and_convert`` functions; a call whose
    arguments cannot be hashed parses as before."""
    import textworld.logic as logic
    from textworld.envs.pddl import textgen

    for module, converter in ((textgen, textgen._Converter), (logic, logic._ModelConverter)):
        original = module._parse_and_convert
        if getattr(original, "_orchenv_memoized", False):
            continue
        module._parse_and_convert = _memoized(module._PARSER, converter, original)


def _memoized(parser: Any, converter: Any, original: Any) -> Any:
    @functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
    def tree(args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...]) -> Any:
        return parser.parse(*args, **dict(kwargs))

    def parse_and_convert(*args: Any, **kwargs: Any) -> Any:
        try:
            model = tree(args, tuple(sorted(kwargs.items())))
        except TypeError:  # unhashable arguments
            return original(*args, **kwargs)
        return converter().walk(model)

    parse_and_convert._orchenv_memoized = True  # type: ignore[attr-defined]
    parse_and_convert.original = original  # type: ignore[attr-defined]
    parse_and_convert.cache_info = tree.cache_info  # type: ignore[attr-defined]
    return parse_and_convert


def _new_slot(expert: str | None) -> _Slot:
    textworld, pddl_env_cls, demangler, infos_wrapper, expert_wrapper = _textworld_modules()
    request = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    stack = infos_wrapper(demangler(pddl_env_cls(request), shuffle=False))
    if expert is not None:
        stack = expert_wrapper(stack, expert_type=expert)
    return _Slot(expert, stack)


#: engine stacks this process may build to keep games loaded: a reset onto another game takes
#: an idle stack that holds it (no load: about 0.2 s of parsing and translation per game
#: here) or, below this many, a new stack, instead of reloading its own
MAX_SLOTS = 64
_SLOTS_MADE = 0


def _acquire(expert: str | None, gamefile: str, *, grow: bool = False) -> _Slot:
    """An idle slot for ``expert`` holding ``gamefile`` already; else, with ``grow`` and
    fewer than ``MAX_SLOTS`` built, a new one (which keeps its game loaded once released);
    else any idle slot for ``expert``; else a new one."""
    global _SLOTS_MADE
    with _ACQUIRE_LOCK:
        idle = []
        while True:  # drain with atomic pops: a finalizer may append meanwhile
            try:
                idle.append(_IDLE.popleft())
            except IndexError:
                break
        fits = [slot for slot in idle if slot.expert == expert]
        chosen = next((s for s in fits if s.loaded == gamefile), None)
        if chosen is None and not (grow and _SLOTS_MADE < MAX_SLOTS) and fits:
            # reuse the slot idle longest (the front of the queue)
            chosen = fits[0]
        _IDLE.extend(slot for slot in idle if slot is not chosen)
        if chosen is None:
            _SLOTS_MADE += 1
    return chosen if chosen is not None else _new_slot(expert)


def _release(slot: _Slot) -> None:
    _IDLE.append(slot)


@contextlib.contextmanager
def _translation_guard() -> Iterator[None]:
    """Hold the engine lock and undo the PDDL translation's ``sys.argv`` rewrite."""
    with _ENGINE_LOCK:
        argv = sys.argv
        try:
            yield
        finally:
            sys.argv = argv


def idle_engines() -> int:
    """How many recycled engine instances wait for reuse (for tests and diagnostics)."""
    return len(_IDLE)


@dataclass(frozen=True)
class EngineState:
    """What the engine reports after a reset or a command.

    ``gamefile`` is the engine's ``extra.gamefile`` as alfworld's ``AlfredInfos`` sets it:
    the game's path after a reset and ``None`` after a command (``AlfredInfos`` only fills it
    in on reset, and textworld starts a fresh state on every step).
    """

    feedback: str
    admissible_commands: tuple[str, ...]
    won: bool
    score: float
    expert_plan: tuple[str, ...] = ()
    gamefile: str | None = None


class ALFWorldEngine:
    """One ALFWorld game (a ``game.tw-pddl`` file) in alfworld's TextWorld engine.

    Arguments:
        gamefile: path of the ``game.tw-pddl`` file (its folder holds ``traj_data.json``,
            which the hand-coded expert reads).
        expert: ``None``, ``"planner"`` (fast-downward replans from the current state
            after every command; deterministic) or ``"handcoded"`` (alfworld's
            heuristic expert; it draws from Python's global ``random`` module, so its
            suggestions are not reproducible).
    """

    def __init__(self, gamefile: str, *, expert: str | None = None) -> None:
        if expert is not None and expert not in EXPERTS:
            raise ValueError(f"expert must be None or one of {EXPERTS}, got {expert!r}")
        self.gamefile = str(gamefile)
        self.expert = expert
        #: the commands that reached the game since the reset (what a replay repeats)
        self.history: list[str] = []
        #: the latest state (None before the first reset)
        self.last: EngineState | None = None
        self._slot: _Slot | None = None
        self._finalizer: weakref.finalize | None = None
        #: a deferred copy's commands still to replay on its own engine (``__deepcopy__``)
        self._pending: list[str] | None = None

    @property
    def _stack(self) -> Any:
        return None if self._slot is None else self._slot.stack

    def switch(self, gamefile: str) -> None:
        """Play another game file on the same engine instance (``reset()`` starts it)."""
        self.gamefile = str(gamefile)

    def reset(self) -> EngineState:
        """Start the game from its initial state (loading it first if needed: a stack that
        holds another game goes back to the idle list with it loaded, and one that holds
        this game, or a new one, is taken: ``MAX_SLOTS``)."""
        if self._slot is not None and self._slot.loaded != self.gamefile:
            assert self._finalizer is not None
            self._finalizer()  # back to the idle list, its game still loaded
            self._slot = None
        if self._slot is None:
            self._slot = _acquire(self.expert, self.gamefile, grow=True)
            self._finalizer = weakref.finalize(self, _release, self._slot)
        slot = self._slot
        with _translation_guard():
            if slot.loaded != self.gamefile:
                slot.loaded = None  # a failed load leaves nothing half-loaded behind
                slot.stack.load(self.gamefile)
                slot.loaded = self.gamefile
            state = slot.stack.reset()
        self.history = []
        self._pending = None
        self.last = self._state(state, 0.0)
        return self.last

    def step(self, command: str) -> EngineState:
        """Send one command; a command the game does not know yields "Nothing happens."."""
        last = self.last
        if last is None:
            raise RuntimeError("ALFWorldEngine.step() before reset()")
        if self.expert != "handcoded" and command.strip() not in last.admissible_commands:
            # what PddlEnv.step answers, without the engine (module docstring)
            self.last = EngineState(
                "Nothing happens.", last.admissible_commands, last.won, float(last.won),
                last.expert_plan, None,
            )  # fmt: skip
            return self.last
        if self._pending is not None:
            self._materialize()
        assert self._stack is not None
        self.history.append(command)
        try:
            with _ENGINE_LOCK:
                state, score, _done = self._stack.step(command)
        except Exception:
            # AlfredExpert's hand-coded expert raises after the game already advanced
            # (timeout, no subgoal left); the game state is intact, only the advice is lost.
            if self.expert != "handcoded":
                raise
            log.debug("alfworld's hand-coded expert gave up after %r", command, exc_info=True)
            state = self._stack.state
            state["extra.expert_plan"] = []
            score = 1.0 if state["won"] else 0.0
        self.last = self._state(state, float(score))
        return self.last

    def _materialize(self) -> None:
        """Load this deferred copy's game on an engine of its own and replay its commands."""
        pending, last = self._pending or [], self.last
        self._pending = None
        self.reset()
        for command in pending:
            self.step(command)
        assert self.last is not None and last is not None
        if (self.last.admissible_commands, self.last.won) != (last.admissible_commands, last.won):
            raise RuntimeError(f"replaying {self.gamefile} did not reach the copied state")
        self.last = last  # the copied step's own result (its feedback, gamefile, score)

    def replay(self) -> ALFWorldEngine:
        """A fresh engine in the same state: same game, the same commands replayed."""
        clone = ALFWorldEngine(self.gamefile, expert=self.expert)
        if self.last is not None:
            clone.reset()
            for command in self.history if self._pending is None else self._pending:
                clone.step(command)
        return clone

    def __deepcopy__(self, memo: dict[int, Any]) -> ALFWorldEngine:
        """A deferred copy: the same game, state and history; it loads and replays on its
        own engine only when a command must reach the game (module docstring)."""
        clone = ALFWorldEngine(self.gamefile, expert=self.expert)
        if self.last is not None:
            clone.last = self.last
            clone.history = list(self.history if self._pending is None else self._pending)
            clone._pending = list(clone.history)
        return clone

    def close(self) -> None:
        """Hand the engine instance back for reuse (a later ``reset()`` takes one again)."""
        if self._finalizer is not None:
            self._finalizer()
        self._slot = None
        self._finalizer = None
        self._pending = None
        self.last = None

    # -- helpers ---------------------------------------------------------------
    def _state(self, state: Any, score: float) -> EngineState:
        plan = state.get("extra.expert_plan") if self.expert is not None else None
        return EngineState(
            feedback=str(state["feedback"]),
            admissible_commands=tuple(state["admissible_commands"]),
            won=bool(state["won"]),
            score=score,
            expert_plan=tuple(plan or ()),
            gamefile=state.get("extra.gamefile"),
        )
