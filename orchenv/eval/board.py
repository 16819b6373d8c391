"""A board is a spec: ``orchenv board init`` writes the file that says which runs a board
compares, and ``orchenv leaderboard --board FILE`` keeps every other run out of its group.

The board file (JSON, ``format: "orchenv-board"``) names:

- ``env_id`` and ``env_kwargs`` (canonical: sorted keys, checked by building the env once);
- ``pool``: a shipped preset's ``name`` and the ``sha256`` of its canonical document (a preset
  edited later, or a bundle's ``pool.json`` that differs from it, does not match); or, for a
  pool the env builds in code (MultihopQA's ``multihop``, ALFWorldRoles' ``alfworld-roles``,
  WebShop's ``none``: ``env_pool_spec``), ``built_by: "env"`` with the ``sha256`` of the
  document of the pool the env builds under the board's kwargs (agents, models, tiers,
  prices, calibration, backend names: what a bundle's ``pool.json`` holds) and the
  ``backends_sha256`` of its backends' public settings (class, seed, ...), so a variant pool
  (another seed, another accuracy, another orchenv's prices) lands in another group;
- ``split``;
- ``primary_metric``: what the board ranks (``orchenv.eval.metrics``: the env's objective);
- ``dev_plan``: the public seeds and episodes per seed every submission plays (reproducible by
  anyone);
- ``sealed_plan``: the number of sealed episodes, the id of the maintainer's key
  (``key_id``: a hash of the key, never the key) and, for a file-based task source, the
  ``task_file`` (its ``sha256`` and the task-source argument it fills, e.g. ``path``: the
  private file itself is named only at play time, never in the spec or a bundle);
- ``spec_sha256``: sha256 of the canonical JSON of everything above. Rows are grouped by it.

``orchenv board key FILE`` writes the maintainer's key (``orchenv.verify.keys``): it signs
verdicts and identifies the sealed plan; keep it out of every bundle and repository.

Sealed mode (``sealed_plan``, ``play_sealed``): the env is built with the shared argument
``sealed`` (``orchenv.core.OrchestrationEnv``), a per-board secret derived from the key
(``sealed_secret``). The base env mixes it into the task source's seed, the task draw and
the seed of every seeded backend of the pool (env-built pools too), and shows the task only
by an opaque id (``orchenv.seeding.seal_task_id``) in ``info`` and the observation; the
maintainer recovers the real ids with ``sealed_task_ids``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError
from orchenv.seeding import open_task_id, seal_task_id

FORMAT = "orchenv-board"
VERSION = 1
SPEC_FIELDS = (
    "format",
    "version",
    "env_id",
    "env_kwargs",
    "pool",
    "split",
    "primary_metric",
    "dev_plan",
    "sealed_plan",
)


def _canon(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def pool_sha256(pool_doc: Mapping[str, Any]) -> str:
    """sha256 of a pool document's canonical JSON (as ``check_pool_data`` returns it)."""
    return hashlib.sha256(_canon(dict(pool_doc)).encode()).hexdigest()


def preset_sha256(name: str) -> str:
    """sha256 of the shipped preset ``name`` (``ConfigError`` for a pool that is not one)."""
    from orchenv.pool import list_presets, load_preset_data

    if name not in list_presets():
        raise ConfigError(
            f"a board's pool must be a shipped preset ({', '.join(list_presets())}), not "
            f"{name!r}: submitters rebuild it by name"
        )
    return pool_sha256(load_preset_data(name))


#: the spec's ``pool["built_by"]`` of a pool the env builds in code (not a shipped preset)
ENV_BUILT = "env"
#: env-built pool hashes, by (env id, canonical kwargs, split, pool): building an env per row
#: of a board would be slow, and the same orchenv builds the same pool
_ENV_POOLS: dict[str, dict[str, Any]] = {}


def _small_json(value: Any) -> str | None:
    """``value``'s canonical JSON when it is small (at most 20,000 characters), plain JSON
    data and names no file path; else None."""
    try:
        text = _canon(value)
    except (TypeError, ValueError, RecursionError):
        return None
    return text if len(text) <= 20_000 and "/" not in text and "\\\\" not in text else None


