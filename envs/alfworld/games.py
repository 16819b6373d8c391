"""Finding ALFWorld games: the full data set under ``ALFWORLD_DATA``, or the bundled set.

ALFWorld's data (``alfworld-download``) keeps one folder per game in
``$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}/<task folder>/<trial>/``
with ``game.tw-pddl`` (PDDL domain, grammar, problem, ``solvable`` flag) and
``traj_data.json`` (task type and targets, which the hand-coded expert reads).
The bundled games in ``games/json_2.1.1/`` (written by ``authoring.py``) use
the same layout, so one scanner serves both. Which games count follows
alfworld's ``AlfredTWEnv.collect_game_files``: folders with both files, no
movable-receptacle or sliced tasks, the game marked solvable.

A game's id is its path below ``json_2.1.1`` without the file name, e.g.
``train/pick_and_place_simple-Apple-None-CounterTop-1/trial_orchenv_000``.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchenv.error import DataError, UnknownNameError
from orchenv.tasks import Task, TaskSource

log = logging.getLogger(__name__)

#: ALFWorld's six task types, numbered as in its configs (``env.task_types``)
TASK_TYPES: dict[int, str] = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}
SPLITS = ("train", "valid_seen", "valid_unseen")
#: other split names -> the data's folders: orchenv's generic names (``--split test`` works
#: on every env; ALFWorld papers report the out-of-distribution ``valid_unseen`` set as their
#: test set) and the ``train_eval`` names of alfworld's ``AlfredTWEnv``, whose configs point
#: ``eval_in_distribution`` at ``valid_seen`` and ``eval_out_of_distribution`` at ``valid_unseen``
SPLIT_ALIASES = {
    "test": "valid_unseen",
    "validation": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
    "eval_in_distribution": "valid_seen",
}
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
DATA_SUBDIR = "json_2.1.1"
BUNDLED_ROOT = Path(__file__).resolve().parent / "games"

_SOLVABLE = re.compile(rb'"solvable"\s*:\s*true')
_SCAN_CACHE: dict[tuple[str, str], tuple[GameInfo, ...]] = {}
_SCAN_LOCK = threading.Lock()


@dataclass(frozen=True)
class GameInfo:
    """One playable game."""

    id: str
    path: str  # the game.tw-pddl file
    task_type: str
    split: str


def normalize_task_types(task_types: Iterable[str | int] | None) -> tuple[str, ...]:
    """Task type names from names or ALFWorld's ids 1-6; ``None`` = all six."""
    if task_types is None:
        return tuple(TASK_TYPES.values())
    names = []
    for item in task_types:
        if isinstance(item, int) and not isinstance(item, bool):
            if item not in TASK_TYPES:
                raise UnknownNameError("ALFWorld task type id", str(item), map(str, TASK_TYPES))
            names.append(TASK_TYPES[item])
        elif isinstance(item, str) and item in TASK_TYPES.values():
            names.append(item)
        else:
            raise UnknownNameError("ALFWorld task type", str(item), TASK_TYPES.values())
    if not names:
        raise DataError(
            "task_types is empty; name at least one of " + ", ".join(TASK_TYPES.values())
        )
    return tuple(dict.fromkeys(names))


def task_type_of(folder: Path) -> str | None:
    """The task type of a game folder: from the task folder's name, else ``traj_data.json``."""
    head = folder.parent.name.split("-", 1)[0]
    if head in TASK_TYPES.values():
        return head
    try:
        with open(folder / TRAJ_FILE, encoding="utf-8") as f:
            kind = json.load(f).get("task_type")
    except (OSError, ValueError):
        return None
    return kind if kind in TASK_TYPES.values() else None


def _is_solvable(game_file: Path) -> bool:
    try:
        return _SOLVABLE.search(game_file.read_bytes()) is not None
    except OSError:
        return False


def scan_split(root: Path, split: str) -> tuple[GameInfo, ...]:
    """Every playable game of ``root/split`` (``root`` is a ``json_2.1.1`` folder), sorted by id.

    Scans are cached per process: the full data set has thousands of games.
    """
    key = (str(root), split)
    with _SCAN_LOCK:
        if key in _SCAN_CACHE:
            return _SCAN_CACHE[key]
        split_dir = root / split
        games = []
        for dirpath, _dirs, files in os.walk(split_dir):
            if GAME_FILE not in files or TRAJ_FILE not in files:
                continue
            if "movable" in dirpath or "Sliced" in dirpath:  # as alfworld: not supported
                continue
            folder = Path(dirpath)
            kind = task_type_of(folder)
            if kind is None or not _is_solvable(folder / GAME_FILE):
                continue
            game_id = folder.relative_to(root).as_posix()
            games.append(GameInfo(game_id, str(folder / GAME_FILE), kind, split))
        result = tuple(sorted(games, key=lambda g: g.id))
        _SCAN_CACHE[key] = result
        log.debug("found %d ALFWorld games in %s", len(result), split_dir)
        return result


