"""Replay a submitted run from the env, its submitted actions and its recorded agent calls.

Written by hand: no library replays a Gymnasium env against a call recording while checking
each answer. The replay trusts nothing the run computed: the env is made from the bundle's
declared id, kwargs, pool and split and reset with each episode's seed
(``orchenv.eval.harness.episode_seed``); the controller's actions are the submitted ones; each
agent call is answered from the recording (``orchenv.backends.store.OccurrenceStore``: the
n-th identical request gets the n-th recorded answer) by ``CheckingBackend``, which also

* refuses a call the recording does not hold (the request differs from the recorded one:
  a different prompt hash, agent or turn);
* checks the recorded answer against its request (agent name, and the model when the record
  names one);
* for agents whose backend is free and deterministic (``simulated``), asks that backend the
  same request and compares text and token counts, so an answer replaced by a better one,
  or shrunk token counts, are caught;
* prices the call from orchenv's price table (``orchenv/pricing.json``), not from the
  recorded ``cost_usd``.

What the env then reports (task, correctness, reward, turns, cost, tokens, calls) is the
re-derived episode; ``orchenv.verify.checks`` compares it with the submitted line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from orchenv.backends.replay import replay_key
from orchenv.backends.store import OccurrenceStore
from orchenv.error import BackendError, ConfigError, OrchEnvError
from orchenv.pool import AgentPool, AgentSpec, CallContext, Completion, Message, make_pool
from orchenv.runner import EpisodeRecord

#: backends whose answers are a pure function of the request: re-asked during verification
DETERMINISTIC_BACKENDS = frozenset({"simulated"})
#: backends that call a model (or stand for one): their answers cannot be re-derived. An
#: env-built pool's own backends (e.g. MultihopQA's role simulator) are taken as deterministic
LIVE_BACKENDS = frozenset({"openai", "hf", "vllm", "recording", "replay"})
#: how many problems of one kind are kept verbatim (the rest are counted)
KEEP = 20


@dataclass
class Problems:
    """Problems found, by kind: the first ``KEEP`` messages and a count."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, message: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        kept = self.examples.setdefault(kind, [])
        if len(kept) < KEEP:
            kept.append(message[:2000])

    def total(self, *kinds: str) -> int:
        return sum(self.counts.get(k, 0) for k in kinds)

    def first(self, *kinds: str) -> list[str]:
        return [m for k in kinds for m in self.examples.get(k, [])]


@dataclass
class CallStats:
    """What the replay learned about the recorded calls."""

    used: set[tuple[str, int]] = field(default_factory=set)
    checked_against_backend: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    recomputed_cost: float = 0.0
    recorded_cost: float = 0.0