def _scalar_settings(obj: Any, depth: int = 0) -> dict[str, Any]:
    """A backend's public settings: its class, its public scalar attributes (numbers, and
    strings that are no file paths), its small plain-data tables (``_small_json``: e.g.
    per-level accuracies) and, recursively, its ``inner`` backend's; the names of the types
    of its other public attributes (a token counter, a tokenizer)."""
    out: dict[str, Any] = {"class": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    if depth > 8:
        return out
    attrs = getattr(obj, "__dict__", {})
    for name in sorted(attrs):
        value = attrs[name]
        if name.startswith("_") or name == "inner":
            continue
        if isinstance(value, bool) or value is None:
            out[name] = value
        elif isinstance(value, int):
            out[name] = str(value)  # any size, exactly
        elif isinstance(value, float):
            out[name] = repr(value)
        elif isinstance(value, str):
            if "/" not in value and "\\" not in value and len(value) <= 200:
                out[name] = value
        elif isinstance(value, (dict, list, tuple)) and _small_json(value) is not None:
            out[name] = _small_json(value)
        elif not callable(value):
            out[name] = f"<{type(value).__module__}.{type(value).__qualname__}>"
    inner = attrs.get("inner")
    if inner is not None:
        out["inner"] = _scalar_settings(inner, depth + 1)
    return out


def env_pool_spec(
    env_id: str, env_kwargs: Mapping[str, Any], split: str, pool: str
) -> dict[str, Any]:
    """The board spec's ``pool`` for a pool the env ``env_id`` builds in code under
    ``env_kwargs`` and ``split`` (its ``pool`` argument left to the env; the pool it builds
    must be named ``pool``): ``{"name", "built_by": "env", "sha256", "backends_sha256"}``.
    ``sha256`` hashes the pool's document (``orchenv.verify.replay.pool_document``: what
    ``orchenv submit`` writes as a bundle's ``pool.json``), ``backends_sha256`` its backends'
    public settings (``_scalar_settings``: class, seed, ...). ``ConfigError`` when the env
    cannot be built or builds a pool of another name."""
    import gymnasium as gym

    from orchenv.pool import list_presets
    from orchenv.verify.replay import pool_document

    kwargs = json.loads(_canon(dict(env_kwargs)))
    tag = _canon([env_id, kwargs, split, pool])
    if tag in _ENV_POOLS:
        return dict(_ENV_POOLS[tag])
    presets = ", ".join(list_presets())
    try:
        env = gym.make(env_id, **{**kwargs, "split": split})
        built = getattr(env.unwrapped, "pool", None)
    except Exception as exc:
        raise ConfigError(
            f"{env_id} cannot be built with kwargs {_canon(kwargs)[:200]} to read the pool it "
            f"builds ({type(exc).__name__}: {str(exc)[:300]})"
        ) from exc
    name = getattr(built, "name", None)
    if str(name) != pool or not hasattr(built, "agents"):
        env.close()
        raise ConfigError(
            f"a board's pool is a shipped preset ({presets}) or the pool the env builds "
            f"itself, by its name; {pool[:200]!r} is neither: {env_id} builds the pool {name!r} "
            f"with kwargs {_canon(kwargs)[:200]} (--pool {name})"
        )
    try:
        document = pool_document(built)
        backends = {
            str(label): _scalar_settings(backend)
            for label, backend in sorted(getattr(built, "_backends", {}).items())
        }
    finally:
        env.close()
    out = {
        "name": str(pool),
        "built_by": ENV_BUILT,
        "sha256": pool_sha256(document),
        "backends_sha256": hashlib.sha256(_canon(backends).encode()).hexdigest(),
    }
    _ENV_POOLS[tag] = dict(out)
    return out


def pool_spec(env_id: str, env_kwargs: Mapping[str, Any], split: str, pool: str) -> dict[str, Any]:
    """The spec's ``pool``: a shipped preset by name and content hash, else the pool the env
    builds (``env_pool_spec``); ``ConfigError`` when ``pool`` is neither (a pool file is
    refused: submitters rebuild the board's pool by name)."""
    from orchenv.pool import list_presets

    if not isinstance(pool, str) or not pool:
        raise ConfigError(f"a board's pool is named by a string, got {str(pool)[:200]!r}")
    if pool in list_presets():
        return {"name": pool, "sha256": preset_sha256(pool)}
    if os.sep in pool or pool.endswith((".json", ".yaml", ".yml")):
        raise ConfigError(
            f"a board's pool must be a shipped preset ({', '.join(list_presets())}) or the "
            f"pool the env builds itself, not the pool file {pool[:200]!r}: submitters rebuild "
            "the board's pool by name"
        )
    return env_pool_spec(env_id, env_kwargs, split, pool)


def pool_argument(pool: Mapping[str, Any]) -> str | None:
    """The ``pool`` argument a board's env is built with from the spec's ``pool``: the
    preset's name, or None for a pool the env builds itself (an env without agents, e.g.
    WebShop, refuses any ``pool`` argument)."""
    return None if pool.get("built_by") == ENV_BUILT else str(pool["name"])


def key_id(key: bytes) -> str:
    """A public id of the maintainer's key (a hash of it; the key cannot be recovered)."""
    return hashlib.sha256(b"orchenv-board-key:" + key).hexdigest()[:16]


def spec_sha256(spec: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canon({k: spec.get(k) for k in SPEC_FIELDS}).encode()).hexdigest()


def make_spec(
    env_id: str,
    *,
    pool: str,
    split: str,
    env_kwargs: Mapping[str, Any] | None = None,
    dev_seeds: Sequence[int] = (0,),
    dev_episodes: int = 100,
    sealed_episodes: int = 0,
    key: bytes | None = None,
    sealed_task_file: str | os.PathLike[str] | None = None,
    task_file_kwarg: str = "path",
) -> dict[str, Any]:
    """A board spec (module docstring); the env is built once to check its kwargs. A sealed
    plan needs tasks nobody can generate from public code: a generated task source (its seed
    is sealed) or ``sealed_task_file``, a private file read by the task source's argument
    ``task_file_kwarg`` (only its sha256 enters the spec); ``ConfigError`` otherwise."""
    import gymnasium as gym

    from orchenv.eval.metrics import primary_metric

    kwargs = json.loads(_canon(dict(env_kwargs or {})))
    try:
        env = gym.make(env_id, **kwargs)
        env.close()
    except Exception as exc:
        raise ConfigError(f"{env_id} cannot be built with kwargs {kwargs}: {exc}") from exc
    if dev_episodes < 1 or not dev_seeds:
        raise ConfigError("the dev plan needs at least one seed and one episode per seed")
    if sealed_episodes and key is None:
        raise ConfigError("a sealed plan needs the maintainer's key (--key FILE)")
    task_file = None
    if sealed_task_file is not None:
        if not sealed_episodes:
            raise ConfigError("a private task file is for the sealed plan: add --sealed-episodes N")
        task_file = {"sha256": file_sha256(sealed_task_file), "kwarg": str(task_file_kwarg)}
    pool_entry = pool_spec(env_id, kwargs, split, pool)
    if task_file is None and sealed_episodes:
        _check_sealable(env_id, kwargs, split, pool_argument(pool_entry))
    metric = primary_metric(env_id)
    spec: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "env_id": env_id,
        "env_kwargs": kwargs,
        "pool": pool_entry,
        "split": split,
        "primary_metric": {"field": metric.field, "label": metric.label},
        "dev_plan": {"seeds": [int(s) for s in dev_seeds], "episodes": int(dev_episodes)},
        "sealed_plan": {
            "episodes": int(sealed_episodes),
            "key_id": key_id(key) if key is not None else None,
            **({"task_file": task_file} if task_file is not None else {}),
        },
    }
    spec["spec_sha256"] = spec_sha256(spec)
    return spec


