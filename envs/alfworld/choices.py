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

``command_features`` gives the single-learner view's ``observation_features()``: per slot,
what its command says against the goal line and what the feedback so far showed (the
grounding ALFWorld tests: which command names the goal's object or destination, which place
is unexplored, what is in hand and already heated, cooled or cleaned). Hashed n-grams of the
latest feedback alone cannot say which slot holds such a command, and the raw observation
forgets where things were seen. Written by hand: the parsing follows alfworld's fixed
feedback and goal templates, which no library exposes.
"""

from __future__ import annotations

import re
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


#: the best fixed schedule of ``coordination.search_schedules`` (prefix once, then the cycle);
#: measured in docs/alfworld.md
BEST_FIXED_SCHEDULE: tuple[tuple[str, ...], tuple[str, ...]] = (
    (),
    ("planner", "navigator", "interactor", "interactor"),
)


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

    def best_fixed(env: Any) -> str:
        """The best fixed schedule the search found (``BEST_FIXED_SCHEDULE``)."""
        prefix, cycle = BEST_FIXED_SCHEDULE
        t = env.turn
        return role_text(prefix[t] if t < len(prefix) else cycle[(t - len(prefix)) % len(cycle)])

    def blind_critique(env: Any) -> str:
        """Planner once, then every actor call followed by the evaluator's critique,
        whatever happened (navigator, evaluator, interactor, evaluator, ...): critique on a
        timer, blind to whether a command strayed."""
        if env.turn == 0:
            return role_text("planner")
        cycle = ("navigator", "evaluator", "interactor", "evaluator")
        return role_text(cycle[(env.turn - 1) % len(cycle)])

    return {
        "blind-critique": blind_critique,
        "round-robin": round_robin,
        "actors-only": actors_only,
        "plan-once-then-actors": plan_once,
        "best-fixed-schedule": best_fixed,
    }


# -- features of the single-learner view -----------------------------------------------------
#: what ``command_features`` says about each command slot, in order
SLOT_FEATURES = (
    "verb-take", "verb-move", "verb-open", "verb-go", "verb-use",
    "names-goal-object", "names-goal-receptacle", "go-unvisited",
    "advances-goal", "goes-toward-goal",
)  # fmt: skip
#: what ``command_features`` says about the episode, after the slots
STATE_FEATURES = (
    "holding", "holding-goal-object", "held-object-changed", "placed-goal-objects",
    "goal-heat", "goal-cool", "goal-clean", "goal-look", "goal-two",
)  # fmt: skip
#: goal-line words that ask for a change of the object, by the command verb that makes it
CHANGE_WORDS = {
    "heat": frozenset({"hot", "heat", "heated", "warm"}),
    "cool": frozenset({"cool", "cooled", "cold", "chilled"}),
    "clean": frozenset({"clean", "cleaned", "wash", "washed", "rinse", "rinsed"}),
}
LOOK_WORDS = frozenset({"look", "examine"})
_WORD_RE = re.compile(r"[a-z]+")
_ENTITY_RE = re.compile(r"\ba ([a-z]+ \d+)")
_ARRIVE_RE = re.compile(r"^You arrive at ([a-z]+ \d+)\.")
_PICK_RE = re.compile(r"^You pick up the ([a-z]+ \d+) from")
_MOVE_RE = re.compile(r"^You (?:move|put) the ([a-z]+ \d+) (?:to|in|on|into) the ([a-z]+ \d+)")
_CHANGE_RE = re.compile(r"^You (heat|cool|clean) the ([a-z]+ \d+) using")
_USE_VERBS = frozenset({"heat", "cool", "clean", "use", "slice", "toggle"})
_COMMAND_RE = re.compile(
    r"^(?P<verb>[a-z]+)(?: to)? (?P<first>[a-z]+ \d+)"
    r"(?: (?:from|to|in|on|into|with) (?P<second>[a-z]+ \d+))?$"
)


def kind(entity: str) -> str:
    """The type of an entity name: ``"apple"`` for ``"apple 1"``."""
    return entity.rsplit(" ", 1)[0]


class Episode:
    """What the transcript says so far: where the agent is and has been, what it holds and
    changed, where it saw which objects. Read from the engine's feedback text only (what
    the agent was shown), never from the game's hidden state or alfworld's expert."""

    def __init__(self, goal: str, steps: Sequence[tuple[str, str]]) -> None:
        said = _WORD_RE.findall(goal.lower())
        words = set(said)
        #: ALFWorld's goal lines end with where the object goes (or the lamp to look under it)
        self.destination = said[-1] if said else ""
        self.goal_words = words - {self.destination}
        self.changes = {verb for verb, hints in CHANGE_WORDS.items() if words & hints}
        self.look = bool(words & LOOK_WORDS)
        self.two = "two" in words
        self.held: str | None = None
        self.changed: set[str] = set()
        self.visited: set[str] = set()  # since the hands last changed
        self.seen: dict[str, str] = {}  # object -> receptacle it was last seen on or in
        self.placed: set[str] = set()  # goal objects the agent put on a goal receptacle
        here = None
        for _, feedback in steps:
            if match := _ARRIVE_RE.match(feedback):
                here = match.group(1)
                self.visited.add(here)
            elif match := _PICK_RE.match(feedback):
                self.held = match.group(1)
                self.seen.pop(self.held, None)
                self.placed.discard(self.held)
                self.visited = {here} if here else set()
                continue
            elif match := _MOVE_RE.match(feedback):
                obj, receptacle = match.groups()
                self.seen[obj] = receptacle
                if self.names(obj) and self.at_destination(receptacle):
                    self.placed.add(obj)
                self.held = None
                self.visited = {here} if here else set()
                continue
            elif match := _CHANGE_RE.match(feedback):
                self.changed.add(match.group(2))
                continue
            if here and "you see" in feedback and not feedback.startswith("You are"):
                for obj in _ENTITY_RE.findall(feedback.rsplit("you see", 1)[1]):
                    self.seen[obj] = here

    def names(self, entity: str | None) -> bool:
        """Whether the goal line names ``entity``'s type as the object to handle."""
        return entity is not None and kind(entity) in self.goal_words

    def at_destination(self, entity: str | None) -> bool:
        """Whether ``entity`` is of the type the goal line ends with (where the object goes,
        or the lamp of a look task)."""
        return entity is not None and kind(entity) == self.destination

    @property
    def ready(self) -> bool:
        """Holding a goal object that has had every change the goal asks for."""
        return self.names(self.held) and (not self.changes or self.held in self.changed)

    def slot(self, command: str) -> list[float]:
        """``SLOT_FEATURES`` of one command."""
        match = _COMMAND_RE.match(command)
        verb = command.split(" ", 1)[0]
        first = match.group("first") if match else None
        second = match.group("second") if match else None
        obj, receptacle = (None, first) if verb in ("go", "open", "close") else (first, second)
        target = receptacle if obj is None or verb != "use" else obj
        ready = self.ready
        toward = verb == "go" and (
            (
                self.held is None
                and any(
                    where == receptacle and self.names(o) and o not in self.placed
                    for o, where in self.seen.items()
                )
            )
            or (
                ready
                and (
                    self.at_destination(receptacle)
                    or any(
                        where == receptacle and self.at_destination(o)
                        for o, where in self.seen.items()
                    )
                )
            )
        )
        advances = (
            (verb == "take" and self.held is None and self.names(obj) and obj not in self.placed)
            or (
                verb in ("move", "put")
                and ready
                and obj == self.held
                and self.at_destination(receptacle)
            )
            or (verb == "open" and ready and self.at_destination(receptacle))
            or (
                verb in self.changes
                and obj == self.held
                and self.names(obj)
                and obj not in self.changed
            )
            or (verb == "use" and self.look and ready and self.at_destination(obj))
        )
        return [
            float(verb == "take"),
            float(verb in ("move", "put")),
            float(verb == "open"),
            float(verb == "go"),
            float(verb in _USE_VERBS),
            float(self.names(obj)),
            float(self.at_destination(target)),
            float(verb == "go" and receptacle is not None and receptacle not in self.visited),
            float(advances),
            float(toward),
        ]

    def state(self) -> list[float]:
        """``STATE_FEATURES``."""
        return [
            float(self.held is not None),
            float(self.names(self.held)),
            float(self.held is not None and self.held in self.changed),
            len(self.placed) / 2,
            float("heat" in self.changes),
            float("cool" in self.changes),
            float("clean" in self.changes),
            float(self.look),
            float(self.two),
        ]


def command_features(
    goal: str, steps: Sequence[tuple[str, str]], choices: Sequence[str | None]
) -> list[float]:
    """``SLOT_FEATURES`` of every choice slot (zeros for an empty one), then ``STATE_FEATURES``.

    Only the goal line, the commands' text and the engine's feedback so far are read (what
    the agent was shown); the grounding they name (which command mentions the goal's object
    or receptacle, which place is unexplored, what is in hand) is what ALFWorld tests.
    """
    episode = Episode(goal, steps)
    out: list[float] = []
    for command in choices:
        out += episode.slot(command) if command is not None else [0.0] * len(SLOT_FEATURES)
    return out + episode.state()
