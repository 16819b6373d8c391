"""Author the bundled ALFWorld games (``games/json_2.1.1/...``) and check them with the engine.

ALFWorld's own games come from ALFRED scenes and need a download; orchenv ships
a small set written here so the env works offline. Each game is what
``alfworld-generate`` produces from an ALFRED trajectory, built from a short
spec instead:

* ``game.tw-pddl``: JSON with alfworld's PDDL domain (``alfred.pddl``), its
  grammar (``alfred.twl2``) with the goal text filled in from alfworld's goal
  templates (``alfworld.gen.goal_library``), a PDDL problem written below
  (objects with ALFRED-style ids, receptacles at locations, object properties,
  ``canContain`` from alfworld's receptacle/object table, and the task type's
  goal formula from the goal library), ``solvable`` and the planner's
  ``walkthrough``;
* ``traj_data.json``: the task type and ``pddl_params`` (the fields alfworld's
  hand-coded expert reads) plus the goal text as the only annotation.

A game is kept only if both of alfworld's experts solve it in the engine: the
fast-downward planner (its plan becomes the walkthrough) and the hand-coded
expert. Regenerate (deterministic, overwrites the bundled files)::

    python -m orchenv.envs.alfworld.authoring [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from orchenv.envs.alfworld.engine import ALFWorldEngine
from orchenv.envs.alfworld.games import BUNDLED_ROOT, DATA_SUBDIR, GAME_FILE, TASK_TYPES, TRAJ_FILE
from orchenv.error import DataError, DependencyError

log = logging.getLogger(__name__)

LAMPS = frozenset({"DeskLamp", "FloorLamp"})
#: receptacles placed in the same spot of a room share a location (as a sink's basin and counter)
SINK_BASINS = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}

# Room layouts: the receptacle classes present, in order (repeats are separate receptacles).
KITCHEN_A = (
    "CounterTop",
    "Cabinet",
    "Cabinet",
    "Drawer",
    "Fridge",
    "Microwave",
    "SinkBasin",
    "GarbageCan",
)
KITCHEN_B = (
    "CounterTop",
    "DiningTable",
    "Cabinet",
    "Fridge",
    "Microwave",
    "SinkBasin",
    "StoveBurner",
)
KITCHEN_C = (
    "CounterTop",
    "CounterTop",
    "Cabinet",
    "Drawer",
    "Fridge",
    "Microwave",
    "SinkBasin",
    "Toaster",
)
BEDROOM_A = ("Bed", "Desk", "Drawer", "Dresser", "Shelf", "GarbageCan")
BEDROOM_B = ("Bed", "SideTable", "Drawer", "Shelf", "Dresser", "GarbageCan")
LIVING_ROOM = ("Sofa", "ArmChair", "CoffeeTable", "SideTable", "Shelf", "Drawer")
BATHROOM = ("Toilet", "SinkBasin", "CounterTop", "Cabinet", "GarbageCan", "Drawer")
# Two larger layouts seen only in valid_unseen (issue 38: more and longer test games)
KITCHEN_D = (
    "CounterTop",
    "Cabinet",
    "Cabinet",
    "Cabinet",
    "Drawer",
    "Drawer",
    "Fridge",
    "Microwave",
    "SinkBasin",
    "StoveBurner",
    "GarbageCan",
    "DiningTable",
)
OFFICE = ("Desk", "Drawer", "Drawer", "Shelf", "SideTable", "Dresser", "Bed", "GarbageCan", "Safe")


@dataclass(frozen=True)
class GameSpec:
    """One game: a room, the objects in it (class, index of the receptacle holding it), a task."""

    split: str
    scene: int  # a number that names the layout instance, like ALFRED's floor plans
    task_type: str
    target: str  # object class to handle, e.g. "Apple"
    receptacles: tuple[str, ...]
    objects: tuple[tuple[str, int], ...]
    parent: str = ""  # destination receptacle class (every task type but look_at_obj_in_light)
    toggle: str = ""  # lamp class (look_at_obj_in_light)
    template: int = 0  # which of the goal library's phrasings

    @property
    def folder(self) -> str:
        last = self.toggle if self.task_type == "look_at_obj_in_light" else self.parent
        return f"{self.task_type}-{self.target}-None-{last}-{self.scene}"

    @property
    def trial(self) -> str:
        return f"trial_orchenv_{self.scene:03d}"

    @property
    def game_id(self) -> str:
        return f"{self.split}/{self.folder}/{self.trial}"


def _s(
    kind: str,
    target: str,
    parent: str,
    room: tuple[str, ...],
    objects: Sequence[tuple[str, int]],
    **kw: Any,
) -> dict[str, Any]:
    return {
        "task_type": kind,
        "target": target,
        "parent": parent,
        "receptacles": room,
        "objects": tuple(objects),
        **kw,
    }


# Two games per task type to train on, one per task type in rooms never seen in training.
_TRAIN = [
    _s("pick_and_place_simple", "KeyChain", "Dresser", BEDROOM_A,
       [("KeyChain", 2), ("Pencil", 1), ("Book", 0), ("CellPhone", 3), ("CD", 4)]),
    _s("pick_and_place_simple", "Apple", "CounterTop", KITCHEN_A,
       [("Apple", 4), ("Mug", 0), ("Plate", 1), ("Fork", 3), ("Egg", 4), ("Potato", 7)], template=1),
    _s("look_at_obj_in_light", "Book", "", BEDROOM_A,
       [("DeskLamp", 1), ("Book", 0), ("Pen", 2), ("CellPhone", 4), ("CD", 3)], toggle="DeskLamp"),
    _s("look_at_obj_in_light", "CD", "", LIVING_ROOM,
       [("DeskLamp", 3), ("CD", 5), ("RemoteControl", 0), ("Book", 4), ("KeyChain", 2)],
       toggle="DeskLamp", template=1),
    _s("pick_clean_then_place_in_recep", "Spatula", "DiningTable", KITCHEN_B,
       [("Spatula", 0), ("Bread", 1), ("Pot", 6), ("Cup", 2), ("Tomato", 3)]),
    _s("pick_clean_then_place_in_recep", "Lettuce", "Fridge", KITCHEN_A,
       [("Lettuce", 0), ("Bowl", 1), ("Spoon", 3), ("Mug", 6), ("Apple", 7)], template=1),
    _s("pick_heat_then_place_in_recep", "Egg", "DiningTable", KITCHEN_B,
       [("Egg", 3), ("Pan", 6), ("Plate", 2), ("Bread", 0), ("Apple", 1)]),
    _s("pick_heat_then_place_in_recep", "Mug", "Cabinet", KITCHEN_A,
       [("Mug", 0), ("Potato", 4), ("Knife", 3), ("Cup", 6), ("Tomato", 7)], template=1),
    _s("pick_cool_then_place_in_recep", "Tomato", "CounterTop", KITCHEN_A,
       [("Tomato", 6), ("Lettuce", 4), ("Plate", 2), ("ButterKnife", 3), ("Bread", 0)]),
    _s("pick_cool_then_place_in_recep", "Pan", "StoveBurner", KITCHEN_B,
       [("Pan", 0), ("Pot", 2), ("Egg", 3), ("Mug", 1), ("Spatula", 5)], template=1),
    _s("pick_two_obj_and_place", "CreditCard", "ArmChair", LIVING_ROOM,
       [("CreditCard", 2), ("CreditCard", 5), ("RemoteControl", 0), ("Book", 4), ("Newspaper", 3)]),
    _s("pick_two_obj_and_place", "Pencil", "Desk", BEDROOM_A,
       [("Pencil", 4), ("Pencil", 3), ("AlarmClock", 2), ("Book", 0), ("CD", 1)], template=1),
]  # fmt: skip
_UNSEEN = [
    _s("pick_and_place_simple", "SoapBottle", "Toilet", BATHROOM,
       [("SoapBottle", 3), ("ToiletPaper", 0), ("Cloth", 2), ("SprayBottle", 5), ("Candle", 4)]),
    _s("look_at_obj_in_light", "AlarmClock", "", BEDROOM_B,
       [("DeskLamp", 1), ("AlarmClock", 4), ("Book", 0), ("KeyChain", 2), ("Pen", 3)], toggle="DeskLamp"),
    _s("pick_clean_then_place_in_recep", "SoapBar", "CounterTop", BATHROOM,
       [("SoapBar", 0), ("Cloth", 3), ("SprayBottle", 2), ("ToiletPaper", 4), ("Candle", 5)]),
    _s("pick_heat_then_place_in_recep", "Bread", "CounterTop", KITCHEN_C,
       [("Bread", 4), ("Egg", 2), ("Mug", 1), ("Spoon", 3), ("Apple", 6)]),
    _s("pick_cool_then_place_in_recep", "Cup", "Cabinet", KITCHEN_C,
       [("Cup", 0), ("Bowl", 2), ("Potato", 5), ("Fork", 3), ("Lettuce", 1)]),
    _s("pick_two_obj_and_place", "Spoon", "Drawer", KITCHEN_C,
       [("Spoon", 1), ("Spoon", 6), ("Knife", 0), ("Plate", 2), ("Tomato", 4)]),
    # issue 38: fourteen more (two or more per task type), many with the object or the
    # destination behind a door (longer plans); pick-two games in KITCHEN_D and OFFICE were
    # tried and dropped because alfworld's hand-coded expert could not solve them
    _s("pick_cool_then_place_in_recep", "Apple", "Microwave", KITCHEN_D,
       [("Apple", 11), ("Potato", 0), ("Tomato", 6), ("Mug", 1), ("Bread", 8)], template=1),
    _s("pick_heat_then_place_in_recep", "Potato", "Fridge", KITCHEN_D,
       [("Potato", 2), ("Apple", 11), ("Egg", 6), ("Cup", 0), ("Plate", 3)]),
    _s("pick_clean_then_place_in_recep", "Fork", "Drawer", KITCHEN_D,
       [("Fork", 11), ("Spoon", 4), ("Knife", 0), ("Plate", 1), ("Mug", 8)], template=1),
    _s("pick_and_place_simple", "Pen", "Drawer", OFFICE,
       [("Pen", 3), ("Pencil", 0), ("Book", 4), ("CD", 6), ("KeyChain", 5)]),
    _s("look_at_obj_in_light", "Pencil", "", OFFICE,
       [("DeskLamp", 4), ("Pencil", 1), ("Book", 0), ("CellPhone", 3), ("CD", 5)],
       toggle="DeskLamp", template=1),
    _s("pick_two_obj_and_place", "Book", "Bed", BEDROOM_B,
       [("Book", 1), ("Book", 3), ("Pen", 0), ("KeyChain", 2), ("CellPhone", 4)]),
    _s("pick_cool_then_place_in_recep", "Lettuce", "CounterTop", KITCHEN_C,
       [("Lettuce", 2), ("Tomato", 5), ("Bread", 0), ("Cup", 6), ("Egg", 3)]),
    _s("pick_heat_then_place_in_recep", "Cup", "Cabinet", KITCHEN_C,
       [("Cup", 5), ("Mug", 2), ("Bowl", 0), ("Egg", 6), ("Potato", 4)], template=1),
    _s("pick_clean_then_place_in_recep", "Cloth", "Cabinet", BATHROOM,
       [("Cloth", 5), ("SoapBar", 2), ("SprayBottle", 3), ("ToiletPaper", 0), ("Candle", 4)]),
    _s("pick_and_place_simple", "Candle", "Cabinet", BATHROOM,
       [("Candle", 5), ("Cloth", 0), ("SoapBottle", 2), ("ToiletPaper", 4), ("SprayBottle", 1)],
       template=1),
    _s("look_at_obj_in_light", "KeyChain", "", BEDROOM_B,
       [("DeskLamp", 1), ("KeyChain", 2), ("Book", 4), ("Pen", 0), ("CD", 3)], toggle="DeskLamp"),
    _s("pick_and_place_simple", "Tomato", "Fridge", KITCHEN_D,
       [("Tomato", 1), ("Apple", 0), ("Potato", 5), ("Egg", 11), ("Mug", 3)]),
    # two longer pick-two games (9 and 10 planner steps; six more were tried and dropped: the
    # hand-coded expert could not solve them)
    _s("pick_two_obj_and_place", "KeyChain", "Drawer", BEDROOM_B,
       [("KeyChain", 4), ("KeyChain", 0), ("Book", 1), ("Pen", 3), ("CD", 5)]),
    _s("pick_two_obj_and_place", "Cup", "Cabinet", KITCHEN_C,
       [("Cup", 0), ("Cup", 5), ("Bowl", 2), ("Fork", 3), ("Lettuce", 1)], template=1),
]  # fmt: skip
SPECS: tuple[GameSpec, ...] = tuple(
    GameSpec(split=split, scene=100 * (1 + (split != "train")) + i + 1, **spec)
    for split, specs in (("train", _TRAIN), ("valid_unseen", _UNSEEN))
    for i, spec in enumerate(specs)
)


# -- text of a game -------------------------------------------------------------------
def mangle(alfred_id: str) -> str:
    """ALFRED object id -> PDDL name, as alfworld's generator does (``fix_pddl_str_chars``)."""
    for char, word in (
        ("-", "_minus_"),
        ("|", "_bar_"),
        ("+", "_plus_"),
        (".", "_dot_"),
        (",", "_comma_"),
    ):
        alfred_id = alfred_id.replace(char, word)
    return alfred_id