def write_spec(path: str | os.PathLike[str], spec: Mapping[str, Any]) -> Path:
    target = Path(path)
    if target.exists():
        raise ConfigError(f"{target} exists: a board spec is not overwritten; choose a new path")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(dict(spec), indent=2) + "\n", encoding="utf-8")
    return target


def read_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A board file, its hash checked (``DataError`` for an edited or foreign file)."""
    from orchenv.eval.rundir import read_json_file

    spec = read_json_file(Path(path))
    if spec.get("format") != FORMAT:
        raise DataError(f"{path} is not an orchenv board file (format {spec.get('format')!r})")
    if spec.get("spec_sha256") != spec_sha256(spec):
        raise DataError(
            f"{path}: spec_sha256 does not match its content: the board file was edited; "
            "write a new one with `orchenv board init`"
        )
    return spec


def spec_mismatch(
    spec: Mapping[str, Any], run: Mapping[str, Any], pool_doc: Mapping[str, Any] | None = None
) -> list[str]:
    """Why ``run`` (a run.json) is not a run of the board ``spec``: [] when it is. The pool is
    checked by name and content (``pool_doc``: a bundle's pool.json; else the preset of
    this orchenv; for an env-built pool, also the pool this orchenv's env builds for the
    board: ``env_pool_spec``)."""
    why = []
    if run.get("env_id") != spec["env_id"]:
        why.append(f"env {run.get('env_id')!r}, not {spec['env_id']!r}")
    kwargs = json.loads(_canon(dict(run.get("env_kwargs") or {})))
    if kwargs != spec["env_kwargs"]:
        why.append(
            f"env kwargs {_canon(kwargs)[:200]}, not the board's {_canon(spec['env_kwargs'])}"
        )
    pool = spec["pool"]
    if run.get("pool") != pool["name"]:
        why.append(f"pool {run.get('pool')!r}, not {pool['name']!r}")
    elif pool.get("built_by") == ENV_BUILT:
        why += _env_pool_mismatch(spec, run, pool_doc)
    else:
        try:
            have = pool_sha256(pool_doc) if pool_doc is not None else preset_sha256(pool["name"])
        except (ConfigError, TypeError, ValueError) as exc:
            have = f"unreadable ({exc})"
        if have != pool["sha256"]:
            why.append(
                f"pool {pool['name']!r} has content {have[:16]}, not the board's "
                f"{pool['sha256'][:16]} (an edited pool.json, or another orchenv's preset)"
            )
    if run.get("split") != spec["split"]:
        why.append(f"split {run.get('split')!r}, not {spec['split']!r}")
    plan = spec["dev_plan"]
    seeds, episodes = run.get("seeds"), run.get("episodes")
    if seeds != plan["seeds"] or episodes != plan["episodes"]:
        why.append(
            f"seed plan {seeds} x {episodes} episodes is not the board's dev plan "
            f"{plan['seeds']} x {plan['episodes']} (the board chooses the tasks, not the "
            "submitter)"
        )
    return why


def _env_pool_mismatch(
    spec: Mapping[str, Any], run: Mapping[str, Any], pool_doc: Mapping[str, Any] | None
) -> list[str]:
    """Why the env-built pool of ``run`` is not the board's: the pool this orchenv's env
    builds under the board's kwargs and split (its document and backends; the run's own
    kwargs are compared with the board's apart, and never built here) and, for a bundle,
    its ``pool.json``, each compared with the spec's hashes."""
    pool = spec["pool"]
    why = []
    try:
        built = env_pool_spec(spec["env_id"], spec["env_kwargs"], spec["split"], pool["name"])
    except ConfigError as exc:
        return [f"the env's pool {pool['name']!r} cannot be built here: {exc}"]
    for field, what in (("sha256", "agents and prices"), ("backends_sha256", "backends")):
        if built[field] != pool.get(field):
            why.append(
                f"the pool {pool['name']!r} that {spec['env_id']} builds has {what} "
                f"{built[field][:16]}, not the board's {str(pool.get(field))[:16]} (other env "
                "kwargs, or another orchenv's pool)"
            )
    if pool_doc is not None:
        try:
            have = pool_sha256(pool_doc)
        except (TypeError, ValueError) as exc:
            have = f"unreadable ({exc})"
        if have != pool["sha256"]:
            why.append(
                f"pool.json has content {have[:16]}, not the board's {pool['sha256'][:16]} "
                f"(the pool {spec['env_id']} builds): an edited pool.json"
            )
    return why


