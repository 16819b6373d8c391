"""Resumable evaluation runs: one JSONL line per episode, a run file, a summary file.

``evaluate`` plays ``episodes`` episodes for each seed and writes, under ``out_dir``:

* ``run.json`` — the run's identity (env id and kwargs, pool, split, controller spec and
  kwargs) and plan (seeds, episodes), written at the start;
* ``episodes.jsonl`` — one line per finished episode, appended as it finishes;
* ``summary.json`` — per-seed and pooled aggregates (``orchenv.runner.summarize``).

Why episodes are seeded one by one: episode ``i`` of seed ``s`` resets the env with
``episode_seed(s, i)`` and re-derives the controller's randomness from the same number, so
an episode's task and outcome never depend on what ran before it. That is what makes a
resumed run identical to an uninterrupted one: after a kill, rerunning the same command
skips the (seed, episode) pairs already on disk and plays the rest.

Durability contract. Each line goes to the OS in a single ``write`` as soon as its episode
ends, so a killed process (SIGKILL, OOM, Ctrl-C) loses no finished episode. ``fsync`` (the
guarantee against power loss) runs every ``fsync_every`` episodes and/or every
``fsync_interval_s`` seconds, and always when the run stops; a power cut loses at most the
episodes since the last fsync, and they are simply rerun. No episode is ever repeated: a
torn last line is cut off (with a warning) before anything is appended, and finished pairs
are skipped. A lock file keeps two evaluations from writing to one directory.

Controller randomness per episode (what exact resume needs): the controller is built once per
seed (with ``seed=s`` when its constructor takes ``seed``); before each episode
``reset(episode_seed)`` is called if it has one; a seedable controller without ``reset`` is
rebuilt for each episode with ``seed=episode_seed``; one with neither is taken to be
deterministic.

Live failures cost nothing twice. When a backend fails mid-episode the env marks the episode
failed and the harness plays it again, whole, up to ``retries`` more times; every call that
succeeded is kept in the episode's journal (``orchenv.eval.journal``) and served from it on
the retry and on a later resume of the same command, so no call is bought twice and the
finished run's records equal an uninterrupted run's.

Env state carried across episodes (``OrchestrationEnv.lifetime_state``, e.g. MathRoute's
usage-budget ledger under ``enforce_usage_constraints``) starts each seed empty; every line
records it after its episode and a resumed seed restores it, so budgets bind exactly as in an
uninterrupted run.

Concurrency (``concurrency=N``, ``orchenv eval --concurrency N``): up to N episodes are
played at once on orchenv's event loop (``orchenv.vector.run_concurrently``), each on its
own ``fork()`` of the env (sharing the pool and its connections) with its own controller
and its own journal, so their live calls overlap without a thread per episode. Episodes are
seeded one by one, so the records equal a sequential run's (lines are appended in the order
episodes end). Envs that carry state across episodes need their episodes in order and
refuse ``concurrency > 1``.

Controller spend: a controller that calls a model itself (``llm``, ``router-r1``) reports
its calls, tokens and dollars through ``usage()``; each episode's share is stored in the
record's ``metrics`` (``controller_calls``, ``controller_prompt_tokens``,
``controller_completion_tokens``, ``controller_cost_usd``), so summaries show it next to
the agents' spend. Likewise verified metering (an ``openai`` backend given the agent's
tokenizer): ``metering_checked`` and ``metering_disagreements`` calls per episode.

Truncation: agent calls that stopped at ``max_tokens`` (``finish_reason == "length"``) are
counted per episode (``metrics["truncated_calls"]``), and so are the controller's own model
replies that did (``controller_truncated`` from its ``usage()``); the summary reports both
shares with Wilson 95% intervals (``truncated_call_share``, ``truncated_action_share``; see
``orchenv.runner.truncation_shares``). A cut reply is usually scored wrong or invalid, so a
high share means ``max_tokens`` is too small for the model, not that the model is weak.

One play loop serves every ``concurrency``: 1 plays the episodes in order on the env itself.
The run directory's files (their format, writing and reading back) are
``orchenv.eval.rundir``.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from orchenv.error import BackendError, ConfigError, DataError
from orchenv.eval.journal import JOURNAL_DIR, CallJournal, attach_to_env, use_journal
from orchenv.eval.rundir import (
    EPISODES_FILE,
    IDENTITY_KEYS,
    LOCK_FILE,
    MAX_RUN_FILE_BYTES,
    RUN_FILE,
    SCHEMA,
    SUMMARY_FILE,
    EpisodeLog,
    check_identity,
    clear_run,
    episode_row,
    episode_seed,
    line_header,
    load_summary,
    locked,
    read_episode_log,
    read_json_file,
    run_key,
    scan_log,
    truncate,
    write_json_atomic,
)
from orchenv.runner import (
    EpisodeRecord,
    RunSummary,
    pool_agents,
    run_episode,
    summarize,
)
from orchenv.schema import RUN_INFO

logger = logging.getLogger(__name__)

#: the names this module had before the run directory's I/O moved to ``orchenv.eval.rundir``
_write_json_atomic = write_json_atomic
_scan_log = scan_log

ControllerFactory = Callable[[int], Any]


@dataclass
class EvalConfig:
    """What to evaluate: an env, a controller and the plan (seeds x episodes)."""

    env_id: str
    controller: str = "random"
    controller_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    pool: str | None = None  # preset name or pool file; None: the env's registered default
    split: str | None = None  # None: the env's default split
    episodes: int = 100
    seeds: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ConfigError(f"episodes must be at least 1, got {self.episodes}")
        if not self.seeds:
            raise ConfigError("seeds must name at least one seed, e.g. seeds=[0, 1, 2]")
        if any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ConfigError(f"seeds must be non-negative integers, got {self.seeds}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct, got {self.seeds}")
        if self.episodes >= 1_000_003:
            raise ConfigError("episodes per seed must be below 1,000,003 (episode seeds collide)")
        if "seed" in self.controller_kwargs:
            raise ConfigError(
                "the harness sets the controller's seed from --seeds; drop the controller "
                "argument seed=... and pass --seeds instead"
            )
        for label, value in (
            ("controller_kwargs", self.controller_kwargs),
            ("env_kwargs", self.env_kwargs),
        ):
            try:
                json.dumps(value, sort_keys=True)
            except TypeError as exc:
                raise ConfigError(
                    f"{label} must be JSON-serialisable to be logged and compared on resume: {exc}"
                ) from exc


@dataclass
class EvalResult:
    """What ``evaluate`` produced: the summary written to ``summary.json`` and the records of
    every (seed, episode) in the plan (read back from the log or played now)."""

    out_dir: Path
    pooled: RunSummary
    per_seed: dict[int, RunSummary]
    summary: dict[str, Any]
    records: dict[tuple[int, int], EpisodeRecord]
    ran: int  # episodes played by this call (the rest were on disk already)


def controller_label(name: str, kwargs: Mapping[str, Any]) -> str:
    """``single(agent=0)``: the spec and its arguments, as shown in summaries and boards."""
    if not kwargs:
        return name
    args = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(kwargs.items()))
    return f"{name}({args})"


# -- controllers ------------------------------------------------------------------------------
class ControllerSource:
    """Builds the controller for a seed and says how to re-derive its randomness per episode."""

    def __init__(self, spec: str | ControllerFactory, kwargs: Mapping[str, Any]) -> None:
        self.kwargs = dict(kwargs)
        self.factory: ControllerFactory | None = None
        self.cls: Any = None
        self.name = ""
        self._spare: tuple[int, Any] | None = None  # built by privileged(), not yet played
        if callable(spec):
            self.factory, self.seedable = spec, True
            return
        from orchenv.controllers import CONTROLLERS

        self.cls = CONTROLLERS.resolve(spec)
        self.name = spec
        try:
            self.seedable = "seed" in inspect.signature(self.cls).parameters
        except (TypeError, ValueError):  # a builtin or C callable: no signature to read
            self.seedable = False

    def privileged(self, seed: int) -> bool:
        """Whether the controller reads ground truth. It can be set per instance (e.g. by a
        verifier mode), so the controller for ``seed`` is built; ``build(seed)`` reuses it."""
        controller = self.build(seed)
        self._spare = (seed, controller)
        return bool(getattr(controller, "privileged", False))

    def build(self, seed: int) -> Any:
        """A fresh controller for ``seed`` (seeded with it when its constructor takes one)."""
        spare, self._spare = self._spare, None
        if spare is not None and spare[0] == seed:
            return spare[1]
        if self.factory is not None:
            return self.factory(seed)
        from orchenv.controllers import make_controller

        extra = {"seed": seed} if self.seedable else {}
        return make_controller(self.name, **self.kwargs, **extra)  # checks kwargs, clear errors

    def for_episode(self, controller: Any, ep_seed: int) -> Any:
        """The controller to play this episode with, its randomness derived from ``ep_seed``:
        re-seeded in place when it has ``reseed(seed)``, rebuilt otherwise (``run_episode``
        calls ``reset`` when it has one)."""
        if hasattr(controller, "reseed") and self.seedable:
            controller.reseed(ep_seed)
            return controller
        if hasattr(controller, "reset") or not self.seedable:
            return controller
        if self.factory is not None:
            return self.factory(ep_seed)
        return self.cls(**self.kwargs, seed=ep_seed)  # kwargs were checked by build()


# -- the run --------------------------------------------------------------------------------------
def make_env(config: EvalConfig) -> gym.Env:
    """``gym.make`` with the config's env kwargs, pool and split; errors name the fix."""
    kwargs = dict(config.env_kwargs)
    if config.pool is not None:
        kwargs["pool"] = config.pool
    if config.split is not None:
        kwargs["split"] = config.split
    try:
        return gym.make(config.env_id, **kwargs)
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(f"cannot make {config.env_id!r}: {exc}. See `orchenv list`.") from exc