def game_file_list(game_files: Iterable[str | os.PathLike[str]]) -> list[str]:
    """``game_files`` as a list of strings; ``DataError`` when it is empty (alfworld and
    textworld would wait forever on an empty game list)."""
    files = [str(p) for p in game_files]
    if not files:
        raise DataError(
            "game_files is empty: ALFWorld needs at least one game.tw-pddl file "
            "(leave game_files=None to use ALFWORLD_DATA or the bundled games)"
        )
    return files


def games_from_files(game_files: Sequence[str | os.PathLike[str]]) -> tuple[GameInfo, ...]:
    """Games from explicit ``game.tw-pddl`` paths (ids relative to their common folder)."""
    paths = [Path(p).resolve() for p in game_file_list(game_files)]
    for path in paths:
        if not path.is_file():
            raise DataError(f"ALFWorld game file {str(path)!r} does not exist")
        if not (path.parent / TRAJ_FILE).is_file():
            raise DataError(
                f"{str(path)!r} has no {TRAJ_FILE} beside it; ALFWorld games come as a folder "
                f"with {GAME_FILE} and {TRAJ_FILE}"
            )
    folders = [p.parent for p in paths]
    common = Path(os.path.commonpath([str(f) for f in folders]))
    base = common.parent.parent if len(folders) == 1 else common
    games = []
    for path, folder in zip(paths, folders, strict=True):
        kind = task_type_of(folder)
        if kind is None:
            raise DataError(
                f"cannot tell the task type of {str(path)!r}: neither its folder name nor its "
                f"{TRAJ_FILE} names one of {', '.join(TASK_TYPES.values())}"
            )
        games.append(GameInfo(folder.relative_to(base).as_posix(), str(path), kind, "custom"))
    ids = [g.id for g in games]
    if len(set(ids)) != len(ids):
        raise DataError(f"game_files lists the same game twice: {sorted(ids)}")
    return tuple(games)


