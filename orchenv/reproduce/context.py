"""The run-time side of a reproduction: where results go, how big the run is, and reuse.

Every experiment is stored under ``runs_dir`` as it finishes, so rerunning the same command
resumes: evaluations go through the eval harness (``Reproduction.evaluate``: one run directory
each, episode-level resume), anything else (a training run, a sweep) through
``Reproduction.cached`` (one JSON file per named result; a result is recomputed only when
its name or its ``config`` changes).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from orchenv.error import ConfigError
from orchenv.eval.harness import EvalConfig, EvalResult, evaluate
from orchenv.reproduce.report import Estimate

T = TypeVar("T")


class Reproduction:
    """Shared by a seed's experiments: sizes (``quick`` or full), run seeds, storage, progress."""

    def __init__(
        self,
        seed_id: str,
        *,
        quick: bool,
        runs_dir: Path,
        figures_dir: Path,
        figures_link: str,
        progress: bool = True,
        seeds: Sequence[int] | None = None,
    ) -> None:
        self.seed_id = seed_id
        self.quick = quick
        self.runs_dir = runs_dir
        self.figures_dir = figures_dir
        self.figures_link = figures_link.rstrip("/")
        self.progress = progress
        #: the run seeds every experiment repeats over (a seed = tasks + agents' luck + init)
        self.seeds = list(seeds) if seeds is not None else ([0] if quick else [0, 1, 2])
        self.started = time.monotonic()
        self._bar: tqdm | None = None
        runs_dir.mkdir(parents=True, exist_ok=True)

    # -- sizes ------------------------------------------------------------------------------
    def size(self, full: T, quick: T) -> T:
        """``full`` for the documented run, ``quick`` for ``--quick`` (tests, smoke runs)."""
        return quick if self.quick else full

    # -- progress ---------------------------------------------------------------------------
    def step(self, what: str) -> None:
        """Advance the page's progress bar by one experiment (``plan`` sets its length)."""
        if self._bar is not None:
            self._bar.set_postfix_str(what[:40], refresh=False)
            self._bar.update(1)

    def plan(self, experiments: int) -> None:
        """Start the page-level progress bar: ``experiments`` calls to ``step`` will follow."""
        if self._bar is not None:
            self._bar.close()
        self._bar = tqdm(
            total=experiments,
            desc=f"reproduce {self.seed_id}",
            unit="exp",
            disable=not self.progress,
            leave=True,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    # -- storage ----------------------------------------------------------------------------
    def evaluate(
        self,
        name: str,
        config: EvalConfig,
        *,
        controller_factory: Callable[[int], Any] | None = None,
    ) -> EvalResult:
        """Run (or resume) ``config`` with the eval harness into ``runs_dir/name``."""
        result = evaluate(
            config,
            self.runs_dir / _safe(name),
            controller_factory=controller_factory,
            progress=self.progress,
        )
        self.step(name)
        return result

    def cached(self, name: str, config: Mapping[str, Any], compute: Callable[[], T]) -> T:
        """``compute()``'s JSON result, stored as ``runs_dir/name.json`` with a hash of
        ``config``; a later call with the same name and config reads it back."""
        path = self.runs_dir / f"{_safe(name)}.json"
        key = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()
        if path.exists():
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                stored = None
            if isinstance(stored, dict) and stored.get("config_key") == key:
                self.step(name)
                return stored["result"]  # type: ignore[no-any-return]
        started = time.monotonic()
        result = compute()
        payload = {
            "name": name,
            "config": config,
            "config_key": key,
            "seconds": round(time.monotonic() - started, 2),
            "result": result,
        }
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=1, default=_json_default), encoding="utf-8")
        os.replace(tmp, path)
        self.step(name)
        return json.loads(json.dumps(result, default=_json_default))  # type: ignore[no-any-return]

    def figure(self, name: str) -> tuple[Path, str]:
        """Where to save a PNG named ``name`` and the link the page uses for it."""
        self.figures_dir.mkdir(parents=True, exist_ok=True)
        file = f"{self.seed_id}_{_safe(name)}.png"
        return self.figures_dir / file, f"{self.figures_link}/{file}"

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


def eval_command(config: EvalConfig, *, out: str | None = None) -> str:
    """The ``orchenv eval`` command line that plays ``config`` (for a row's command column);
    it writes to ``out`` (default: ``runs/eval/ENV-CONTROLLER``)."""
    parts = ["orchenv", "eval", config.env_id, "--controller", config.controller]
    for key, value in sorted(config.controller_kwargs.items()):
        parts += ["-c", f"{key}={json.dumps(value)}"]
    for key, value in sorted(config.env_kwargs.items()):
        parts += ["-e", f"{key}={json.dumps(value)}"]
    if config.pool:
        parts += ["--pool", config.pool]
    if config.split:
        parts += ["--split", config.split]
    parts += ["--episodes", str(config.episodes), "--seeds", *map(str, config.seeds)]
    parts += ["--out", out or f"runs/eval/{_safe(config.env_id + '-' + config.controller)}"]
    return shlex.join(parts)


def accuracy(result: EvalResult) -> Estimate:
    """Pooled success rate of an eval run, with its Wilson interval."""
    recs = list(result.records.values())
    return Estimate.of_proportion(sum(r.correct for r in recs), len(recs))


def metric(result: EvalResult, read: Callable[[Any], float | None]) -> Estimate:
    """Mean of ``read(record)`` over an eval run's episodes (``None`` values are skipped)."""
    values = [v for v in (read(r) for r in result.records.values()) if v is not None]
    return Estimate.of_values(values)


def _safe(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")
    if not cleaned:
        raise ConfigError(f"experiment name {name!r} has no usable characters")
    return cleaned[:120]


def _json_default(value: Any) -> Any:
    if isinstance(value, Estimate):
        return value.to_dict()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")