# -- the sealed plan ---------------------------------------------------------------------------------
SEALED_FILE = "sealed.json"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a regular file's bytes (``ConfigError`` for a missing, non-regular or
    symlinked file)."""
    import stat

    p = Path(path)
    try:
        mode = os.lstat(p).st_mode
    except OSError as exc:
        raise ConfigError(f"task file {p} cannot be read ({exc})") from exc
    if not stat.S_ISREG(mode):
        raise ConfigError(f"task file {p} is not a regular file (symlinks and FIFOs are refused)")
    digest = hashlib.sha256()
    with open(p, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_key(spec: Mapping[str, Any], key: bytes) -> Mapping[str, Any]:
    plan = spec["sealed_plan"]
    if not plan.get("episodes"):
        raise ConfigError("this board has no sealed plan (orchenv board init --sealed-episodes N)")
    if plan.get("key_id") != key_id(key):
        raise ConfigError("this key is not the board's: its id differs from the spec's key_id")
    return plan


def sealed_secret(spec: Mapping[str, Any], key: bytes) -> str:
    """The board's sealed-plan secret (hex): an HMAC of the spec hash under the maintainer's
    ``key``. The env's ``sealed`` argument; it opens the board's opaque task ids
    (``orchenv.seeding.open_task_id``). Not the key: it cannot sign anything."""
    _check_key(spec, key)
    tag = f"orchenv-sealed-secret:{spec['spec_sha256']}".encode()
    return hmac.new(key, tag, hashlib.sha256).hexdigest()


def _check_sealable(env_id: str, kwargs: Mapping[str, Any], split: str, pool: str | None) -> None:
    """``ConfigError`` unless a sealed env of ``env_id`` draws tasks that are not in its public
    task source (a generated source whose seed the secret changes)."""
    import gymnasium as gym

    from orchenv.error import NoTaskSourceError, OrchEnvError

    probe = "0" * 64
    args = {**kwargs, "split": split, **({"pool": pool} if pool is not None else {})}
    public: Any = gym.make(env_id, **args).unwrapped
    sealed: Any = gym.make(env_id, **args, sealed=probe).unwrapped
    try:
        try:
            source = public.task_source
        except NoTaskSourceError:
            raise ConfigError(
                f"{env_id} brings its own tasks (no task source): the board cannot seal them "
                "(the env would have to take the sealed secret into its own generator)"
            ) from None
        drawn: dict[str, str] | None = None  # the public split's tasks, read when needed

        def public_prompt(task_id: str) -> str | None:
            nonlocal drawn
            # an unknown id, or a source that cannot look ids up: read the split below
            with contextlib.suppress(OrchEnvError, LookupError):
                return str(source.by_id(task_id).prompt)
            if drawn is None:
                drawn = {}
                try:
                    for i, task in enumerate(source.iter(public.split)):
                        if i >= 100_000:
                            break
                        drawn[task.id] = task.prompt
                except (OrchEnvError, LookupError):
                    pass
            return drawn.get(task_id)

        for seed in range(3):
            sealed.reset(seed=seed)
            real = sealed.task
            have = public_prompt(real.id) if real is not None else None
            # the public task of that id, with its prompt (or with none: a source whose tasks
            # are files, e.g. ALFWorld's games, the env reads the prompt from later)
            if real is not None and have is not None and have in ("", real.prompt):
                if public._task_source_arg is None:
                    raise ConfigError(
                        f"{env_id} brings its own tasks (no named task source): the board "
                        "cannot seal them (the env would have to take the sealed secret into "
                        "its own generator)"
                    )
                raise ConfigError(
                    f"{env_id}'s task source {public._task_source_arg!r} takes no seed, so its "
                    "sealed tasks would be the public ones: give it a seed (-e "
                    "task_source_kwargs='{\"seed\": 0}') if it takes one, or name a private "
                    "task file (orchenv board init --sealed-task-file FILE)"
                )
    finally:
        public.close()
        sealed.close()


def sealed_plan(
    spec: Mapping[str, Any], key: bytes, task_file: str | os.PathLike[str] | None = None
) -> tuple[list[int], dict[str, Any]]:
    """The sealed plan's run seeds and env kwargs. The seeds (which, mixed with the secret,
    pick the tasks and their order) are HMACs of the maintainer's ``key``; the kwargs add
    ``sealed`` (``sealed_secret``), with which the base env seals the task source's seed,
    the pool's backend seeds and the task ids it shows; so the sealed tasks and the pool's
    luck on them cannot be enumerated or simulated from public code. ``task_file``: the
    board's private task file (its sha256 must be the spec's), put into
    ``task_source_kwargs``. ``ConfigError`` when the key is not the board's, the board has
    no sealed plan, or the task file is missing or another file."""
    from orchenv.seeding import sealed_int

    plan = _check_key(spec, key)
    tag = spec["spec_sha256"]
    seeds = [sealed_int(key, "orchenv-sealed-seed", tag) % 2**31]
    kwargs = json.loads(_canon(spec["env_kwargs"]))
    kwargs["sealed"] = sealed_secret(spec, key)
    wanted = plan.get("task_file")
    if wanted:
        if task_file is None:
            raise ConfigError(
                "this board's sealed plan reads a private task file (sha256 "
                f"{wanted['sha256'][:16]}...): pass it (orchenv board play --task-file FILE)"
            )
        have = file_sha256(task_file)
        if have != wanted["sha256"]:
            raise ConfigError(
                f"task file {task_file} has sha256 {have[:16]}..., not the board's "
                f"{wanted['sha256'][:16]}...: it is another file"
            )
        source_kwargs = dict(kwargs.get("task_source_kwargs") or {})
        source_kwargs[str(wanted["kwarg"])] = str(Path(task_file).resolve())
        kwargs["task_source_kwargs"] = source_kwargs
    elif task_file is not None:
        raise ConfigError("this board's sealed plan names no private task file; drop --task-file")
    return seeds, kwargs


def sealed_task_ids(
    run_dir: str | os.PathLike[str], spec: Mapping[str, Any], key: bytes
) -> list[str]:
    """The real task ids of a sealed run's episodes, in log order: its ``episodes.jsonl``
    shows only opaque ids, which the board's secret opens (``orchenv.seeding.open_task_id``)."""
    from orchenv.eval.harness import read_episode_log
    from orchenv.seeding import open_task_id

    secret = sealed_secret(spec, key)
    rows = read_episode_log(Path(run_dir) / "episodes.jsonl")
    return [open_task_id(str(r.get("task_id", "")), secret) for r in rows]