def data_root(data_dir: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The ``json_2.1.1`` folder to play and where it came from ("argument", "ALFWORLD_DATA", "bundled").

    An explicit ``data_dir`` must hold the data. Otherwise ``$ALFWORLD_DATA/json_2.1.1``
    (default ``~/.cache/alfworld``, where ``alfworld-download`` puts it) when it exists;
    alfworld sets that variable to its (possibly empty) cache folder on import, so a
    missing folder means "not downloaded" and the bundled games are played.
    """
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        for candidate in (path / DATA_SUBDIR, path):
            if any((candidate / split).is_dir() for split in SPLITS):
                return candidate, "argument"
        raise DataError(
            f"no ALFWorld games under data_dir={str(path)!r}: expected "
            f"{DATA_SUBDIR}/{{{','.join(SPLITS)}}}/**/{GAME_FILE} (the layout alfworld-download "
            "writes); download the data with `alfworld-download` or leave data_dir=None"
        )
    # alfworld's own default (where `alfworld-download` writes), whether or not alfworld has
    # been imported yet (importing it sets ALFWORLD_DATA to that folder)
    env_dir = os.environ.get("ALFWORLD_DATA") or str(Path("~/.cache/alfworld").expanduser())
    candidate = Path(env_dir).expanduser() / DATA_SUBDIR
    if candidate.is_dir():
        return candidate, "ALFWORLD_DATA"
    log.info("no ALFWorld data in %s; playing the bundled games", candidate)
    return BUNDLED_ROOT / DATA_SUBDIR, "bundled"


class GameCatalog:
    """The games one env may play: by split, by id, by task type."""

    def __init__(
        self, games_by_split: dict[str, tuple[GameInfo, ...]], source: str, root: Path | None
    ) -> None:
        self.source = source
        self.root = root
        self._by_split = games_by_split
        self._by_id = {g.id: g for games in games_by_split.values() for g in games}

    @classmethod
    def build(
        cls,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        game_files: Sequence[str | os.PathLike[str]] | None = None,
    ) -> GameCatalog:
        if game_files is not None:
            games = games_from_files(game_files)
            return cls({"custom": games}, "game_files", None)
        root, source = data_root(data_dir)
        return cls({split: scan_split(root, split) for split in SPLITS}, source, root)

    def __deepcopy__(self, memo: dict[int, Any]) -> GameCatalog:
        return self  # read-only: env copies and forks share it

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._by_split)

    def games(self, split: str, task_types: Sequence[str] | None = None) -> tuple[GameInfo, ...]:
        """The split's games (of ``task_types``); ``DataError`` when there are none.

        ``"test"`` means ``valid_unseen`` and ``"validation"`` ``valid_seen`` (``SPLIT_ALIASES``).
        """
        if split not in self._by_split and split in SPLIT_ALIASES:
            split = SPLIT_ALIASES[split]
        if split not in self._by_split:
            if self.source == "game_files":  # explicit files: one pool whatever the split
                split = "custom"
            else:
                raise UnknownNameError("ALFWorld split", split, self._by_split)
        games = self._by_split[split]
        if task_types is not None:
            games = tuple(g for g in games if g.task_type in task_types)
        if not games:
            where = f"the {self.source} games" + (f" at {self.root}" if self.root else "")
            kinds = f" of task types {list(task_types)}" if task_types is not None else ""
            raise DataError(
                f"no ALFWorld games in split {split!r}{kinds} of {where}; splits with games: "
                f"{[s for s, g in self._by_split.items() if g]}"
            )
        return games

    def has_games(self, split: str) -> bool:
        """Whether ``split`` (a folder name, not an alias) holds at least one game."""
        return bool(self._by_split.get(split))

    def all(self) -> tuple[GameInfo, ...]:
        """Every game of every split."""
        return tuple(self._by_id.values())

    def by_id(self, game_id: str) -> GameInfo:
        game = self._by_id.get(str(game_id))
        if game is None:
            known: Iterable[str] = self._by_id
            if len(self._by_id) > 40:  # the full data set: name the closest ids, not all 8,000
                close = difflib.get_close_matches(str(game_id), list(self._by_id), n=5, cutoff=0.0)
                known = [*close, f"... ({len(self._by_id)} ids in all, see env.catalog)"]
            raise UnknownNameError("ALFWorld game id", str(game_id), known)
        return game


class GameTasks(TaskSource):
    """A ``GameCatalog``'s games (of ``task_types``) as orchenv tasks.

    Splits resolve as in ``GameCatalog.games`` (``"test"`` is ``valid_unseen``; with
    explicit game files every split is the one list); a split without games is a
    ``DataError`` at ``check_split``, before any engine is started. A task's id is its
    game's id and ``meta["game"]`` its ``GameInfo``; the prompt is empty (the task
    sentence is in the game's opening text, read when the engine loads it).
    ``by_id`` finds a game in any split, whatever ``task_types`` says.
    """

    name = "alfworld"

    def __init__(self, catalog: GameCatalog, task_types: Sequence[str] | None = None) -> None:
        self.catalog = catalog
        self.task_types = None if task_types is None else tuple(task_types)

    def __deepcopy__(self, memo: dict[int, Any]) -> GameTasks:
        return self  # read-only: env copies and forks share it

    @property
    def splits(self) -> tuple[str, ...]:
        """The data's splits, then the aliases of those that hold games (``SPLIT_ALIASES``), so
        tools that look for a ``"test"`` split (``orchenv audit``, the eval harness) find
        ``valid_unseen``."""
        names = self.catalog.splits
        aliases = [
            alias
            for alias, target in SPLIT_ALIASES.items()
            if target in names and self.catalog.has_games(target)
        ]
        return (*names, *aliases)

    def check_split(self, split: str) -> None:
        self.games(split)

    def games(self, split: str, task_type: str | None = None) -> tuple[GameInfo, ...]:
        """The split's games, of one ``task_type`` if given; ``DataError`` when there are none."""
        games = self.catalog.games(split, self.task_types)
        if task_type is not None:
            games = tuple(g for g in games if g.task_type == task_type)
            if not games:
                raise DataError(f"split {split!r} has no {task_type} game; see env.catalog")
        return games

    def size(self, split: str, task_type: str | None = None) -> int:
        return len(self.games(split, task_type))

    def get(self, split: str, index: int, task_type: str | None = None) -> Task:
        games = self.games(split, task_type)
        if not 0 <= index < len(games):
            raise IndexError(f"task_index {index} is out of range: {len(games)} games")
        return self.task(games[index])

    def by_id(self, task_id: str) -> Task:
        return self.task(self.catalog.by_id(task_id))

    @staticmethod
    def task(game: GameInfo) -> Task:
        """The task of ``game``."""
        return Task(id=game.id, prompt="", answers=(), meta={"game": game})
