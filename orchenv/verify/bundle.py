"""Submission bundles: one directory a maintainer can verify offline (``orchenv submit``).

Layout (``BUNDLE/``; it is also an ``orchenv eval`` run directory, so ``orchenv leaderboard``
reads it as one)::

    bundle.json      the manifest: format, orchenv version, when it was written, the run's
                     config (env id and kwargs, pool, split, controller and kwargs, seeds,
                     episodes, privileged), the run's date, where the calls came from, and the
                     sha256 of every file below; ``bundle_sha256`` digests that file list
    run.json         copied from the run directory
    episodes.jsonl   copied: every episode's submitted actions and claimed outcome, each line
                     with its ``line_digest``
    summary.json     copied: the claimed aggregates
    pool.json        the pool document the run used (agents, models, price keys or prices,
                     backends), so the verifier rebuilds it without the submitter's files
    calls.jsonl      every agent call (replay format 2, ``orchenv.backends.replay``): the
                     controller's own model calls too when they were recorded
    reference/       optional: the same controller's run on another split (run.json,
                     episodes.jsonl, summary.json, calls.jsonl), for the outcome-alignment check

Where ``calls.jsonl`` comes from: a run recorded live (its pool built with
``make_pool(..., record_to=RUN_DIR/calls.jsonl)``, or ``--calls FILE``) is copied as
recorded. A run whose agents are all free and deterministic (``simulated``) needs no
recording: ``write_bundle`` re-records its calls by replaying each episode's actions against
the same backend, and refuses the run if a replayed episode differs from its line. A run with
live agents and no recording is refused (its answers cannot be re-derived).

The digests bind the files together against accidents and edits after submission; they are
not a signature (anyone who edits a file can recompute them), which is why ``orchenv verify``
re-derives every number instead of trusting them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orchenv
from orchenv.error import ConfigError, DataError
from orchenv.eval.rundir import MAX_FILE_BYTES as _MAX_FILE_BYTES
from orchenv.eval.rundir import check_regular

logger = logging.getLogger(__name__)

FORMAT = "orchenv-submission"
VERSION = 1
MANIFEST = "bundle.json"
RUN_FILES = ("run.json", "episodes.jsonl", "summary.json")
CALLS = "calls.jsonl"
POOL = "pool.json"
REFERENCE = "reference"
#: the largest bundle file hashed or read (a 1,000-episode run is a few megabytes)
MAX_FILE_BYTES = _MAX_FILE_BYTES


#: the run's configuration a bundle declares and a verification report repeats
RUN_FIELDS = (
    "env_id",
    "env_kwargs",
    "pool",
    "split",
    "controller",
    "controller_kwargs",
    "controller_label",
    "seeds",
    "episodes",
    "privileged",
)


def sha256_file(path: Path) -> str:
    """sha256 of a regular file of at most ``MAX_FILE_BYTES`` (checked before it is opened:
    a FIFO, device or symlink is a ``DataError``, never read or followed)."""
    check_regular(path, MAX_FILE_BYTES)
    h = hashlib.sha256()
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    with os.fdopen(os.open(path, flags), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digest_files(files: Mapping[str, str]) -> str:
    """The bundle's digest: sha256 of the canonical JSON of its {relative path: sha256}."""
    canon = json.dumps(dict(sorted(files.items())), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def file_digests(root: Path, names: list[str]) -> dict[str, str]:
    """{name: sha256} of the names that are regular files of ``root`` (a missing file, a
    symlink, a FIFO or an oversize file has no digest, so it never matches one)."""
    out = {}
    for name in names:
        try:
            out[name] = sha256_file(root / name)
        except (OSError, DataError):
            continue
    return out


def bad_files(root: Path, names: list[str]) -> list[str]:
    """Why each present name of ``root`` cannot be read as a bundle file (symlink, FIFO,
    device, directory, over ``MAX_FILE_BYTES``), checked without opening anything; also a
    parent directory of a name that is a symlink. Missing files are not listed here."""
    problems = []
    for name in names:
        parts = Path(name).parts
        for i in range(1, len(parts)):  # reference/ as a link out of the bundle
            parent = root.joinpath(*parts[:i])
            if parent.is_symlink():
                problems.append(f"{parent} is a symbolic link")
                break
        else:
            try:
                check_regular(root / name, MAX_FILE_BYTES)
            except FileNotFoundError:
                continue
            except (OSError, DataError) as exc:
                problems.append(str(exc))
    return sorted(set(problems))


def _pool_document(run: Mapping[str, Any], pool_file: Path | None) -> tuple[dict[str, Any], str]:
    """The run's pool document and where it came from: ``"document"`` (a preset or pool
    file) or ``"env"`` (a pool the env builds in code, described from the env itself)."""
    from orchenv.pool import check_pool_data, load_preset_data
    from orchenv.verify.replay import env_pool_env, pool_document

    if pool_file is not None:
        return dict(load_preset_data(pool_file)), "document"
    pool = run.get("pool")
    if not isinstance(pool, str) or not pool:
        raise ConfigError(
            "the run names no pool preset or pool file; pass --pool-file with the pool it used"
        )
    try:
        data = dict(load_preset_data(pool))
    except (OSError, ConfigError, DataError):
        env, built = env_pool_env(run)  # ConfigError naming --pool-file when it is not the run's
        env.close()
        return check_pool_data(pool_document(built), f"the pool {pool!r} of the env"), "env"
    env_kwargs = run.get("env_kwargs") or {}
    backend = env_kwargs.get("backend") if isinstance(env_kwargs, Mapping) else None
    if isinstance(backend, str):  # the run overrode every agent's backend (-e backend=...)
        data["agents"] = [{**a, "backend": backend} for a in data["agents"]]
    return check_pool_data(data, f"pool {pool!r}"), "document"


def _run_files(run_dir: Path) -> dict[str, Any]:
    from orchenv.eval.harness import load_summary, read_episode_log, read_json_file
    from orchenv.schema import RUN_INFO

    for name in RUN_FILES:
        if not (run_dir / name).is_file():
            raise DataError(
                f"{run_dir / name} is missing: a bundle is made from a finished `orchenv eval` "
                "run directory (run.json, episodes.jsonl, summary.json)"
            )
    run = read_json_file(run_dir / "run.json", RUN_INFO)
    rows = read_episode_log(run_dir / "episodes.jsonl")  # digests and schema checked
    load_summary(run_dir)  # finite numbers, schema
    return {"run": run, "rows": rows}


def write_bundle(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    calls: str | os.PathLike[str] | None = None,
    reference: str | os.PathLike[str] | None = None,
    reference_calls: str | os.PathLike[str] | None = None,
    pool_file: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the submission bundle of ``run_dir`` into ``out`` (module docstring)."""
    src, dst = Path(run_dir), Path(out)
    if dst.exists() and any(dst.iterdir()):
        if not overwrite:
            raise ConfigError(f"{dst} is not empty; choose a new --out or pass --overwrite")
        shutil.rmtree(dst)
    dst.mkdir(parents=True, exist_ok=True)
    found = _run_files(src)
    run = found["run"]
    pool_doc, pool_source = _pool_document(run, Path(pool_file) if pool_file else None)
    (dst / POOL).write_text(json.dumps(pool_doc, indent=2) + "\n", encoding="utf-8")
    calls_source = _place_run(
        src, dst, found, pool_doc, Path(calls) if calls else None, dst / POOL, pool_source
    )
    names = [*RUN_FILES, POOL, CALLS]
    has_reference = reference is not None
    if has_reference:
        assert reference is not None
        ref_src = Path(reference)
        ref_found = _run_files(ref_src)
        ref_run = ref_found["run"]
        same = ("env_id", "controller", "controller_kwargs", "pool")
        diffs = [k for k in same if ref_run.get(k) != run.get(k)]
        if diffs:
            raise ConfigError(
                f"the reference run differs from the run in {', '.join(diffs)}: it must be the "
                "same controller on the same env and pool, on another split"
            )
        if ref_run.get("split") == run.get("split"):
            raise ConfigError("the reference run must be on another split than the run")
        ref_dst = dst / REFERENCE
        ref_dst.mkdir()
        _place_run(
            ref_src,
            ref_dst,
            ref_found,
            pool_doc,
            Path(reference_calls) if reference_calls else None,
            dst / POOL,
            pool_source,
        )
        names += [f"{REFERENCE}/{n}" for n in (*RUN_FILES, CALLS)]
    files = file_digests(dst, names)
    rows = found["rows"]
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "orchenv": orchenv.__version__,
        "created_at": _now(),
        "run": {k: run.get(k) for k in (*RUN_FIELDS, "run_key")},
        "run_date": _run_date(
            dst / CALLS if calls_source.startswith("recorded") else None, src / "run.json"
        ),
        "episodes_in_log": len(rows),
        "calls_source": calls_source,
        "pool_source": pool_source,
        "reference": has_reference,
        "files": files,
        "bundle_sha256": digest_files(files),
    }
    (dst / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    logger.info("bundle of %s written to %s (%d files)", src, dst, len(files))
    return dst


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _run_date(calls: Path | None, run_json: Path) -> str:
    """The run's date (YYYY-MM-DD): its earliest recorded call, else (no recording, or one
    re-recorded at submission) run.json's modification time."""
    from orchenv.backends.replay import iter_records

    dates = []
    if calls is not None and calls.is_file() and calls.stat().st_size:
        for record in iter_records(calls):
            stamp = record.get("recorded_at")
            if isinstance(stamp, str) and len(stamp) >= 10:
                dates.append(stamp[:10])
    if dates:
        return min(dates)
    return datetime.fromtimestamp(run_json.stat().st_mtime, timezone.utc).date().isoformat()


def _place_run(
    src: Path,
    dst: Path,
    found: Mapping[str, Any],
    pool_doc: Mapping[str, Any],
    calls: Path | None,
    pool_path: Path,
    pool_source: str = "document",
) -> str:
    """Copy the run files and the call recording into ``dst``; returns where the calls came
    from (module docstring)."""
    for name in RUN_FILES:
        shutil.copyfile(src / name, dst / name)
    if calls is None and (src / CALLS).is_file():
        calls = src / CALLS
    if calls is not None:
        if not calls.is_file():
            raise DataError(f"call recording {calls} does not exist")
        shutil.copyfile(calls, dst / CALLS)
        return f"recorded during the run ({calls.name})"
    live = live_agents(pool_doc, pool_source)
    if live:
        raise ConfigError(
            f"{src} has no recording of its agent calls ({CALLS}) and agents {', '.join(live)} "
            "are not deterministic: their answers cannot be re-derived. Record the run (build "
            f"its pool with make_pool(..., record_to='{src}/{CALLS}')) or pass --calls FILE"
        )
    _rerecord(dst, found, pool_path, pool_source)
    return "re-recorded at submission from the pool's deterministic backends"


def live_agents(pool_doc: Mapping[str, Any], pool_source: str) -> list[str]:
    """Agents whose answers cannot be re-derived: every backend but ``simulated`` in a pool
    document; the model-calling backends (``LIVE_BACKENDS``) in a pool the env builds."""
    from orchenv.verify.replay import DETERMINISTIC_BACKENDS, LIVE_BACKENDS

    def live(backend: str) -> bool:
        if pool_source == "env":
            return backend in LIVE_BACKENDS
        return backend not in DETERMINISTIC_BACKENDS

    return sorted(
        {str(a.get("name")) for a in pool_doc["agents"] if live(str(a.get("backend", "simulated")))}
    )


def _rerecord(dst: Path, found: Mapping[str, Any], pool_path: Path, pool_source: str) -> None:
    """Record a deterministic run's calls by replaying its actions through a RecordingBackend."""
    from orchenv.eval.harness import episode_seed
    from orchenv.pool import make_backend, make_pool
    from orchenv.verify.replay import (
        compare_episode,
        env_pool_env,
        make_replay_env,
        replay_episodes,
    )

    run = found["run"]
    env_kwargs = dict(run.get("env_kwargs") or {})
    if pool_source == "env":
        env, pool = env_pool_env(run)
        if pool.agents:
            pool.wrap_backends(lambda name, b: make_backend("recording", inner=b, path=dst / CALLS))
    else:
        backend_kwargs = env_kwargs.get("backend_kwargs") or {}
        pool = make_pool(pool_path, backend_kwargs=backend_kwargs, record_to=dst / CALLS)
        env = make_replay_env(str(run["env_id"]), env_kwargs, pool, run.get("split"))
    try:
        rows = plan_order(found["rows"], run.get("seeds"))
        replayed = replay_episodes(
            env, rows, None, episode_seed=episode_seed, rerun=rerunnable(run)
        )
    finally:
        env.close()
    for row, ep in zip(rows, replayed, strict=True):
        diffs = compare_episode(row, ep)
        if diffs:
            (dst / CALLS).unlink(missing_ok=True)
            raise DataError(
                f"seed {ep.seed} episode {ep.episode} of the run does not replay as logged "
                f"({'; '.join(diffs[:3])}): the run is not consistent with its env and pool, "
                "so it cannot be submitted"
            )
    if not (dst / CALLS).exists():
        (dst / CALLS).touch()


def rerunnable(run: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(name, kwargs) of the run's controller when it is registered in this orchenv (so it
    can be re-executed), else None (only its actions can be replayed)."""
    from orchenv.controllers import CONTROLLERS
    from orchenv.error import OrchEnvError

    name = run.get("controller")
    kwargs = run.get("controller_kwargs") or {}
    if not isinstance(name, str) or not isinstance(kwargs, Mapping):
        return None
    try:
        CONTROLLERS.resolve(name)
    except (OrchEnvError, ImportError, AttributeError):
        return None
    if _trusts_remote_code(kwargs):
        from orchenv.error import DataError

        raise DataError(
            f"controller {name[:100]!r} asks for trust_remote_code: re-executing it would run "
            "the model folder's Python in the verifier's own process; submit the run without "
            "trust_remote_code, or as an entry point re-executed in the sandbox "
            "(orchenv verify --rerun --board)"
        )
    return name, dict(kwargs)


def _trusts_remote_code(value: Any, depth: int = 0) -> bool:
    """Whether ``trust_remote_code`` is set truthy anywhere in the kwargs ``value``."""
    if depth > 32:
        return True  # too deep to inspect: treat as unsafe
    if isinstance(value, Mapping):
        return any(
            (k == "trust_remote_code" and v not in (False, None, 0, "", "false", "False"))
            or _trusts_remote_code(v, depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return any(_trusts_remote_code(v, depth + 1) for v in value)
    return False


def plan_order(rows: list[dict[str, Any]], seeds: Any = None) -> list[dict[str, Any]]:
    """Episode lines in the harness's play order: by seed (the run's seed order), then
    episode index."""
    seeds = [s for s in seeds if isinstance(s, int)] if isinstance(seeds, list) else []
    for row in rows:
        if row["seed"] not in seeds:
            seeds.append(row["seed"])
    rank = {s: i for i, s in enumerate(seeds)}
    return sorted(rows, key=lambda r: (rank[r["seed"]], r["episode"]))
