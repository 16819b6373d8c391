"""Sealed ALFWorld games: games drawn under a board's secret, which nobody can enumerate from
public code (issue 37).

The bundled games (``games/json_2.1.1``, ``authoring.SPECS``) are public: their ids, goals
and walkthroughs are in the repository. A sealed env (the shared argument ``sealed``, a
board's sealed-plan secret: ``orchenv.eval.board.sealed_plan``) plays games generated here
instead. Each game varies a public game of the same split (its room layout and task type,
which are public): the object to handle is redrawn among those the task type and the
destination allow, every object is put in a receptacle that can hold it (the target never
already in its destination), and the goal's phrasing is redrawn; the draw is seeded with
``orchenv.seeding.sealed_int(secret, "alfworld-games", split, index, attempt)``. A game is
kept only when both of alfworld's experts solve it in the engine (``authoring.write_game``),
else the next attempt is drawn, so what is played is as checked as the bundled games.

The games are written once per (secret, split) into a private cache folder,
``$ORCHENV_SEALED_GAMES`` or ``~/.cache/orchenv/alfworld-sealed``, under a folder named by a
hash of the secret (the hash does not reveal the secret), mode 0700; never into a bundle or
the repository. Writing takes a few seconds a game (alfworld's planner checks each);
``SEALED_GAMES`` (20) per split by default, the size of the public test split.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from orchenv.envs.alfworld.authoring import LAMPS, SPECS, GameSpec, write_game
from orchenv.envs.alfworld.games import DATA_SUBDIR, GAME_FILE, SPLIT_ALIASES, SPLITS
from orchenv.error import ConfigError, DataError
from orchenv.seeding import sealed_int

log = logging.getLogger(__name__)

__all__ = [
    "MAX_SEALED_GAMES",
    "SEALED_GAMES",
    "SEALED_SCENE_BASE",
    "sealed_cache_root",
    "sealed_game_root",
    "sealed_spec",
    "sealed_specs",
]

#: sealed games generated per split unless the env says otherwise (``sealed_games``)
SEALED_GAMES = 20
#: the most sealed games per split (each costs seconds of alfworld's planner)
MAX_SEALED_GAMES = 500
#: draws per game before giving up (a draw is dropped when an expert cannot solve it)
ATTEMPTS = 8
#: sealed games' scene numbers start here (the public ones are 101-220): ids never collide
SEALED_SCENE_BASE = 1000
#: the environment variable naming the private cache folder
CACHE_ENV = "ORCHENV_SEALED_GAMES"
#: the public games each split's sealed games vary (valid_seen: the train rooms, as ALFWorld's)
_BASE_SPLIT = {"train": "train", "valid_seen": "train", "valid_unseen": "valid_unseen"}
#: objects a task type's target may be, beyond what the destination must hold
_NEEDS = {
    "pick_clean_then_place_in_recep": "Cleanable",
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
}


def _secret_bytes(secret: str | bytes) -> bytes:
    return secret if isinstance(secret, bytes) else secret.encode("utf-8")


def real_split(split: str) -> str:
    """``split`` as a data folder name (``"test"`` is ``valid_unseen``); ``ConfigError`` for
    a split the sealed games do not have."""
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        raise ConfigError(
            f"sealed ALFWorld games exist for the splits {', '.join(SPLITS)} (and the aliases "
            f"{', '.join(SPLIT_ALIASES)}); got {split!r}"
        )
    return name


def sealed_spec(secret: str | bytes, split: str, index: int, attempt: int = 0) -> GameSpec:
    """The ``index``-th sealed game of ``split`` under ``secret`` (draw ``attempt``): a public
    game of the split's rooms with its target, the objects' places and the goal's phrasing
    redrawn (module docstring). Deterministic in its arguments; without the secret the draw
    cannot be reproduced."""
    from orchenv.envs.alfworld.authoring import _alfworld_tables

    constants, _ = _alfworld_tables()
    split = real_split(split)
    rng = random.Random(sealed_int(_secret_bytes(secret), "alfworld-games", split, index, attempt))
    bases = [s for s in SPECS if s.split == _BASE_SPLIT[split]]
    base = bases[rng.randrange(len(bases))]
    holds = constants.VAL_RECEPTACLE_OBJECTS
    # the target: an object of the room's kind that the task type and destination allow
    kinds = sorted(
        {kind for s in bases for kind, _ in s.objects if s.receptacles == base.receptacles}
    )
    kinds = [k for k in kinds if k not in LAMPS]
    needs = _NEEDS.get(base.task_type)
    if needs is not None:
        kinds = [k for k in kinds if k in constants.VAL_ACTION_OBJECTS[needs]]
    if base.parent:
        kinds = [k for k in kinds if k in holds.get(base.parent, ())]
    kinds = [k for k in kinds if any(k in holds.get(r, ()) for r in base.receptacles)]
    target = kinds[rng.randrange(len(kinds))] if kinds else base.target
    copies = 2 if base.task_type == "pick_two_obj_and_place" else 1
    others = [k for k, _ in base.objects if k not in (base.target, target)]
    objects: list[tuple[str, int]] = []
    for kind in [target] * copies + others:
        if kind in LAMPS:  # the lamp stays where the public game has it (it is not moved)
            objects.append((kind, next(w for k, w in base.objects if k == kind)))
            continue
        places = [
            i
            for i, r in enumerate(base.receptacles)
            if kind in holds.get(r, ()) and not (kind == target and r == base.parent)
        ]
        if not places:
            continue
        objects.append((kind, places[rng.randrange(len(places))]))
    return replace(
        base,
        split=split,
        scene=SEALED_SCENE_BASE + index,
        target=target,
        objects=tuple(objects),
        template=rng.randrange(2),
    )


def sealed_specs(secret: str | bytes, split: str, count: int = SEALED_GAMES) -> list[GameSpec]:
    """The first draws of ``count`` sealed games (attempt 0 each; ``sealed_game_root`` moves
    to the next attempt when an expert cannot solve one)."""
    return [sealed_spec(secret, split, i) for i in range(count)]


def sealed_cache_root() -> Path:
    """The private cache folder (``$ORCHENV_SEALED_GAMES``, default
    ``~/.cache/orchenv/alfworld-sealed``)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path("~/.cache/orchenv/alfworld-sealed").expanduser()


