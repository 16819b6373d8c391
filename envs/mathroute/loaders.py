"""Real task sets: MATH-style files (or the Hub when online), CHAMP, and reasoning-gym.

The file loaders return ``ListTaskSource`` objects; reasoning-gym datasets are
procedural, so ``ReasoningGymSource`` generates items lazily per index like
``ProceduralMathSource``. Optional dependencies (pyarrow, datasets, champ-dataset)
are imported only when used and raise ``DependencyError`` naming the ``data`` extra.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError, DependencyError, UnknownNameError, require
from orchenv.grading import extract_boxed
from orchenv.seeding import stable_uniform
from orchenv.tasks import ListTaskSource, Task, TaskSource, read_jsonl

logger = logging.getLogger(__name__)

__all__ = [
    "ReasoningGymSource",
    "load_champ",
    "load_math_hf",
    "load_math_records",
    "load_math_splits",
    "spread_levels",
]

PathLike = str | os.PathLike
_MATH_FORMAT = (
    "a .jsonl file (one JSON object per line), a .json file (a list of objects), a .parquet "
    "file, or a directory of per-problem .json files, with fields problem, solution, level, type"
)
_LEVEL_RE = re.compile(r"(\d+)")


# -- MATH-style records ----------------------------------------------------------------------
def _parse_level(value: Any) -> int | None:
    """``"Level 3"``, ``3`` or ``"3"`` -> 3; ``"Level ?"``, None or junk -> None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if not (isinstance(value, float) and math.isnan(value)) else None
    match = _LEVEL_RE.search(str(value))
    return int(match.group(1)) if match else None


