"""Tasks and task sources.

A ``Task`` is one problem with its reference answers; a ``TaskSource`` holds
named splits and gives deterministic access by index, by id, or by sampling
with a caller's RNG (environments pass their ``np_random``).

Sources are registered by name so environments can build them lazily from a
string (``task_source="procedural-math"``). Concrete sources live in
``orchenv.envs.mathroute.mathgen`` (procedural math with worked solutions) and
``orchenv.envs.mathroute.loaders`` (MATH-style files, CHAMP, reasoning-gym).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchenv.error import ConfigError, DataError, UnknownNameError
from orchenv.registry import Registry
from orchenv.seeding import stable_uniform


@dataclass(frozen=True)
class Task:
    """One problem.

    ``meta`` conventions used across orchenv:
      - ``level``: int 1-5 (MATH-style difficulty level) when known;
      - ``difficulty``: float in [0, 1), a difficulty quantile used by the
        simulated agents (0 = easiest); derived from ``level`` when absent;
      - ``solution``: a reference worked solution, when the source has one;
      - ``family`` / ``params``: how a procedural task was generated.
    """

    id: str
    prompt: str
    answers: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def answer(self) -> str:
        """The first (canonical) reference answer."""
        return self.answers[0] if self.answers else ""

    @property
    def level(self) -> int | None:
        level = self.meta.get("level")
        return int(level) if level is not None else None


class TaskSource(ABC):
    """Named splits of tasks with deterministic access."""

    name: str = "tasks"

    @property
    @abstractmethod
    def splits(self) -> tuple[str, ...]:
        """Names of the available splits, e.g. ``("train", "test")``."""

    @abstractmethod
    def size(self, split: str) -> int:
        """Number of tasks in ``split``."""

    @abstractmethod
    def get(self, split: str, index: int) -> Task:
        """The task at ``index`` of ``split`` (0-based)."""

    @abstractmethod
    def by_id(self, task_id: str) -> Task:
        """The task with this id; ``UnknownNameError`` if there is none."""

    #: the split an env uses when it asks for a default split (``"train"``, ``"test"``) the
    #: source lacks, e.g. ``"test"`` for CHAMP; ``None``: ``"test"``, else ``"validation"``,
    #: else the first split
    default_split: str | None = None

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise UnknownNameError(f"split of task source {self.name!r}", split, self.splits)

    def resolve_split(self, split: str) -> str:
        """``split`` if the source has it; for ``"train"`` or ``"test"`` (the envs' default
        splits) on a source without it, the split the source does have (``default_split``,
        else ``"test"``, else ``"validation"``, else its first), with a warning that says so
        (issue 31: ``task_source="champ"`` has only ``test``, FanOutQA only ``validation``).
        Any other missing split is returned unchanged for ``check_split`` to refuse."""
        splits = self.splits
        if split in splits or split not in ("train", "test") or not splits:
            return split
        chosen = self.default_split or next(
            (s for s in ("test", "validation") if s in splits), splits[0]
        )
        if chosen not in splits:
            return split
        caveat = (
            "; a policy trained on it has seen these tasks, so evaluate it elsewhere"
            if split == "train"
            else ""
        )
        warnings.warn(
            f"task source {self.name!r} has no {split!r} split; using {chosen!r} (its splits: "
            f"{', '.join(splits)}). Pass split={chosen!r} to choose it explicitly{caveat}.",
            stacklevel=3,
        )
        return chosen

    def sample(self, split: str, rng: np.random.Generator) -> Task:
        """A task drawn uniformly from ``split`` with the caller's RNG."""
        self.check_split(split)
        n = self.size(split)
        if n == 0:
            raise DataError(f"split {split!r} of task source {self.name!r} is empty")
        return self.get(split, int(rng.integers(n)))

    def iter(self, split: str, limit: int | None = None) -> Iterator[Task]:
        """Tasks of ``split`` in order, at most ``limit`` of them."""
        self.check_split(split)
        n = self.size(split) if limit is None else min(limit, self.size(split))
        for i in range(n):
            yield self.get(split, i)


