"""The run-time side of a reproduction: where results go, how big the run is, and reuse.

Every experiment is stored under ``runs_dir`` as it finishes, so rerunning the same command
resumes: evaluations go through the eval harness (``Reproduction.evaluate``: one run directory
each, episode-level resume), anything else (a training run, a sweep) through
``Reproduction.cached`` (one JSON file per named result; a result is recomputed only when
its name or its ``config`` changes).

A stored result is also keyed on the *simulator* that made it (``simulator_fingerprint``: the
code of the seed's env package and of the orchenv modules that play an episode, docstrings and
comments ignored). When that code changes, a cached result is recomputed and an evaluation's
old directory is moved aside to ``NAME.stale-FINGERPRINT`` (with a warning) instead of being
resumed: results from an older simulator are never reused silently. The seed's own
``reproduce.py`` and ``paper_numbers.json`` are left out (they render the page; what they
compute is in each experiment's ``config``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from orchenv.error import ConfigError
from orchenv.eval.harness import EvalConfig, EvalResult, evaluate
from orchenv.reproduce.report import Estimate

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: the orchenv modules (globs under the package) whose code a stored result depends on, beside
#: the seed's env package: the backends, presets and prices, the env base and the eval harness
SIMULATOR_SOURCES = (
    "backends/*.py",
    "presets/*.json",
    "pricing.json",
    "calltypes.py",
    "controllers.py",
    "core.py",
    "discrete.py",
    "grading.py",
    "info.py",
    "memory.py",
    "parsing.py",
    "pool.py",
    "protocol.py",
    "runner.py",
    "search.py",
    "seeding.py",
    "spaces.py",
    "tasks.py",
    "teams.py",
    "view.py",
    "eval/harness.py",
)
#: files of the seed's env package that only render its page (left out of the fingerprint)
PAGE_ONLY = frozenset({"reproduce.py", "paper_numbers.json"})
#: data files of an env package that enter the fingerprint (besides its Python modules)
DATA_SUFFIXES = frozenset({".json", ".jsonl", ".txt", ".csv", ".tsv"})


def _file_digest(path: Path) -> bytes:
    """A Python module's code without its docstrings, comments and layout (``ast.dump``); any
    other file's bytes. A module that does not parse is hashed as bytes."""
    data = path.read_bytes()
    if path.suffix != ".py":
        return hashlib.sha256(data).digest()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return hashlib.sha256(data).digest()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).digest()


def sources_fingerprint(files: Iterable[tuple[str, Path]]) -> str:
    """SHA-256 (hex) over ``(label, file)`` pairs, sorted by label: each file's digest as
    ``_file_digest`` computes it, so editing a docstring or reformatting keeps the value."""
    digest = hashlib.sha256()
    for label, path in sorted(files, key=lambda item: item[0]):
        digest.update(label.encode("utf-8", "surrogatepass") + b"\0")
        digest.update(_file_digest(path))
    return digest.hexdigest()


def simulator_fingerprint(
    package_dir: str | Path | None = None, *, orchenv_dir: str | Path | None = None
) -> str:
    """The fingerprint of the code that plays a seed's experiments: ``SIMULATOR_SOURCES`` under
    the ``orchenv`` package (``orchenv_dir``, default: this installation's) plus every module
    and data file of ``package_dir`` (the seed's env package, recursively; ``PAGE_ONLY`` files
    left out). Stored results carry it, and one made under another value is recomputed (see
    the module docstring)."""
    root = Path(orchenv_dir) if orchenv_dir is not None else Path(__file__).resolve().parent.parent
    files: list[tuple[str, Path]] = []
    for pattern in SIMULATOR_SOURCES:
        files += [(f"orchenv/{p.relative_to(root).as_posix()}", p) for p in root.glob(pattern)]
    if package_dir is not None:
        base = Path(package_dir)
        for path in base.rglob("*"):
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and path.name not in PAGE_ONLY
                and (path.suffix == ".py" or path.suffix in DATA_SUFFIXES)
            ):
                files.append((f"{base.name}/{path.relative_to(base).as_posix()}", path))
    return sources_fingerprint(files)


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
        fingerprint: str | None = None,
    ) -> None:
        self.seed_id = seed_id
        #: the simulator's fingerprint every stored result is keyed on (default: orchenv's
        #: own sources only; ``orchenv.reproduce.reproduce`` adds the seed's env package)
        self.fingerprint = fingerprint if fingerprint is not None else simulator_fingerprint()
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
        """Run (or resume) ``config`` with the eval harness into ``runs_dir/name``. A directory
        left by another simulator (or by a version that did not stamp it) is moved aside to
        ``name.stale-...`` and the evaluation starts afresh."""
        out = self.runs_dir / _safe(name)
        stamp = self.runs_dir / f"{_safe(name)}.simulator"
        if out.exists():
            try:
                old = stamp.read_text(encoding="utf-8").strip()[:64] if stamp.exists() else ""
            except (OSError, UnicodeDecodeError):
                old = ""
            if old != self.fingerprint:
                stale = _free_path(out.with_name(f"{out.name}.stale-{old[:12] or 'unstamped'}"))
                logger.warning(
                    "%s was made by another simulator (fingerprint %s, now %s): moved to %s "
                    "and evaluated again",
                    out,
                    old[:12] or "not recorded",
                    self.fingerprint[:12],
                    stale.name,
                )
                os.replace(out, stale)
        stamp.write_text(self.fingerprint + "\n", encoding="utf-8")
        result = evaluate(
            config,
            out,
            controller_factory=controller_factory,
            progress=self.progress,
        )
        self.step(name)
        return result

    def cached(self, name: str, config: Mapping[str, Any], compute: Callable[[], T]) -> T:
        """``compute()``'s JSON result, stored as ``runs_dir/name.json`` with a hash of
        ``config`` and the simulator's fingerprint; a later call with the same name, config
        and simulator reads it back (another simulator recomputes it, with a warning)."""
        path = self.runs_dir / f"{_safe(name)}.json"
        keyed = {"config": config, "simulator": self.fingerprint}
        key = hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()
        if path.exists():
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                stored = None
            if isinstance(stored, dict) and stored.get("config_key") == key:
                self.step(name)
                return stored["result"]  # type: ignore[no-any-return]
            if isinstance(stored, dict) and stored.get("simulator") != self.fingerprint:
                logger.warning(
                    "%s was computed by another simulator (fingerprint %s, now %s): recomputing",
                    path,
                    str(stored.get("simulator") or "not recorded")[:12],
                    self.fingerprint[:12],
                )
        started = time.monotonic()
        result = compute()
        payload = {
            "name": name,
            "config": config,
            "config_key": key,
            "simulator": self.fingerprint,
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


def _free_path(path: Path) -> Path:
    """``path``, or ``path.2``, ``path.3``, ... whichever does not exist yet."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


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