def _read_json(path: Path) -> list[tuple[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}: malformed JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "expected a list of objects"
        ) from None
    if isinstance(data, Mapping):
        if "problem" in data or "question" in data:
            return [("record 0", data)]
        for key in ("data", "rows", "records", "examples"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            raise DataError(f"{path}: expected a JSON list of problem objects, got an object")
    if not isinstance(data, list):
        raise DataError(
            f"{path}: expected a JSON list of problem objects, got {type(data).__name__}"
        )
    return [(f"record {i}", r) for i, r in enumerate(data)]


def _read_parquet(path: Path) -> list[tuple[str, Any]]:
    require("pyarrow", "data", "reading MATH parquet files")
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types on corrupt files
        raise DataError(f"{path}: could not read parquet file ({exc})") from exc
    return [(f"row {i}", r) for i, r in enumerate(rows)]


def _read_dir(path: Path) -> list[tuple[str, Any]]:
    files = sorted(p for p in path.rglob("*.json") if p.is_file())
    records: list[tuple[str, Any]] = []
    for file in files:
        for where, record in _read_json(file):
            if isinstance(record, dict) and "id" not in record and "unique_id" not in record:
                record = {**record, "unique_id": file.relative_to(path).as_posix()}
            records.append((f"{file.name} {where}", record))
    return records


def _read_records(path: PathLike) -> list[tuple[str, Any]]:
    """(location, record) pairs from a file or directory; DataError on anything unusable."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"MATH data file {p} does not exist; expected {_MATH_FORMAT}")
    if p.is_dir():
        records = _read_dir(p)
        if not records:
            raise DataError(f"directory {p} holds no .json problem files; expected {_MATH_FORMAT}")
        return records
    if p.stat().st_size == 0:
        raise DataError(f"MATH data file {p} is empty; expected {_MATH_FORMAT}")
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        records = read_jsonl(p)
    elif suffix == ".json":
        records = _read_json(p)
    elif suffix in (".parquet", ".pq"):
        records = _read_parquet(p)
    else:
        raise DataError(
            f"cannot read {p}: unknown file type {suffix or '(none)'!r}; expected {_MATH_FORMAT}"
        )
    if not records:
        raise DataError(f"MATH data file {p} holds no records; expected {_MATH_FORMAT}")
    return records


def _math_tasks(
    records: Iterable[tuple[str, Any]], *, name: str, split: str, origin: str
) -> list[Task]:
    """Tasks from MATH-style records; records without a reference answer are skipped."""
    tasks: list[Task] = []
    seen: set[str] = set()
    skipped = total = 0
    for i, (where, record) in enumerate(records):
        total += 1
        if not isinstance(record, Mapping):
            raise DataError(
                f"{origin}, {where}: expected a JSON object, got {type(record).__name__}"
            )
        problem = record.get("problem", record.get("question"))
        if not isinstance(problem, str) or not problem.strip():
            raise DataError(f"{origin}, {where}: missing the 'problem' field (a non-empty string)")
        solution = record.get("solution")
        solution = solution if isinstance(solution, str) else None
        answer = record.get("answer")
        if answer is not None and str(answer).strip():
            answer = str(answer).strip()
        else:
            answer = extract_boxed(solution) if solution else None
        if not answer:
            skipped += 1
            continue
        raw_id = record.get("id", record.get("unique_id"))
        task_id = str(raw_id) if raw_id is not None and str(raw_id) else f"{name}/{split}/{i}"
        if task_id in seen:
            raise DataError(f"{origin}, {where}: duplicate task id {task_id!r}")
        seen.add(task_id)
        meta = {
            "level": _parse_level(record.get("level")),
            "type": record.get("type", record.get("subject")),
            "solution": solution,
            "source": name,
        }
        tasks.append(Task(task_id, problem, (answer,), meta))
    if skipped:
        logger.warning(
            "%s: skipped %d of %d records with no answer (no 'answer' field and no \\boxed{} "
            "in the solution)",
            origin,
            skipped,
            total,
        )
    if not tasks:
        raise DataError(f"{origin}: no usable records ({skipped} of {total} had no answer)")
    return spread_levels(tasks)


def spread_levels(tasks: Sequence[Task]) -> list[Task]:
    """The tasks with ``meta["difficulty"]`` set from the split's own level mix.

    Simulated agents are calibrated so that their accuracy over difficulty quantiles
    ``z ~ U(0, 1)`` is the preset's; the default mapping gives each level a fifth of
    [0, 1), which is uniform only when levels are. Here level L spans its share of the
    split, ``[F(L-1), F(L))`` with F the split's cumulative level frequencies (a stable
    hash of the id places a task within it), so the split's z is uniform whatever its
    mix and each agent keeps its calibrated accuracy on it (e.g. the MATH test split's
    9/18/23/24/26% mix). Tasks without a level keep the hash-uniform default.
    """
    counts: dict[int, int] = {}
    for task in tasks:
        if task.level is not None:
            counts[task.level] = counts.get(task.level, 0) + 1
    n = sum(counts.values())
    start: dict[int, float] = {}
    below = 0
    for level in sorted(counts):
        start[level] = below / n
        below += counts[level]
    out = []
    for task in tasks:
        found = task.level
        if found is None:
            out.append(task)
            continue
        u = stable_uniform("difficulty", task.id)
        z = start[found] + u * counts[found] / n
        out.append(Task(task.id, task.prompt, task.answers, {**task.meta, "difficulty": z}))
    return out


def _records_of(
    source: PathLike | Iterable[Mapping[str, Any]],
) -> tuple[list[tuple[str, Any]], str]:
    if isinstance(source, (str, os.PathLike)):
        return _read_records(source), str(source)
    if isinstance(source, Mapping):
        raise ConfigError(
            "expected a path or an iterable of records, got a mapping; "
            "use load_math_splits({split: path}) for several splits"
        )
    try:
        records = [(f"record {i}", r) for i, r in enumerate(source)]
    except TypeError:
        raise ConfigError(
            f"expected a path or an iterable of MATH records, got {type(source).__name__}"
        ) from None
    if not records:
        raise DataError("no MATH records given (the iterable is empty)")
    return records, "records"


def load_math_records(
    path_or_records: PathLike | Iterable[Mapping[str, Any]],
    *,
    name: str = "math",
    split: str = "test",
) -> ListTaskSource:
    """One split of MATH-style problems from a file, a directory, or in-memory records.

    Records carry ``problem``, ``solution``, ``level`` and ``type``; the reference
    answer is an explicit ``answer`` field or else the solution's last ``\\boxed{}``.
    """
    records, origin = _records_of(path_or_records)
    return ListTaskSource(
        name, {split: _math_tasks(records, name=name, split=split, origin=origin)}
    )


def load_math_splits(
    paths: Mapping[str, PathLike | Iterable[Mapping[str, Any]]], *, name: str = "math"
) -> ListTaskSource:
    """Several splits, e.g. ``{"train": "train.jsonl", "test": "test.jsonl"}``."""
    if not isinstance(paths, Mapping) or not paths:
        raise ConfigError("load_math_splits needs a non-empty mapping of split name to path")
    splits: dict[str, list[Task]] = {}
    seen: dict[str, str] = {}
    for split, source in paths.items():
        records, origin = _records_of(source)
        tasks = _math_tasks(records, name=name, split=split, origin=origin)
        for task in tasks:
            if task.id in seen:
                raise DataError(
                    f"task id {task.id!r} appears in both split {seen[task.id]!r} and {split!r}"
                )
            seen[task.id] = split
        splits[split] = tasks
    return ListTaskSource(name, splits)


def load_math_hf(
    dataset: str = "DigitalLearningGmbH/MATH-lighteval",
    *,
    splits: Sequence[str] = ("train", "test"),
    name: str = "math-lighteval",
    **kw: Any,
) -> ListTaskSource:
    """MATH from the Hugging Face Hub via ``datasets.load_dataset`` (needs network or a cache)."""
    datasets = require("datasets", "data", "loading MATH from the Hugging Face Hub")
    out: dict[str, list[Task]] = {}
    for split in splits:
        try:
            ds = datasets.load_dataset(dataset, split=split, **kw)
        except Exception as exc:
            raise DataError(
                f"could not load split {split!r} of {dataset!r} from the Hugging Face Hub "
                f"({type(exc).__name__}: {exc}). This machine is probably offline (or the name is "
                "wrong). Download the data elsewhere and pass local files instead: "
                "orchenv.envs.mathroute.loaders.load_math_records('test.jsonl') or "
                "load_math_splits({'train': 'train.parquet', 'test': 'test.parquet'})."
            ) from exc
        records = [(f"row {i}", r) for i, r in enumerate(ds)]
        out[split] = _math_tasks(records, name=name, split=split, origin=f"{dataset}[{split}]")
    return ListTaskSource(name, out)


# -- CHAMP -------------------------------------------------------------------------------------
_NUMBER_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")


def _answer_kind(answer: str) -> str:
    """ "number" when the answer text is a plain number or simple fraction, else "text"."""
    s = answer.strip().replace(",", "").replace("$", "").replace(" ", "")
    if _NUMBER_RE.match(s):
        return "number"
    try:
        Fraction(s)
    except (ValueError, ZeroDivisionError):
        return "text"
    return "number"


def load_champ(*, split: str = "test") -> ListTaskSource:
    """The 270 CHAMP competition problems (``champ-dataset`` package) as one split.

    Answers are kept verbatim (many are prose or formulas); ``meta["answer_kind"]`` says
    whether one parses as a number. The reference solution's steps become ``meta["solution"]``.
    """
    champ = require("champ_dataset", "data", "the CHAMP dataset")
    try:
        dataset = champ.load("v0")
    except Exception as exc:
        raise DataError(f"could not load the CHAMP dataset v0 from champ_dataset ({exc})") from exc
    tasks = []
    for key, problem in dataset.problems.items():
        identifier = getattr(problem, "identifier", None) or key
        answer = (problem.answer or "").strip()
        if not answer or not problem.text:
            logger.warning("CHAMP problem %s has no text or answer; skipped", identifier)
            continue
        steps = getattr(getattr(problem, "solution", None), "steps", None) or []
        solution = "\n".join(step.text for step in steps if getattr(step, "text", None)) or None
        meta = {
            "level": None,
            "type": problem.category,
            "category": problem.category,
            "solution": solution,
            "answer_kind": _answer_kind(answer),
            "source": "champ",
        }
        tasks.append(Task(f"champ/{identifier}", problem.text.strip(), (answer,), meta))
    if not tasks:
        raise DataError("the CHAMP dataset holds no problems")
    return ListTaskSource("champ", {split: tasks})


# -- reasoning-gym -----------------------------------------------------------------------------
def _json_safe(value: Any) -> Any:
    """A JSON-serialisable copy (tuples and sets become lists, unknown objects strings)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_json_safe(v) for v in value), key=repr)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return _json_safe(item())
        except (TypeError, ValueError):
            pass
    return str(value)