def _xyz(*values: float) -> str:
    return "|".join(f"{v:+06.2f}" for v in values)


def _alfworld_tables() -> tuple[Any, Any]:
    try:
        import alfworld.gen.constants as constants
        import alfworld.gen.goal_library as goal_library
    except ImportError as exc:
        raise DependencyError("alfworld", "alfworld", "authoring ALFWorld games") from exc
    return constants, goal_library


def goal_text(spec: GameSpec) -> str:
    """The task sentence, from the goal library's templates for the task type."""
    _, goal_library = _alfworld_tables()
    templates = goal_library.gdict[spec.task_type]["templates"]
    template = templates[spec.template % len(templates)]
    return template.format(
        obj=spec.target.lower(), recep=spec.parent.lower(), toggle=spec.toggle.lower(), mrecep=""
    )


def problem_pddl(spec: GameSpec) -> str:
    """The PDDL problem of a game (objects, initial facts, goal)."""
    constants, goal_library = _alfworld_tables()
    receptacles, rec_locations = [], []
    for i, kind in enumerate(spec.receptacles):
        height = 0.5 if kind in ("Bed", "Sofa") else 0.9
        x, y, z = -2.5 + 0.75 * i, height, (spec.scene % 7 + i) / 4 - 1
        rid = (
            f"{SINK_BASINS[kind]}|{_xyz(x, y, z)}|{kind}"
            if kind in SINK_BASINS
            else f"{kind}|{_xyz(x, y, z)}"
        )
        receptacles.append((mangle(rid), kind))
        rec_locations.append(mangle(f"loc|{2 * i - 7}|{(spec.scene + 3 * i) % 9 - 4}|{i % 4}|30"))
    objects = []
    for j, (kind, where) in enumerate(spec.objects):
        if not 0 <= where < len(receptacles):
            raise DataError(
                f"{spec.game_id}: object {kind} placed in receptacle #{where}, room has {len(receptacles)}"
            )
        x, y, z = -2.4 + 0.75 * where + 0.1 * j, 1.0, (spec.scene % 5 + j) / 5 - 0.5
        objects.append((mangle(f"{kind}|{_xyz(x, y, z)}"), kind, where))
    # a spot with no receptacle: the game opens "in the middle of a room", as ALFWorld's do
    start = mangle("loc|0|0|0|0")
    otypes = sorted({kind for _, kind, _ in objects})
    rtypes = sorted({kind for _, kind in receptacles})
    actions = constants.VAL_ACTION_OBJECTS
    lines = [
        "(define (problem plan_orchenv)",
        "    (:domain alfred)",
        "    (:objects",
        "        agent1 - agent",
    ]
    lines += [f"        {name} - receptacle" for name, _ in receptacles]
    lines += [f"        {name} - object" for name, _, _ in objects]
    lines += [f"        {loc} - location" for loc in sorted(set(rec_locations) | {start})]
    lines += [f"        {kind}Type - otype" for kind in otypes]
    lines += [f"        {kind}Type - rtype" for kind in rtypes]
    lines += [
        "    )",
        "    (:init",
        "        (= (total-cost) 0)",
        f"        (atLocation agent1 {start})",
    ]
    for (name, kind), loc in zip(receptacles, rec_locations, strict=True):
        lines.append(f"        (receptacleType {name} {kind}Type)")
        lines.append(f"        (receptacleAtLocation {name} {loc})")
        if kind in constants.OPENABLE_CLASS_LIST:
            lines.append(f"        (openable {name})")
    for name, kind, where in objects:
        lines.append(f"        (objectType {name} {kind}Type)")
        lines.append(f"        (inReceptacle {name} {receptacles[where][0]})")
        lines.append(f"        (objectAtLocation {name} {rec_locations[where]})")
        if kind not in LAMPS:
            lines.append(f"        (pickupable {name})")
        if kind in constants.MOVABLE_RECEPTACLES_SET:
            lines.append(f"        (isReceptacleObject {name})")
        for prop, table in (
            ("cleanable", "Cleanable"),
            ("heatable", "Heatable"),
            ("coolable", "Coolable"),
            ("toggleable", "Toggleable"),
            ("sliceable", "Sliceable"),
        ):
            if kind in actions[table]:
                lines.append(f"        ({prop} {name})")
    for rtype in rtypes:
        allowed = set(constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ()))
        lines += [f"        (canContain {rtype}Type {o}Type)" for o in otypes if o in allowed]
    lines.append("    )")
    goal = goal_library.gdict[spec.task_type]["pddl"].format(
        obj=spec.target, recep=spec.parent, toggle=spec.toggle, mrecep=""
    )
    # the library writes types with '#' (alfworld converts it to PDDL's '-'); its text closes (define
    return "\n".join(lines) + goal.replace("#", "-").rstrip() + "\n"