class CheckingBackend:
    """Answers agent calls from a recording, checking each answer (module docstring).

    ``prices``: agent name -> (USD per 1M prompt tokens, per 1M completion tokens) from the
    price table, or None where the table does not price the agent's model (the recorded cost
    is then used and the agent is named by the cost check). ``simulators``: backend name ->
    a fresh instance of that deterministic backend.
    """

    def __init__(
        self,
        store: OccurrenceStore,
        prices: Mapping[str, tuple[float, float] | None],
        simulators: Mapping[str, Any],
        problems: Problems,
        stats: CallStats,
    ) -> None:
        self.store = store
        self.prices = dict(prices)
        self.simulators = dict(simulators)
        self.problems = problems
        self.stats = stats
        self.where = ""  # "seed S episode I", set by the replay loop
        self.model_overrides: list[str] = []  # backend_kwargs "model" the run sent instead

    def _same_model(self, spec: AgentSpec, reported: str) -> bool:
        """Whether the model a server reports is the agent's (or the model the run's backend
        kwargs asked for instead); a dated variant (``gpt-4o-mini-2024-07-18``) counts."""
        asked = [spec.model, str(spec.backend_kwargs.get("model") or ""), *self.model_overrides]
        return any(m and (reported == m or reported.startswith(m + "-")) for m in asked)

    def complete(
        self, spec: AgentSpec, messages: Sequence[Message], context: CallContext
    ) -> Completion:
        task = context.task
        if task is None:
            raise BackendError("verification replays calls keyed on their task; this one has none")
        key = replay_key(task.id, spec.name, messages, context.turn)
        occurrence, record = self.store.take(key)
        if record is None:
            self.problems.add(
                "missing_call",
                f"{self.where}: the env asks agent {spec.name!r} (turn {context.turn}) a request "
                "that the recording does not hold (no record with this task, agent and prompt "
                f"hash, occurrence {occurrence}): the submitted actions or recording do not "
                "belong together",
            )
            raise BackendError(f"no recorded answer for {spec.name!r} at {self.where}")
        self.stats.used.add((key, occurrence))
        c = record["completion"]
        recorded_agent = c.get("agent")
        if recorded_agent not in (None, spec.name) or record.get("agent") != spec.name:
            self.problems.add(
                "inconsistent_request",
                f"{self.where}: the record for agent {spec.name!r} names agent "
                f"{recorded_agent or record.get('agent')!r}",
            )
        meta = c.get("meta") or {}
        model = meta.get("model") if isinstance(meta, Mapping) else None
        if isinstance(model, str) and model and not self._same_model(spec, model):
            self.problems.add(
                "inconsistent_request",
                f"{self.where}: agent {spec.name!r} is model {spec.model!r} in the pool, but its "
                f"recorded answer says model {model!r}",
            )
        text = c["text"]
        pt, ct = int(c["prompt_tokens"]), int(c["completion_tokens"])
        sim = self.simulators.get(spec.backend)
        if sim is not None:
            fresh = sim.complete(spec, messages, context)
            self.stats.checked_against_backend += 1
            if fresh.text != text:
                self.problems.add(
                    "answer_replaced",
                    f"{self.where}: agent {spec.name!r} turn {context.turn}: the recorded answer "
                    f"{_clip(text)!r} is not what the pool's deterministic {spec.backend!r} "
                    f"backend answers to this request ({_clip(fresh.text)!r})",
                )
            if (fresh.prompt_tokens, fresh.completion_tokens) != (pt, ct):
                self.problems.add(
                    "tokens_changed",
                    f"{self.where}: agent {spec.name!r} turn {context.turn}: recorded tokens "
                    f"{pt} prompt + {ct} completion, but the {spec.backend!r} backend meters "
                    f"{fresh.prompt_tokens} + {fresh.completion_tokens} for this request",
                )
        price = self.prices.get(spec.name)
        recorded_cost = float(c["cost_usd"])
        cost = (pt * price[0] + ct * price[1]) / 1e6 if price is not None else recorded_cost
        if price is not None and not _close(cost, recorded_cost):
            self.problems.add(
                "call_cost",
                f"{self.where}: agent {spec.name!r}: recorded cost ${recorded_cost:.10g}, but "
                f"{pt} + {ct} tokens at the table's ${price[0]:g} / ${price[1]:g} per 1M cost "
                f"${cost:.10g}",
            )
        self.stats.calls += 1
        self.stats.prompt_tokens += pt
        self.stats.completion_tokens += ct
        self.stats.recomputed_cost += cost
        self.stats.recorded_cost += recorded_cost
        source = c.get("token_source")
        return Completion(
            agent=spec.name,
            text=text,
            prompt_tokens=pt,
            completion_tokens=ct,
            cost_usd=cost,
            latency_s=float(c.get("latency_s") or 0.0),
            cached=True,
            token_source=source if source in ("server", "tokenizer", "estimate") else "record",
            meta=dict(meta) if isinstance(meta, Mapping) else {},
        )


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


@dataclass(kw_only=True)
class ReplayedEpisode(EpisodeRecord):
    """One episode as the replay derived it: the fields a run logs (``EpisodeRecord``; the
    replay leaves timing, cache counts and actions at their defaults) plus where it stands
    in the run and the verdicts the outcome-alignment check counts."""

    seed: int
    episode: int
    right_drafts: int = 0  # verdicts given on a right draft (the env knows it is right)
    accepted_right: int = 0  # of those, acceptances (agreeing with the answer key)
    wrong_drafts: int = 0  # verdicts given on a wrong draft
    rejected_wrong: int = 0  # of those, rejections (agreeing with the answer key)
    error: str | None = None  # the replay could not finish the episode (why)


def build_pool(
    pool_data: Mapping[str, Any], backend: CheckingBackend, where: str
) -> tuple[AgentPool, list[AgentSpec]]:
    """A pool from the bundle's pool document whose every backend is ``backend``; also the
    specs as the document declares them (their original backend names)."""
    import json
    import tempfile
    from pathlib import Path

    from orchenv.pool import check_pool_data

    data = check_pool_data(dict(pool_data), where)
    names = {str(a.get("backend", "simulated")) for a in data["agents"]}
    with tempfile.TemporaryDirectory() as tmp:  # make_pool reads pool files by path
        path = Path(tmp) / "pool.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        declared = make_pool(path, backends=dict.fromkeys(names, _Null()))  # type: ignore[arg-type]
        pool = make_pool(path, backends=dict.fromkeys(names, backend))  # type: ignore[arg-type]
    return pool, list(declared.agents)


class _Null:
    def complete(self, *args: Any, **kwargs: Any) -> Completion:  # pragma: no cover
        raise BackendError("not used")