class ListTaskSource(TaskSource):
    """A source backed by in-memory lists of tasks (what the file loaders return)."""

    def __init__(self, name: str, splits: Mapping[str, Sequence[Task]]) -> None:
        if not splits:
            raise DataError(f"task source {name!r} has no splits")
        self.name = name
        self._splits = {k: list(v) for k, v in splits.items()}
        self._by_id: dict[str, Task] = {}
        for tasks in self._splits.values():
            for task in tasks:
                self._by_id[task.id] = task

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._splits)

    def size(self, split: str) -> int:
        self.check_split(split)
        return len(self._splits[split])

    def get(self, split: str, index: int) -> Task:
        self.check_split(split)
        tasks = self._splits[split]
        if not 0 <= index < len(tasks):
            raise IndexError(f"index {index} out of range for split {split!r} ({len(tasks)} tasks)")
        return tasks[index]

    def by_id(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise UnknownNameError("task id", task_id, list(self._by_id)[:20]) from None


class GeneratedTaskSource(TaskSource):
    """Train/test tasks generated lazily from (seed, split, index), with a bounded cache.

    The shared plumbing of the procedural sources (math, multihop QA): subclasses
    set ``id_prefix`` and ``cache_max``, fill ``self.seed`` and ``self._sizes`` and
    implement ``_generate``. Ids read ``"{id_prefix}-{seed}/{split}/{index}"``.
    """

    id_prefix = "generated"
    cache_max = 16_384
    seed: int
    _sizes: dict[str, int]

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test")

    def size(self, split: str) -> int:
        self.check_split(split)
        return self._sizes[split]

    def get(self, split: str, index: int) -> Task:
        self.check_split(split)
        index = int(index)
        if not 0 <= index < self._sizes[split]:
            raise IndexError(
                f"index {index} out of range for split {split!r} ({self._sizes[split]} tasks)"
            )
        cache: dict[tuple[str, int], Task] = self.__dict__.setdefault("_cache", {})
        key = (split, index)
        task = cache.get(key)
        if task is None:
            if len(cache) >= self.cache_max:
                cache.clear()
            task = cache[key] = self._generate(split, index)
        return task

    def by_id(self, task_id: str) -> Task:
        pattern = rf"^{re.escape(self.id_prefix)}-(-?\d+)/(train|test)/(\d+)$"
        match = re.match(pattern, task_id) if isinstance(task_id, str) else None
        if match is not None:
            seed, split, index = int(match.group(1)), match.group(2), int(match.group(3))
            if seed == self.seed and index < self._sizes[split]:
                return self.get(split, index)
        examples = [f"{self.id_prefix}-{self.seed}/{s}/0" for s in self.splits if self._sizes[s]]
        raise UnknownNameError("task id", str(task_id), examples)

    @abstractmethod
    def _generate(self, split: str, index: int) -> Task:
        """The task at ``index`` of ``split`` (deterministic in seed, split, index)."""


#: name -> TaskSource factory. Env families register theirs (``orchenv.envs``); a factory
#: is resolved lazily so optional dependencies load only when a source is used.
TASK_SOURCES: Registry[TaskSource] = Registry("task source")


def register_task_source(name: str, factory: str | Callable[..., TaskSource]) -> None:
    """Register a task source factory under ``name`` (a callable or ``"module:attr"``)."""
    TASK_SOURCES.register(name, factory)


def make_task_source(spec: str | TaskSource, **kwargs: Any) -> TaskSource:
    """Build a task source from a registered name, or pass an instance through."""
    if isinstance(spec, TaskSource):
        if kwargs:
            raise ConfigError("task_source_kwargs given together with a TaskSource instance")
        return spec
    return TASK_SOURCES.resolve(spec)(**kwargs)


#: the most public tasks ``sealed_task_source`` compares sealed prompts with
MAX_PUBLIC_TASKS = 200_000
_PUBLIC_PROMPTS: dict[str, frozenset[bytes]] = {}


def _prompt_digest(prompt: str) -> bytes:
    import hashlib

    return hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def public_prompts(source: TaskSource, tag: str | None = None) -> frozenset[bytes]:
    """Digests of every prompt of ``source`` (all splits): what a controller can tabulate from
    public code. Cached under ``tag`` (the source's name and arguments) when given;
    ``ConfigError`` past ``MAX_PUBLIC_TASKS``."""
    total = sum(source.size(s) for s in source.splits)
    if total > MAX_PUBLIC_TASKS:
        raise ConfigError(
            f"task source {source.name!r} has {total:,} public tasks; a sealed env compares its "
            f"tasks with at most {MAX_PUBLIC_TASKS:,}: make the public splits smaller"
        )
    found = _PUBLIC_PROMPTS.get(tag) if tag is not None else None
    if found is None:
        found = frozenset(_prompt_digest(t.prompt) for s in source.splits for t in source.iter(s))
        if tag is not None:
            if len(_PUBLIC_PROMPTS) > 8:
                _PUBLIC_PROMPTS.clear()
            _PUBLIC_PROMPTS[tag] = found
    return found


class SealedTaskSource(TaskSource):
    """A sealed env's task source: the tasks of ``inner`` (built with a sealed seed) whose
    prompt is in no split of ``public`` (the same source with its public seed). Small
    generator families repeat prompts across seeds; a sealed draw that repeats a public prompt
    is drawn again, so looking a prompt up in the public splits finds nothing. Only
    ``sample`` draws (a sealed env refuses reset options that choose a task)."""

    def __init__(self, inner: TaskSource, public: TaskSource, tag: str | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.default_split = inner.default_split
        self._public = public_prompts(public, tag)

    @property
    def splits(self) -> tuple[str, ...]:
        return self.inner.splits

    def size(self, split: str) -> int:
        return self.inner.size(split)

    def get(self, split: str, index: int) -> Task:
        return self.inner.get(split, index)

    def by_id(self, task_id: str) -> Task:
        return self.inner.by_id(task_id)

    def sample(self, split: str, rng: np.random.Generator) -> Task:
        for _ in range(1000):
            task = self.inner.sample(split, rng)
            if _prompt_digest(task.prompt) not in self._public:
                return task
        raise DataError(
            f"split {split!r} of the sealed {self.name!r} source: 1,000 draws all repeat a "
            "public prompt (its parameter space is too small to seal)"
        )


def _takes(factory: Callable[..., Any], name: str) -> str:
    """``"yes"`` when ``factory`` names the parameter ``name``, ``"maybe"`` when it takes
    ``**kwargs``, else ``"no"``."""
    import inspect

    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return "maybe"
    if name in params:
        return "yes"
    return "maybe" if any(p.kind is p.VAR_KEYWORD for p in params.values()) else "no"


def sealed_task_source(
    spec: str | TaskSource, kwargs: Mapping[str, Any], secret: str | bytes
) -> TaskSource:
    """The task source of a sealed env (``OrchestrationEnv``'s ``sealed``): a generated source
    (one that names a ``seed`` parameter, or takes ``**kwargs`` and is given a ``seed`` or
    builds a source with an int ``seed``) is built with its seed mixed with the ``secret``
    (HMAC), so its tasks cannot be generated from public code, and wrapped in
    ``SealedTaskSource`` so no draw repeats a public prompt; any other named source is built
    as given (a file-based source reads the board's private task file, which
    ``orchenv.eval.board.sealed_plan`` put in ``kwargs``). A ``TaskSource`` object is
    refused: its tasks are whatever the caller built, public or not."""
    from orchenv.seeding import sealed_int

    if isinstance(spec, TaskSource):
        raise ConfigError(
            "a sealed env builds its task source by name (task_source='procedural-math', ...): "
            "a TaskSource object passed in cannot be sealed"
        )
    key = secret if isinstance(secret, bytes) else secret.encode("utf-8")
    factory = TASK_SOURCES.resolve(spec)
    given = dict(kwargs)

    def sealed() -> TaskSource:
        seed = sealed_int(key, "orchenv-sealed-tasks", spec, repr(given.get("seed", 0)))
        tag = json.dumps([spec, given], sort_keys=True, default=repr)  # the public source
        return SealedTaskSource(factory(**{**given, "seed": seed}), factory(**given), tag)

    takes = _takes(factory, "seed")
    if takes == "yes" or (takes == "maybe" and "seed" in given):
        return sealed()
    source = factory(**given)
    if takes == "maybe" and isinstance(getattr(source, "seed", None), int):
        return sealed()  # a generated source behind **kwargs
    return source


def pick_task(
    source: TaskSource | None, split: str, options: Mapping[str, Any], rng: np.random.Generator
) -> Task:
    """The episode's task from reset options: ``options["task"]`` (a ``Task``),
    ``options["task_id"]``, ``options["task_index"]`` into ``split``, or a draw from
    ``split`` with the caller's ``rng`` (envs pass their ``np_random``). ``source`` may be
    ``None`` only when the options carry the task itself."""
    task = options.get("task")
    if task is not None:
        if not isinstance(task, Task):
            raise ConfigError(f"options['task'] must be a Task, got {type(task).__name__}")
        return task
    if source is None:
        raise ConfigError("no task source: pass reset(options={'task': task})")
    if "task_id" in options:
        return source.by_id(str(options["task_id"]))
    if "task_index" in options:
        return source.get(split, int(options["task_index"]))
    return source.sample(split, rng)


def difficulty_of(task: Task) -> float:
    """The task's difficulty quantile in [0, 1).

    Uses ``meta["difficulty"]`` when present; otherwise spreads ``meta["level"]``
    (1-5) over its fifth of [0, 1) with a stable hash of the id; tasks with
    neither get a hash-uniform value.
    """
    if "difficulty" in task.meta:
        return float(task.meta["difficulty"])
    u = stable_uniform("difficulty", task.id)
    level = task.level
    if level is None:
        return u
    level = min(max(level, 1), 5)
    return (level - 1 + u) / 5.0


def read_data_text(path: str | os.PathLike[str], dataset: str) -> tuple[Path, str]:
    """The path (``~`` expanded) and UTF-8 text of a data file of ``dataset``; a missing,
    non-file or blank file raises :class:`DataError` naming the dataset and the file."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"{dataset} file {p} does not exist (or is not a file)")
    text = p.read_text(encoding="utf-8")
    if not text.strip():
        raise DataError(f"{dataset} file {p} is empty")
    return p, text


def read_json_records(
    path: str | os.PathLike[str], dataset: str, list_keys: Sequence[str] = ("data",)
) -> list[tuple[str, Any]]:
    """``(where, record)`` pairs of a data file of ``dataset``: JSON lines (a ``.jsonl`` /
    ``.ndjson`` file, or text that is not one JSON document; ``where`` = "line N"), a JSON
    list, or a JSON object holding the list under the first of ``list_keys`` it has (else the
    object is the one record; ``where`` = "record I"). Malformed or unreadable files raise
    :class:`DataError` naming the file (and line)."""
    p, text = read_data_text(path, dataset)
    stripped = text.lstrip()
    if (
        p.suffix.lower() in (".jsonl", ".ndjson")
        or not stripped.startswith(("[", "{"))
        or (stripped.startswith("{") and "\n{" in stripped.rstrip())
    ):
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((f"line {lineno}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{p}, line {lineno}: malformed JSON ({exc.msg} at column {exc.colno}); "
                    f"expected one {dataset} record (a JSON object) per line"
                ) from None
        return records
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{p}: malformed JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            f"expected a JSON list of {dataset} records"
        ) from None
    if isinstance(data, Mapping):
        data = next((data[k] for k in list_keys if k in data), [data])
    if not isinstance(data, list):
        raise DataError(
            f"{p}: expected a JSON list of {dataset} records, got {type(data).__name__}"
        )
    return [(f"record {i}", r) for i, r in enumerate(data)]


def read_jsonl(path: str | os.PathLike[str]) -> list[tuple[str, Any]]:
    """``(where, record)`` for each non-blank line of a JSON Lines file (``where``: "line N",
    for error messages); a malformed line raises :class:`DataError` naming the file and line."""
    records: list[tuple[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{path}, line {lineno}: malformed JSON ({exc.msg} at column {exc.colno}); "
                    "expected one JSON object per line"
                ) from None
            records.append((f"line {lineno}", record))
    return records