_RG_SPLITS = ("train", "test")


class ReasoningGymSource(TaskSource):
    """A reasoning-gym dataset as train/test splits, generated lazily per index.

    Splits use different seeds derived from ``seed``; ``score`` grades an answer with
    the dataset's own ``score_answer``.
    """

    name = "reasoning-gym"

    def __init__(
        self,
        dataset: str = "basic_arithmetic",
        *,
        seed: int = 0,
        train_size: int = 1000,
        test_size: int = 500,
        **config: Any,
    ) -> None:
        rg = require("reasoning_gym", "data", "reasoning-gym task sources")
        for label, value in (("train_size", train_size), ("test_size", test_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{label} must be a non-negative integer, got {value!r}")
        known = self._known_datasets()
        if known is not None and dataset not in known:
            raise UnknownNameError("reasoning-gym dataset", dataset, known)
        self.dataset, self.seed = dataset, int(seed)
        self.name = f"reasoning-gym/{dataset}"
        self._sizes = {"train": train_size, "test": test_size}
        self._datasets: dict[str, Any] = {}
        for split in _RG_SPLITS:
            if self._sizes[split] == 0:
                continue
            split_seed = int(stable_uniform("reasoning-gym-seed", self.seed, split) * 2**31)
            try:
                self._datasets[split] = rg.create_dataset(
                    dataset, seed=split_seed, size=self._sizes[split], **config
                )
            except DependencyError:
                raise
            except Exception as exc:
                if "not registered" in str(exc):
                    raise UnknownNameError("reasoning-gym dataset", dataset, known or ()) from None
                raise ConfigError(
                    f"reasoning-gym could not build dataset {dataset!r} with config {config!r}: {exc}"
                ) from exc
        self._entries: dict[tuple[str, int], dict[str, Any]] = {}
        self._tasks: dict[tuple[str, int], Task] = {}
        self._prefix = f"rg-{dataset}-{self.seed}/"

    @staticmethod
    def _known_datasets() -> list[str] | None:
        try:
            from reasoning_gym.factory import DATASETS
        except ImportError:  # registry moved: fall back to create_dataset's own error
            return None
        return sorted(DATASETS)

    @property
    def splits(self) -> tuple[str, ...]:
        return _RG_SPLITS

    def size(self, split: str) -> int:
        self.check_split(split)
        return self._sizes[split]

    def _entry(self, split: str, index: int) -> dict[str, Any]:
        self.check_split(split)
        if not 0 <= index < self._sizes[split]:
            raise IndexError(
                f"index {index} out of range for split {split!r} ({self._sizes[split]} tasks)"
            )
        key = (split, index)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = self._datasets[split][index]
        return entry

    def get(self, split: str, index: int) -> Task:
        index = int(index)
        key = (split, index)
        task = self._tasks.get(key)
        if task is not None:
            return task
        entry = self._entry(split, index)
        answer = entry.get("answer")
        meta = {
            "source": "reasoning-gym",
            "dataset": self.dataset,
            "rg_metadata": _json_safe(entry.get("metadata", {})),
            "difficulty": stable_uniform("rg-difficulty", self.dataset, self.seed, split, index),
        }
        task = Task(
            f"{self._prefix}{split}/{index}",
            str(entry["question"]),
            () if answer is None else (str(answer),),
            meta,
        )
        self._tasks[key] = task
        return task

    def _locate(self, task_id: str) -> tuple[str, int]:
        if isinstance(task_id, str) and task_id.startswith(self._prefix):
            split, _, index = task_id[len(self._prefix) :].partition("/")
            if split in self._sizes and index.isdigit() and int(index) < self._sizes[split]:
                return split, int(index)
        examples = [f"{self._prefix}{s}/0" for s in _RG_SPLITS if self._sizes[s]]
        raise UnknownNameError("task id", str(task_id), examples)

    def by_id(self, task_id: str) -> Task:
        return self.get(*self._locate(task_id))

    def score(self, task: Task | str, answer: str | None) -> float:
        """The dataset's own score in [0, 1] for ``answer`` to ``task`` (a Task or its id)."""
        split, index = self._locate(task if isinstance(task, str) else task.id)
        entry = self._entry(split, index)
        try:
            return float(self._datasets[split].score_answer(answer, entry))
        except Exception:  # a scorer choking on odd input means "not correct"
            logger.debug("score_answer failed for %s", self.dataset, exc_info=True)
            return 0.0