def _folder_name(secret: str | bytes, split: str, count: int) -> str:
    digest = hashlib.sha256(b"orchenv-alfworld-sealed:" + _secret_bytes(secret)).hexdigest()
    return f"{digest[:32]}-{split}-{count}"


def sealed_game_root(
    secret: str | bytes, split: str, count: int = SEALED_GAMES, cache: Path | None = None
) -> Path:
    """The ``json_2.1.1`` folder holding ``count`` sealed games of ``split`` under ``secret``
    (written on first use, then read from the private cache). ``DataError`` when a game
    cannot be drawn that both experts solve in ``ATTEMPTS`` tries."""
    if not 1 <= count <= MAX_SEALED_GAMES:
        raise ConfigError(
            f"sealed_games must be from 1 (an empty game list hangs alfworld) to "
            f"{MAX_SEALED_GAMES}, got {count}"
        )
    split = real_split(split)
    base = (cache or sealed_cache_root()) / _folder_name(secret, split, count)
    root = base / DATA_SUBDIR
    done = base / "complete"
    if done.is_file():
        return root
    base.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(base.parent, 0o700)
    work = Path(tempfile.mkdtemp(prefix=".writing-", dir=base.parent))
    try:
        for index in range(count):
            for attempt in range(ATTEMPTS):
                spec = sealed_spec(secret, split, index, attempt)
                try:
                    write_game(spec, work / DATA_SUBDIR)
                    break
                except DataError as exc:
                    log.info("sealed game %d, attempt %d: %s", index, attempt, exc)
                    shutil.rmtree(work / DATA_SUBDIR / split / spec.folder, ignore_errors=True)
            else:
                raise DataError(
                    f"no sealed ALFWorld game #{index} of {split} that both experts solve in "
                    f"{ATTEMPTS} draws; report this secret's split to the maintainers"
                )
        games = list((work / DATA_SUBDIR).rglob(GAME_FILE))
        if len(games) != count:
            raise DataError(f"wrote {len(games)} sealed games, expected {count}")
        (work / "complete").write_text(f"{count}\n", encoding="utf-8")
        try:
            work.rename(base)
        except OSError:  # another process finished first: keep its copy
            if not done.is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("wrote %d sealed ALFWorld games of %s into the private cache", count, split)
    return root