def _identity(config: EvalConfig, env: gym.Env, controller_name: str) -> dict[str, Any]:
    """The run's identity with defaults resolved, so `--pool system1` equals no --pool."""
    unwrapped = env.unwrapped
    pool: Any = config.pool
    if pool is None:
        pool = env.spec.kwargs.get("pool") if env.spec is not None else None
        if not isinstance(pool, str):
            pool = getattr(getattr(unwrapped, "pool", None), "name", None)
    split = config.split or getattr(unwrapped, "split", None)
    if split is None and env.spec is not None:
        split = env.spec.kwargs.get("split")
    return {
        "env_id": config.env_id,
        "env_kwargs": dict(sorted(config.env_kwargs.items())),
        "pool": str(pool) if pool is not None else None,
        "split": split,
        "controller": controller_name,
        "controller_kwargs": dict(sorted(config.controller_kwargs.items())),
    }


def _lifetime_state(env: gym.Env) -> dict[str, Any] | None:
    """What the env carries from one episode to the next (``OrchestrationEnv.lifetime_state``)."""
    getter = getattr(env.unwrapped, "lifetime_state", None)
    return getter() if callable(getter) else None


def _restore_env_state(env: gym.Env, state: Mapping[str, Any] | None) -> None:
    """Start a seed with the state its last logged episode left (fresh for a new seed)."""
    loader = getattr(env.unwrapped, "load_lifetime_state", None)
    if callable(loader):
        loader(state)