#: what a sealed run's run.json / summary.json show instead of the secret and the private file
WITHHELD = "<withheld: the board's sealed plan>"


def _withhold(run_dir: Path, env_kwargs: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
    """Write ``WITHHELD`` over the secret (and the private task file's path) in the run's
    ``run.json`` and ``summary.json``, so a board built from the run shows neither."""
    task_file = spec["sealed_plan"].get("task_file")
    kwarg = str(task_file["kwarg"]) if task_file else None

    def clean(kwargs: Any) -> Any:
        if not isinstance(kwargs, dict):
            return kwargs
        out = dict(kwargs)
        if "sealed" in out:
            out["sealed"] = WITHHELD
        source = out.get("task_source_kwargs")
        if kwarg and isinstance(source, dict) and kwarg in source:
            out["task_source_kwargs"] = {**source, kwarg: WITHHELD}
        return out

    for name in ("run.json", "summary.json"):
        path = run_dir / name
        data = json.loads(path.read_text(encoding="utf-8"))
        holder = data.get("run") if name == "summary.json" else data
        if isinstance(holder, dict):
            holder["env_kwargs"] = clean(holder.get("env_kwargs"))
        text = json.dumps(data, indent=2) + "\n"
        if env_kwargs["sealed"] in text:
            raise ConfigError(f"{path} still holds the sealed secret after withholding it")
        path.write_text(text, encoding="utf-8")


def play_sealed(
    bundle: str | os.PathLike[str],
    spec: Mapping[str, Any],
    key: bytes,
    out: str | os.PathLike[str],
    task_file: str | os.PathLike[str] | None = None,
) -> Path:
    """Re-execute a submission's registered controller on the board's sealed plan (played by
    the maintainer: the submitter never sees these tasks) into the run directory ``out``,
    and sign it (``sealed.json``: HMAC of the spec hash and the run files' digests). The
    run's ``run.json`` / ``summary.json`` show ``WITHHELD`` for the secret and the private
    task file; its episodes name tasks by opaque ids (``sealed_task_ids`` opens them).
    Keep the run directory private all the same: its answers are the sealed tasks'."""
    from orchenv.eval.harness import EvalConfig, evaluate
    from orchenv.eval.rundir import read_json_file
    from orchenv.schema import RUN_INFO
    from orchenv.verify.bundle import file_digests, rerunnable
    from orchenv.verify.keys import sign

    run = read_json_file(Path(bundle) / "run.json", RUN_INFO)
    outside = [w for w in spec_mismatch(spec, run) if not w.startswith("seed plan")]
    if outside:
        raise ConfigError(f"{bundle} is not a run of this board: " + "; ".join(outside))
    controller = rerunnable(run)
    if controller is None:
        raise ConfigError(
            f"controller {run.get('controller')!r} is not registered in this orchenv: only a "
            "registered controller can be played on the sealed plan"
        )
    seeds, env_kwargs = sealed_plan(spec, key, task_file)
    config = EvalConfig(
        spec["env_id"],
        controller=controller[0],
        controller_kwargs=controller[1],
        env_kwargs=env_kwargs,
        pool=pool_argument(spec["pool"]),
        split=spec["split"],
        seeds=seeds,
        episodes=int(spec["sealed_plan"]["episodes"]),
    )
    target = Path(out)
    evaluate(config, target, progress=False)
    _withhold(target, env_kwargs, spec)
    body = {
        "format": "orchenv-sealed-run",
        "spec_sha256": spec["spec_sha256"],
        "key_id": key_id(key),
        "files": file_digests(target, ["run.json", "episodes.jsonl", "summary.json"]),
    }
    from orchenv.verify.keys import SIGNATURE

    body[SIGNATURE] = sign(body, key)
    (target / SEALED_FILE).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return target


def sealed_status(run_dir: Path, spec: Mapping[str, Any], key: bytes | None) -> str | None:
    """None when ``run_dir`` holds no ``sealed.json``; "sealed" when it is a sealed run of
    ``spec`` signed with ``key`` and its files are unchanged; else why not."""
    from orchenv.error import OrchEnvError
    from orchenv.eval.rundir import read_json_file
    from orchenv.verify.bundle import file_digests
    from orchenv.verify.keys import signed_by

    path = run_dir / SEALED_FILE
    if not os.path.lexists(path):
        return None
    try:
        data = read_json_file(path)
    except OrchEnvError as exc:
        return f"its sealed.json cannot be read ({exc})"
    if key is None or not signed_by(data, key):
        return "its sealed.json is not signed with this board's key"
    if data.get("spec_sha256") != spec.get("spec_sha256"):
        return "its sealed.json is of another board"
    files = data.get("files")
    if not isinstance(files, dict) or file_digests(run_dir, sorted(map(str, files))) != files:
        return "its files changed after the sealed run was signed"
    return "sealed"


# -- the command line -------------------------------------------------------------------------------


__all__ = [
    "ENV_BUILT",
    "FORMAT",
    "WITHHELD",
    "env_pool_spec",
    "file_sha256",
    "key_id",
    "open_task_id",
    "seal_task_id",
    "sealed_secret",
    "sealed_task_ids",
    "make_spec",
    "play_sealed",
    "pool_argument",
    "pool_spec",
    "sealed_plan",
    "sealed_status",
    "pool_sha256",
    "preset_sha256",
    "read_spec",
    "spec_mismatch",
    "spec_sha256",
    "write_spec",
]