def traj_data(spec: GameSpec) -> dict[str, Any]:
    """The ``traj_data.json`` fields alfworld reads (task type and targets), and the goal text."""
    return {
        "task_id": f"orchenv_{spec.scene:03d}",
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.target,
            "parent_target": spec.parent,
            "toggle_target": spec.toggle,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"scene_num": spec.scene},
        "turk_annotations": {"anns": [{"task_desc": goal_text(spec), "high_descs": []}]},
        "source": "orchenv envs/alfworld/authoring.py (authored, not an ALFRED trajectory)",
    }


def game_data(spec: GameSpec) -> dict[str, Any]:
    """``game.tw-pddl`` content before the solvability check."""
    data = resources.files("alfworld") / "data"
    grammar = (data / "alfred.twl2").read_text(encoding="utf-8")
    return {
        "pddl_domain": (data / "alfred.pddl").read_text(encoding="utf-8"),
        "grammar": grammar.replace("UNKNOWN GOAL", goal_text(spec)),
        "pddl_problem": problem_pddl(spec),
        "solvable": None,
        "walkthrough": None,
    }


# -- checking with the engine --------------------------------------------------------------
def solve(game_file: str | Path, expert: str, max_steps: int = 100) -> list[str] | None:
    """Commands with which alfworld's ``expert`` wins the game, or None if it does not."""
    engine = ALFWorldEngine(str(game_file), expert=expert)
    try:
        state = engine.reset()
        commands: list[str] = []
        while not state.won and len(commands) < max_steps and state.expert_plan:
            commands.append(state.expert_plan[0])
            state = engine.step(commands[-1])
        return commands if state.won else None
    finally:
        engine.close()


