"""The discrete views of ``orch/ALFWorld-v0`` and ``orch/ALFWorldRoles-v0``, and the audit's
shortcuts for both.

ALFWorld's admissible commands change with every state, so the single-learner view maps them
into a fixed number of slots: the commands grouped by verb in ``VERB_ORDER`` (handling
objects first, then moving, then looking; the engine's own order within a group, ``help``
left out), the first ``slots`` of them, ``None`` for the empty slots. Putting the object
commands first keeps them in the list when a large room has more commands than slots (the
bundled games have at most 14 besides ``help``; the full ALFWorld data has rooms with many
more: raise ``choice_slots``). The role view's choices are its four roles. Only the
admissible commands and the transcript are read, never alfworld's expert plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orchenv.envs.alfworld.agents import ROLES

#: command verbs in slot order; unknown verbs come after these, ``help`` is never offered
VERB_ORDER = (
    "take", "move", "put", "open", "close", "heat", "cool", "clean", "slice", "use", "toggle",
    "go", "examine", "look", "inventory",
)  # fmt: skip
#: default number of command slots (the bundled games need 14)
DEFAULT_SLOTS = 16
LEFT_OUT = frozenset({"help"})

Strategy = Callable[[Any], str]


def ordered_commands(admissible: Sequence[str]) -> list[str]:
    """The admissible commands grouped by verb (``VERB_ORDER``), stable within a group."""
    rank = {verb: i for i, verb in enumerate(VERB_ORDER)}

    def key(item: tuple[int, str]) -> tuple[int, int]:
        index, command = item
        return rank.get(command.split(" ", 1)[0], len(VERB_ORDER)), index

    kept = [(i, c) for i, c in enumerate(admissible) if c not in LEFT_OUT]
    return [c for _, c in sorted(kept, key=key)]


def command_choices(admissible: Sequence[str], slots: int) -> list[str | None]:
    """``slots`` choices: the ordered admissible commands, then ``None``."""
    commands = ordered_commands(admissible)[:slots]
    return [*commands, *([None] * (slots - len(commands)))]


def role_text(role: str) -> str:
    return f"<role>{role}</role>"


def role_choices() -> list[str | None]:
    """One choice per role, in ``ROLES`` order; all available in every state."""
    return [role_text(role) for role in ROLES]


# -- shortcuts ----------------------------------------------------------------------------
def command_shortcuts() -> dict[str, Strategy]:
    """The named shortcuts of the single-learner view (``ALFWorldEnv.audit_strategies``)."""

    def always_look(env: Any) -> str:
        """Type "look" every turn."""
        return "look"

    def visit_all(env: Any) -> str:
        """Go to every receptacle in turn, never touch an object."""
        gone = {command for command, _ in env.steps}
        goes = [c for c in env.state.admissible_commands if c.startswith("go to ")]
        fresh = [c for c in goes if c not in gone]
        return (fresh or goes or ["look"])[0]

    def engine_first(env: Any) -> str:
        """The engine's first admissible command (alphabetical) every turn."""
        return str(env.state.admissible_commands[0])

    return {
        "always-look": always_look,
        "visit-every-receptacle": visit_all,
        "engine-first": engine_first,
    }


def role_shortcuts() -> dict[str, Strategy]:
    """The named shortcuts of the role view (``ALFWorldControllerEnv.audit_strategies``)."""

    def round_robin(env: Any) -> str:
        """Planner, navigator, interactor, evaluator, in turn, whatever happened."""
        return role_text(ROLES[env.turn % len(ROLES)])

    def actors_only(env: Any) -> str:
        """Navigator and interactor in turn; never plan or evaluate."""
        return role_text(("navigator", "interactor")[env.turn % 2])

    def plan_once(env: Any) -> str:
        """Planner once, then navigator and interactor in turn."""
        if env.turn == 0:
            return role_text("planner")
        return role_text(("navigator", "interactor")[(env.turn - 1) % 2])

    return {
        "round-robin": round_robin,
        "actors-only": actors_only,
        "plan-once-then-actors": plan_once,
    }