def env_pool_env(run: Mapping[str, Any]) -> tuple[gym.Env, Any]:
    """The env a run declares, made with its own pool (envs that build their pool in code,
    e.g. MultihopQA, OrchMAS, Puppeteer; or no agents at all, WebShop, ALFWorld);
    ``ConfigError`` when its pool is not the run's."""
    kwargs = dict(run.get("env_kwargs") or {})
    if run.get("split") is not None:
        kwargs["split"] = run["split"]
    env_id = str(run.get("env_id"))
    try:
        env = gym.make(env_id, **kwargs)
        pool = getattr(env.unwrapped, "pool", None)
    except (gym.error.Error, TypeError, OrchEnvError) as exc:
        raise ConfigError(f"cannot make {env_id!r} as the run declares it: {exc}") from exc
    no_agents = not isinstance(pool, AgentPool) and not getattr(pool, "agents", None)
    name = getattr(pool, "name", None)
    if not (isinstance(pool, AgentPool) or no_agents) or str(name) != str(run.get("pool")):
        env.close()
        raise ConfigError(
            f"{env_id} builds pool {name!r}, but the run used "
            f"{run.get('pool')!r}; pass --pool-file with the pool it used"
        )
    return env, pool


def pool_document(pool: Any) -> dict[str, Any]:
    """A pool file's document describing ``pool`` (what the bundle stores for env-built pools)."""
    import json

    agents = []
    for a in pool.agents:
        entry: dict[str, Any] = {
            "name": a.name,
            "model": a.model,
            "tier": a.tier,
            "price_prompt": a.price_prompt,
            "price_completion": a.price_completion,
            "backend": a.backend,
            "calibration": {k: float(v) for k, v in dict(a.calibration).items()},
            "backend_kwargs": json.loads(json.dumps(dict(a.backend_kwargs), default=str)),
        }
        if a.role_prompt is not None:
            entry["role_prompt"] = a.role_prompt
        agents.append(entry)
    return {
        "name": str(pool.name),
        "description": "built by the env (not a pool file)",
        "agents": agents,
    }


def make_replay_env(
    env_id: str, env_kwargs: Mapping[str, Any], pool: AgentPool, split: str | None
) -> gym.Env:
    kwargs = {k: v for k, v in env_kwargs.items() if k not in ("backend", "backend_kwargs")}
    kwargs["pool"] = pool
    if split is not None:
        kwargs["split"] = split
    try:
        return gym.make(env_id, **kwargs)
    except (gym.error.Error, TypeError, OrchEnvError) as exc:
        raise ConfigError(f"cannot make {env_id!r} as the bundle declares it: {exc}") from exc


def replay_episodes(
    env: gym.Env,
    rows: Sequence[Mapping[str, Any]],
    backend: CheckingBackend | None,
    *,
    episode_seed: Any,
    rerun: tuple[str, Mapping[str, Any]] | None = None,
) -> list[ReplayedEpisode]:
    """Replay ``rows`` (episode lines, in the order to play them) on ``env``.

    With ``rerun=(controller name, kwargs)`` the registered controller is re-executed instead:
    built and seeded as ``orchenv eval`` builds it (one per run seed, re-seeded per episode),
    it plays each episode itself, so the pool calls it makes on its own (a cascade's
    verifier, a pool agent) are made again and answered from the recording; each action it
    takes must be the submitted one (an episode whose actions differ is an error naming the
    first difference). Env state carried across episodes starts empty at each seed's first
    episode, as the harness does."""
    source: Any = None
    if rerun is not None:
        from orchenv.eval.harness import ControllerSource

        source = ControllerSource(rerun[0], rerun[1])
    base = env.unwrapped
    loader = getattr(base, "load_lifetime_state", None)
    out: list[ReplayedEpisode] = []
    last_seed: int | None = None
    controller: Any = None
    for row in rows:
        seed, index = int(row["seed"]), int(row["episode"])
        if seed != last_seed:
            if callable(loader):
                loader(None)
            if source is not None:
                controller = source.build(seed)
        last_seed = seed
        if backend is not None:
            backend.where = f"seed {seed} episode {index}"
        ep_seed = episode_seed(seed, index)
        player = source.for_episode(controller, ep_seed) if source is not None else None
        out.append(_replay_one(env, base, row, seed, index, ep_seed, player))
    return out