def evaluate(
    config: EvalConfig,
    out_dir: str | os.PathLike[str],
    *,
    controller_factory: ControllerFactory | None = None,
    env: gym.Env | None = None,
    overwrite: bool = False,
    progress: bool = True,
    fsync_every: int = 0,
    fsync_interval_s: float | None = 1.0,
    retries: int = 2,
    concurrency: int = 1,
) -> EvalResult:
    """Run (or resume) the evaluation ``config`` into ``out_dir``; see the module docstring.

    ``controller_factory(seed) -> controller`` evaluates a controller that is not registered
    (``config.controller`` is then only its name in the logs and boards). ``env``: an env
    already made from ``config`` (e.g. to share a warm pool); it is used as is and not
    closed. ``fsync_every=1`` fsyncs after every episode (slowest, safest against power
    loss); the default fsyncs at most once a second and always at the end. ``retries``: how
    many more times an episode in which a backend failed is played again, whole, before the
    run stops (see ``orchenv.eval.journal``: calls that succeeded are not bought twice).
    ``concurrency``: episodes played at once (see the module docstring).
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"retries must be a non-negative int, got {retries!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = ControllerSource(controller_factory or config.controller, config.controller_kwargs)
    own_env = env is None
    env = make_env(config) if env is None else env
    try:
        with locked(out):
            return _evaluatelocked(
                config,
                out,
                env,
                source,
                overwrite,
                progress,
                fsync_every,
                fsync_interval_s,
                retries,
                concurrency,
            )
    finally:
        if own_env:
            env.close()


def _evaluatelocked(
    config: EvalConfig,
    out: Path,
    env: gym.Env,
    source: ControllerSource,
    overwrite: bool,
    progress: bool,
    fsync_every: int,
    fsync_interval_s: float | None,
    retries: int,
    concurrency: int = 1,
) -> EvalResult:
    if overwrite:
        clear_run(out)
    # a probe reset builds the pool (agent names, resolved split) before anything is written
    env.reset(seed=episode_seed(config.seeds[0], 0))
    identity = _identity(config, env, config.controller)
    key = run_key(identity)
    run_path, log_path = out / RUN_FILE, out / EPISODES_FILE
    previous: dict[str, Any] = {}
    if run_path.exists():
        try:
            previous = read_json_file(run_path, RUN_INFO)
        except DataError as exc:
            raise DataError(f"{exc}; use --overwrite") from exc
        check_identity(out, identity, previous, RUN_FILE)
    rows, good_end, size = scan_log(log_path)
    if rows and rows[0].get("run_key") != key:
        check_identity(out, identity, rows[0], f"{EPISODES_FILE} line 1")

    done: dict[tuple[int, int], dict[str, Any]] = {}  # log rows already on disk
    for n, row in enumerate(rows, 1):
        if row.get("run_key") != key:
            raise DataError(f"{log_path} line {n} belongs to another run; use --overwrite")
        try:
            pair = (int(row["seed"]), int(row["episode"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{log_path} line {n} has no valid seed/episode ({exc})") from exc
        if pair in done:
            logger.warning(
                "%s: (seed, episode) %s appears twice; keeping the first", log_path, pair
            )
            continue
        done[pair] = row
    if good_end < size:  # the identity matched: now cut the torn tail off
        truncate(log_path, good_end)
    plan = [(s, i) for s in config.seeds for i in range(config.episodes)]
    in_plan = set(plan)
    outside = sum(pair not in in_plan for pair in done)
    if outside:
        logger.info("%d episodes on disk are outside this plan: kept, not summarised", outside)

    agents = pool_agents(env)
    privileged = previous.get("privileged")  # known from an earlier start: build nothing
    if not isinstance(privileged, bool):
        privileged = source.privileged(config.seeds[0])
    run_info = {
        "schema": SCHEMA,
        **identity,
        "run_key": key,
        "seeds": list(config.seeds),
        "episodes": config.episodes,
        "controller_label": controller_label(config.controller, config.controller_kwargs),
        "agents": agents,
        "privileged": privileged,
        "episode_seed": "seed * 1000003 + episode",
    }
    write_json_atomic(run_path, run_info)

    todo = [pair for pair in plan if pair not in done]
    if todo:  # an unfinished run must not keep a summary of an earlier, smaller plan
        with contextlib.suppress(FileNotFoundError):
            (out / SUMMARY_FILE).unlink()
    if done and todo:
        logger.warning(
            "resuming %s: %d of %d episodes already on disk", out, len(plan) - len(todo), len(plan)
        )
    played: dict[tuple[int, int], EpisodeRecord] = {}
    journal = CallJournal(out / JOURNAL_DIR)
    if journal.directory.is_dir():  # logged episodes whose journal a kill left behind
        for pair in done:
            journal.discard(*pair)
    undo_journal = attach_to_env(env, journal)  # None: every backend is free, nothing to journal
    try:
        ran = _play(
            env,
            source,
            seeds=config.seeds,
            todo=todo,
            done=done,
            played=played,
            log=EpisodeLog(
                log_path,
                header=line_header(identity, key),
                fsync_every=fsync_every,
                fsync_interval_s=fsync_interval_s,
            ),
            progress=progress,
            total=len(plan),
            correct_on_disk=sum(bool(done[p].get("correct")) for p in plan if p in done),
            label=str(run_info["controller_label"]),
            journal=journal if undo_journal is not None else None,
            retries=retries,
            concurrency=concurrency,
        )
    finally:
        if undo_journal is not None:
            undo_journal()
    records = {
        pair: played[pair] if pair in played else EpisodeRecord.from_dict(done[pair])
        for pair in plan
    }
    summary, pooled, per_seed = build_summary(run_info, records, agents, privileged)
    write_json_atomic(out / SUMMARY_FILE, summary)
    return EvalResult(
        out_dir=out, pooled=pooled, per_seed=per_seed, summary=summary, records=records, ran=ran
    )


def _play(
    env: gym.Env,
    source: ControllerSource,
    *,
    seeds: Sequence[int],
    todo: Sequence[tuple[int, int]],
    done: Mapping[tuple[int, int], Mapping[str, Any]],
    played: dict[tuple[int, int], EpisodeRecord],
    log: EpisodeLog,
    progress: bool,
    total: int,
    correct_on_disk: int,
    label: str,
    journal: CallJournal | None = None,
    retries: int = 0,
    concurrency: int = 1,
) -> int:
    """Play the pending (seed, episode) pairs, logging each as it ends; closes ``log`` (a
    final fsync) however it stops.

    One loop for every concurrency: ``concurrency=1`` plays the pairs in order on ``env``
    itself (one lane); more plays up to that many at once, each lane a ``fork()`` of the env
    with its own journal, on orchenv's event loop (``run_concurrently``). Either way a lane
    builds one controller per seed, and the finished episodes come back here to be logged.
    """
    try:
        lanes = _Lanes(env, source, done, journal, retries, concurrency, len(todo))
    except BaseException:
        log.close()
        raise
    n_seen, n_correct, ran = total - len(todo), correct_on_disk, 0
    bar = tqdm(
        total=total,
        initial=n_seen,
        desc=f"eval {label}",
        unit="ep",
        disable=not progress,
        dynamic_ncols=True,
    )
    failure: BaseException | None = None
    results = lanes.play(todo)
    try:
        for n, result, exc in results:
            if exc is not None:
                failure = exc
                break
            assert result is not None
            record, wall, state, lane_journal = result
            seed, index = todo[n]
            log.append(episode_row(seed, index, record, wall, state))
            if lane_journal is not None:
                lane_journal.finish()
            played[(seed, index)] = record
            ran += 1
            if progress:
                n_seen += 1
                n_correct += record.correct
                if bar.update(1):  # it redrew: refresh the accuracy shown next time
                    bar.set_postfix(acc=f"{n_correct / n_seen:.3f}", refresh=False)
    finally:
        results.close()  # starts nothing more; waits for the episodes still running
        bar.close()
        log.close()
        if journal is not None:
            journal.close()
    if failure is not None:
        raise failure
    return ran


#: what a lane hands back per episode: its record, wall seconds, the env's lifetime state
#: after it, and the journal to clear once the episode is logged
_Played = tuple[EpisodeRecord, float, dict[str, Any] | None, CallJournal | None]


class _Lanes:
    """Where episodes are played: ``env`` itself (concurrency 1) or forks of it."""

    def __init__(
        self,
        env: gym.Env,
        source: ControllerSource,
        done: Mapping[tuple[int, int], Mapping[str, Any]],
        journal: CallJournal | None,
        retries: int,
        concurrency: int,
        n_todo: int,
    ) -> None:
        self.source, self.done, self.journal, self.retries = source, done, journal, retries
        self.concurrency = min(concurrency, max(n_todo, 1))
        if self.concurrency > 1:
            _check_forkable(env)
            fork = env.unwrapped.fork  # type: ignore[attr-defined]
            self.free: list[Any] = [fork() for _ in range(self.concurrency)]
        else:
            self.free = [env]
        self._controllers: dict[tuple[int, int], Any] = {}  # (lane, seed) -> controller
        self._seed_of: dict[int, int] = {}  # lane -> the seed it played last

    def play(
        self, todo: Sequence[tuple[int, int]]
    ) -> Generator[tuple[int, _Played | None, BaseException | None], None, None]:
        jobs = [lambda s=s, i=i: self._episode(s, i) for s, i in todo]
        if self.concurrency > 1:
            from orchenv.vector import run_concurrently

            return run_concurrently(jobs, concurrency=self.concurrency)
        return _in_order(jobs)

    def _episode(self, seed: int, index: int) -> _Played:
        lane = self.free.pop()
        try:
            if self._seed_of.get(id(lane)) != seed:  # a new seed starts where its log ends
                self._seed_of[id(lane)] = seed
                before = self.done.get((seed, index - 1))
                _restore_env_state(lane, before.get("env_state") if before else None)
            key = (id(lane), seed)
            if key not in self._controllers:
                self._controllers[key] = self.source.build(seed)
            # one lane uses the journal attached to the pool; forks each get their own
            mine = self.journal
            if mine is not None and self.concurrency > 1:
                mine = CallJournal(mine.directory)
            start = time.perf_counter()
            with use_journal(mine if self.concurrency > 1 else None):
                record = _play_one(
                    lane, self.source, self._controllers[key], seed, index, mine, self.retries
                )
            return record, time.perf_counter() - start, _lifetime_state(lane), mine
        finally:
            self.free.append(lane)


def _in_order(
    jobs: Sequence[Callable[[], _Played]],
) -> Generator[tuple[int, _Played | None, BaseException | None], None, None]:
    """The jobs run one after another in this thread, reported as ``run_concurrently``
    reports them (a failure ends the run)."""
    for n, job in enumerate(jobs):
        try:
            result = job()
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, as run_concurrently does
            yield n, None, exc
            return
        yield n, result, None


def _check_forkable(env: gym.Env) -> None:
    """Episodes played at once need env copies that share nothing across episodes."""
    base = env.unwrapped
    fork = getattr(base, "fork", None)
    if _lifetime_state(env) is None and callable(fork):
        return
    why = (
        "it carries state from one episode to the next, so its episodes must run in order"
        if callable(fork)
        else "it cannot fork() copies of itself"
    )
    spec = getattr(base, "spec", None)
    raise ConfigError(
        f"{getattr(spec, 'id', None) or type(base).__name__} cannot play episodes "
        f"concurrently: {why}. Use --concurrency 1."
    )


def _play_one(
    env: gym.Env,
    source: ControllerSource,
    controller: Any,
    seed: int,
    index: int,
    journal: CallJournal | None,
    retries: int,
) -> EpisodeRecord:
    """One episode, retried whole (up to ``retries`` more times) when a backend fails in it.

    Each attempt starts from the same env lifetime state and controller randomness, and the
    journal serves the calls earlier attempts (or an earlier, interrupted run) already paid
    for, so the record equals an uninterrupted run's. The controller's spend and verified
    metering go into the record's ``metrics`` (``orchenv.runner.run_episode``).
    """
    ep_seed = episode_seed(seed, index)
    state = _lifetime_state(env)
    for attempt in range(retries + 1):
        if journal is not None:
            on_file = journal.begin(seed, index)
            if on_file:
                logger.info(
                    "seed %d episode %d: %d paid calls on file from an earlier attempt",
                    seed,
                    index,
                    on_file,
                )
        try:
            return run_episode(env, source.for_episode(controller, ep_seed), seed=ep_seed)
        except BackendError as exc:
            if journal is not None:
                journal.close()
            kept = (
                f"; the {journal.bought + journal.served} calls that succeeded are kept in "
                f"{journal.path_for(seed, index)} and are not bought again when you rerun "
                "the same command"
                if journal is not None
                else ""
            )
            if attempt == retries:
                raise BackendError(
                    f"seed {seed} episode {index} failed {retries + 1} time(s): {exc}{kept}"
                ) from exc
            logger.warning("seed %d episode %d failed (%s); retrying it", seed, index, exc)
            _restore_env_state(env, state)
    raise AssertionError("unreachable")  # pragma: no cover


def build_summary(
    run_info: Mapping[str, Any],
    records: Mapping[tuple[int, int], EpisodeRecord],
    agents: Sequence[str],
    privileged: bool,
) -> tuple[dict[str, Any], RunSummary, dict[int, RunSummary]]:
    """``summary.json``'s content: pooled and per-seed aggregates built by ``summarize``."""
    label = str(run_info["controller_label"])
    env_id = str(run_info["env_id"])
    by_seed: dict[int, list[EpisodeRecord]] = {}
    for (seed, _), rec in sorted(records.items()):
        by_seed.setdefault(seed, []).append(rec)

    def one(recs: list[EpisodeRecord]) -> tuple[RunSummary, dict[str, Any]]:
        s = summarize(
            recs, env_id=env_id, controller=label, agents=list(agents), privileged=privileged
        )
        n = max(len(recs), 1)
        calls = {a: sum(r.agent_calls.get(a, 0) for r in recs) for a in agents}
        extra = {
            "mean_tokens": sum(r.prompt_tokens + r.completion_tokens for r in recs) / n,
            "total_tokens": sum(r.prompt_tokens + r.completion_tokens for r in recs),
            "agent_calls": calls,
            "invalid_actions": sum(r.invalid_actions for r in recs),
        }
        return s, {**s.to_dict(), **extra}

    per_seed: dict[int, RunSummary] = {}
    seed_rows = []
    for seed, recs in by_seed.items():
        s, d = one(recs)
        per_seed[seed] = s
        seed_rows.append({"seed": seed, **d})
    pooled, pooled_dict = one([r for recs in by_seed.values() for r in recs])
    accs = [s.accuracy for s in per_seed.values()]
    mean_acc = sum(accs) / len(accs) if accs else 0.0
    std = (
        math.sqrt(sum((a - mean_acc) ** 2 for a in accs) / (len(accs) - 1))
        if len(accs) > 1
        else 0.0
    )
    meta = {
        "env_id": env_id,
        "pool": run_info.get("pool"),
        "split": run_info.get("split"),
        "controller_spec": run_info.get("controller"),
        "controller_kwargs": run_info.get("controller_kwargs"),
        "controller_label": label,
        "seeds": list(by_seed),
        "episodes_per_seed": run_info.get("episodes"),
        "privileged": privileged,
    }
    summary = {
        "schema": SCHEMA,
        "run": dict(run_info, privileged=privileged),
        "pooled": {**meta, **pooled_dict},
        "per_seed": seed_rows,
        "accuracy_across_seeds": {"mean": mean_acc, "std": std, "n_seeds": len(accs)},
    }
    return summary, pooled, per_seed


__all__ = [
    "EPISODES_FILE",
    "IDENTITY_KEYS",
    "JOURNAL_DIR",
    "LOCK_FILE",
    "MAX_RUN_FILE_BYTES",
    "RUN_FILE",
    "SCHEMA",
    "SUMMARY_FILE",
    "EvalConfig",
    "EvalResult",
    "EpisodeLog",
    "build_summary",
    "controller_label",
    "episode_seed",
    "evaluate",
    "load_summary",
    "read_episode_log",
    "read_json_file",
    "run_key",
]