#: seeded tries of alfworld's hand-coded expert (it draws from Python's global ``random``)
HANDCODED_TRIES = 5


def solve_handcoded(game_file: str | Path, tries: int = HANDCODED_TRIES) -> list[str] | None:
    """``solve`` with alfworld's hand-coded expert, seeded: it picks among receptacles with
    Python's global ``random``, so an unseeded check of the same game passed or failed with
    whatever the process had drawn before (``python -m orchenv.envs.alfworld.authoring``
    failed at ``pick_two_obj_and_place-CreditCard-...-111`` once, and passed on a rerun).
    Try seeds 0, 1, ... and keep the first win. The expert's module gets its own seeded
    ``random.Random`` for the call (the same draws as seeding the global one), so the global
    ``random`` is never seeded or drawn from."""
    from unittest import mock

    from alfworld.agents.expert import handcoded_expert

    for seed in range(tries):
        with mock.patch.object(handcoded_expert, "random", random.Random(seed)):
            commands = solve(game_file, "handcoded", max_steps=150)
        if commands is not None:
            return commands
        log.info("%s: the hand-coded expert lost with seed %d", game_file, seed)
    return None


def write_game(spec: GameSpec, root: Path) -> Path:
    """Write one game under ``root`` (a ``json_2.1.1`` folder) and check it; returns the game file."""
    folder = root / spec.split / spec.folder / spec.trial
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TRAJ_FILE).write_text(json.dumps(traj_data(spec), indent=2) + "\n", encoding="utf-8")
    game_file = folder / GAME_FILE
    data = game_data(spec)
    game_file.write_text(json.dumps(data) + "\n", encoding="utf-8")
    walkthrough = solve(game_file, "planner")
    handcoded = solve_handcoded(game_file)
    if walkthrough is None or handcoded is None:
        who = "the planner" if walkthrough is None else "the hand-coded expert"
        raise DataError(f"{spec.game_id}: {who} cannot solve this game; fix its spec")
    data.update(solvable=True, walkthrough=walkthrough)
    game_file.write_text(json.dumps(data) + "\n", encoding="utf-8")
    return game_file


def write_all(root: Path, specs: Sequence[GameSpec] = SPECS) -> list[Path]:
    """(Re)write every game under ``root``; existing games there are replaced."""
    kinds = {s.task_type for s in specs}
    missing = set(TASK_TYPES.values()) - kinds
    if missing:
        raise DataError(f"the game specs miss task types {sorted(missing)}")
    for split in {s.split for s in specs}:
        shutil.rmtree(root / split, ignore_errors=True)
    return [write_game(spec, root) for spec in specs]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=BUNDLED_ROOT / DATA_SUBDIR,
        help="json_2.1.1 folder to write (default: the bundled games)",
    )
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        walkthrough = json.loads(path.read_text(encoding="utf-8"))["walkthrough"]
        print(f"{path.relative_to(args.out).parent}: planner solves it in {len(walkthrough)} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