def _replay_one(
    env: gym.Env,
    base: Any,
    row: Mapping[str, Any],
    seed: int,
    index: int,
    ep_seed: int,
    player: Any = None,
) -> ReplayedEpisode:
    total, invalid = 0.0, 0
    verdicts = [0, 0, 0, 0]  # right drafts, accepted; wrong drafts, rejected
    info: dict[str, Any] = {}
    error: str | None = None
    done = False
    try:
        obs, info = env.reset(seed=ep_seed)
        actions = row.get("actions") or []
        if player is not None:  # re-execution: the controller acts, as run_episode has it
            if hasattr(player, "bind"):
                player.bind(base)
            if hasattr(player, "reset"):
                player.reset(ep_seed)
        for n, action in enumerate(actions):
            if done:
                error = f"the episode ended after {n} actions but {len(actions)} were submitted"
                break
            if player is not None:
                played = player.act(obs, info)
                if played != action:
                    error = (
                        f"re-executed, the controller's action {n + 1} is {str(played)[:120]!r}, "
                        f"the submitted one is {str(action)[:120]!r}: the submitted actions "
                        "are not what the declared controller does"
                    )
                    break
            draft_known = getattr(base, "draft_agent", None) is not None
            truth = getattr(base, "draft_correct", None) if draft_known else None
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            invalid += int(bool(info.get("invalid_action")))
            verdict = info.get("verdict")
            if isinstance(verdict, bool) and isinstance(truth, bool):
                slot = 0 if truth else 2
                verdicts[slot] += 1
                verdicts[slot + 1] += int(verdict == truth)
            done = bool(terminated or truncated)
        if not done and error is None:
            error = f"the submitted {len(actions)} actions do not finish the episode"
    except (OrchEnvError, ValueError, TypeError, KeyError, AttributeError) as exc:
        error = f"the replay failed: {type(exc).__name__}: {str(exc)[:300]}"
    meter = getattr(base, "meter", None)
    task = getattr(base, "task", None)
    correct = bool(info.get("correct", False))
    return ReplayedEpisode(
        seed=seed,
        episode=index,
        task_id=str(info.get("task_id", getattr(task, "id", ""))),
        correct=correct,
        score=float(info.get("score", float(correct))),
        reward=total,
        turns=int(info.get("turns", 0) or 0),
        cost_usd=float(info.get("episode_cost_usd", getattr(meter, "cost_usd", 0.0))),
        prompt_tokens=int(getattr(meter, "prompt_tokens", 0)),
        completion_tokens=int(getattr(meter, "completion_tokens", 0)),
        agent_calls=dict(info.get("agent_calls", {})),
        invalid_actions=invalid,
        final_answer=info.get("final_answer"),
        right_drafts=verdicts[0],
        accepted_right=verdicts[1],
        wrong_drafts=verdicts[2],
        rejected_wrong=verdicts[3],
        error=error,
    )


# -- comparing one episode ----------------------------------------------------------------------
def compare_episode(row: Mapping[str, Any], ep: ReplayedEpisode) -> list[str]:
    """What differs between a submitted episode line and its replay (empty: nothing)."""
    return [m for _, m in episode_diffs(row, ep)]


def episode_diffs(row: Mapping[str, Any], ep: ReplayedEpisode) -> list[tuple[str, str]]:
    where = f"seed {ep.seed} episode {ep.episode}"
    out: list[tuple[str, str]] = []

    def differ(kind: str, name: str, claimed: Any, derived: Any) -> None:
        out.append(
            (
                kind,
                f"{where}: {name} is {claimed!r} in the submission, the replay gives {derived!r}",
            )
        )

    if row.get("task_id") != ep.task_id:
        out.append(
            (
                "split",
                f"{where}: task {row.get('task_id')!r} is not the task the declared split gives "
                f"at this episode's seed ({ep.task_id!r})"
                + _other_split_hint(str(row.get("task_id")), ep.task_id),
            )
        )
    if ep.error is not None:
        kind = "execution" if ep.error.startswith("re-executed") else "replay"
        return [*out, (kind, f"{where}: {ep.error}")]
    if bool(row.get("correct")) != ep.correct:
        differ("replay", "correct", row.get("correct"), ep.correct)
    for name in ("score", "reward"):
        if not _close(float(row.get(name, 0.0)), getattr(ep, name)):
            differ("replay", name, row.get(name), getattr(ep, name))
    for name in ("turns", "invalid_actions"):
        if int(row.get(name, -1)) != getattr(ep, name):
            differ("replay", name, row.get(name), getattr(ep, name))
    if row.get("final_answer") != ep.final_answer:
        differ("replay", "final_answer", row.get("final_answer"), ep.final_answer)
    calls = {k: v for k, v in (row.get("agent_calls") or {}).items() if v}
    if calls != {k: v for k, v in ep.agent_calls.items() if v}:
        differ("replay", "agent_calls", calls, ep.agent_calls)
    if not _close(float(row.get("cost_usd", 0.0)), ep.cost_usd):
        differ("cost", "cost_usd", row.get("cost_usd"), ep.cost_usd)
    for name in ("prompt_tokens", "completion_tokens"):
        if int(row.get(name, -1)) != getattr(ep, name):
            differ("tokens", name, row.get(name), getattr(ep, name))
    return out


def _other_split_hint(claimed: str, derived: str) -> str:
    a, b = claimed.split("/"), derived.split("/")
    if len(a) == len(b) and len(a) >= 3 and a[0] == b[0] and a[1] != b[1]:
        return f"; its id says split {a[1]!r}, the declared split is {b[1]!r}"
    return ""
