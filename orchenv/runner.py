"""Run a controller on an environment for N episodes and summarise the results.

This is the engine behind ``orchenv run``; the evaluation harness
(``orchenv.eval``: JSONL logs, resume, leaderboards) builds on the same
per-episode records (``EpisodeRecord``) and aggregates (``summarize``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from orchenv.error import EnvStateError, OrchEnvError
from orchenv.pool import UsageMeter


@dataclass
class EpisodeRecord:
    """What one episode did and cost."""

    task_id: str
    correct: bool
    score: float
    reward: float
    turns: int
    cost_usd: float
    prompt_tokens: int
    completion_tokens: int
    agent_calls: dict[str, int]
    invalid_actions: int
    latency_s: float = 0.0
    cached_calls: int = 0
    estimated_calls: int = 0
    actions: list[str] = field(default_factory=list)
    final_answer: str | None = None
    #: the env's own episode numbers (``info["metrics"]`` at the episode's end)
    metrics: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (fresh containers); hand-written because ``asdict``'s deep copy is
        the slowest part of logging an episode."""
        out = {name: getattr(self, name) for name in _RECORD_FIELDS}
        out["agent_calls"] = dict(self.agent_calls)
        out["actions"] = list(self.actions)
        out["metrics"] = dict(self.metrics)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRecord:
        """Rebuild a record from ``to_dict()`` output; extra keys (e.g. a log line's run
        identity) are ignored, so JSONL logs read back directly."""
        return cls(**{k: data[k] for k in _RECORD_FIELDS if k in data})


@dataclass
class RunSummary:
    """Aggregates over a run: accuracy (with a Wilson 95% interval), cost, tokens, usage."""

    env_id: str
    controller: str
    episodes: int
    accuracy: float
    accuracy_ci95: tuple[float, float]
    mean_reward: float
    total_cost_usd: float
    mean_cost_usd: float
    mean_prompt_tokens: float
    mean_completion_tokens: float
    usage_ratios: dict[str, float]
    mean_turns: float
    invalid_action_rate: float
    mean_latency_s: float = 0.0
    cached_call_fraction: float = 0.0
    estimated_token_fraction: float = 0.0
    privileged: bool = False
    mean_score: float = 0.0
    #: mean of each env-specific episode metric over the episodes that report it
    metrics: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_RECORD_FIELDS = tuple(f.name for f in fields(EpisodeRecord))


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well-behaved near 0 and 1)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def run_episode(
    env: gym.Env,
    controller: Any,
    *,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> EpisodeRecord:
    """Play one episode; the controller's ``reset(seed)`` is called first when it has one."""
    obs, info = env.reset(seed=seed, options=dict(options) if options else None)
    if hasattr(controller, "bind"):
        controller.bind(env.unwrapped)
    if hasattr(controller, "reset"):
        controller.reset(seed)
    total, invalid, actions = 0.0, 0, []
    for _ in range(10_000):
        action = controller.act(obs, info)
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        invalid += int(bool(info.get("invalid_action")))
        if terminated or truncated:
            break
    else:
        raise EnvStateError("episode did not end within 10,000 steps")
    meter = getattr(env.unwrapped, "meter", None) or UsageMeter()
    correct = bool(info.get("correct", False))
    return EpisodeRecord(
        task_id=str(info.get("task_id", "")),
        correct=correct,
        score=float(info.get("score", float(correct))),
        reward=total,
        turns=int(info.get("turns", len(actions))),
        cost_usd=float(info.get("episode_cost_usd", 0.0)),
        prompt_tokens=meter.prompt_tokens,
        completion_tokens=meter.completion_tokens,
        agent_calls=dict(info.get("agent_calls", {})),
        invalid_actions=invalid,
        latency_s=meter.latency_s,
        cached_calls=meter.cached_calls,
        estimated_calls=meter.estimated_calls,
        actions=actions,
        final_answer=info.get("final_answer"),
        metrics=episode_metrics(info),
    )


def episode_metrics(info: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of ``info["metrics"]`` (anything else is dropped, so a misbehaving
    env cannot poison a summary)."""
    raw = info.get("metrics")
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            out[str(key)] = float(value)
    return out


def mean_metrics(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    """Per metric, the mean over the records that report it (sorted by name)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for record in records:
        for key, value in record.metrics.items():
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sorted(sums)}


def summarize(
    records: list[EpisodeRecord],
    *,
    env_id: str,
    controller: str,
    agents: list[str],
    privileged: bool,
) -> RunSummary:
    """Aggregate episode records; usage ratios are calls per agent / episodes (seed 000)."""
    n = len(records)
    successes = sum(r.correct for r in records)
    calls = {a: sum(r.agent_calls.get(a, 0) for r in records) for a in agents}
    steps = sum(len(r.actions) for r in records)
    total_calls = sum(sum(r.agent_calls.values()) for r in records)
    return RunSummary(
        env_id=env_id,
        controller=controller,
        episodes=n,
        accuracy=successes / n if n else 0.0,
        accuracy_ci95=wilson_interval(successes, n),
        mean_reward=sum(r.reward for r in records) / max(n, 1),
        total_cost_usd=sum(r.cost_usd for r in records),
        mean_cost_usd=sum(r.cost_usd for r in records) / max(n, 1),
        mean_prompt_tokens=sum(r.prompt_tokens for r in records) / max(n, 1),
        mean_completion_tokens=sum(r.completion_tokens for r in records) / max(n, 1),
        usage_ratios={a: c / max(n, 1) for a, c in calls.items()},
        mean_turns=sum(r.turns for r in records) / max(n, 1),
        invalid_action_rate=sum(r.invalid_actions for r in records) / max(steps, 1),
        mean_latency_s=sum(r.latency_s for r in records) / max(n, 1),
        cached_call_fraction=sum(r.cached_calls for r in records) / max(total_calls, 1),
        estimated_token_fraction=sum(r.estimated_calls for r in records) / max(total_calls, 1),
        privileged=privileged,
        mean_score=sum(r.score for r in records) / max(n, 1),
        metrics=mean_metrics(records),
    )


def env_id_of(env: gym.Env) -> str:
    """The registered id of ``env`` (its class name when it was not made by ``gym.make``)."""
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


def pool_agents(env: gym.Env, records: Sequence[EpisodeRecord] = ()) -> list[str]:
    """The agents usage is reported for: the env's pool (weakest first) once it is built,
    else every agent the records mention, so agents never called still get a 0 ratio."""
    try:
        pool = getattr(env.unwrapped, "pool", None)
    except OrchEnvError:  # an OrchestrationEnv whose pool is built lazily, not yet
        pool = None
    if pool is not None and hasattr(pool, "names"):
        return list(pool.names)
    return sorted({a for r in records for a in r.agent_calls})


def run_episodes(
    env: gym.Env,
    controller: Any,
    episodes: int,
    *,
    seed: int = 0,
    controller_name: str | None = None,
    progress: bool = True,
) -> tuple[RunSummary, list[EpisodeRecord]]:
    """``episodes`` episodes; the first reset is seeded with ``seed``, the rest continue its RNG.

    Task order depends only on the env and ``seed``, never on the controller, so
    controllers run with the same seed see the same tasks.
    """
    records: list[EpisodeRecord] = []
    n_correct, total_cost = 0, 0.0
    bar = tqdm(range(episodes), desc="episodes", unit="ep", disable=not progress, leave=False)
    for i in bar:
        record = run_episode(env, controller, seed=seed if i == 0 else None)
        records.append(record)
        n_correct += record.correct
        total_cost += record.cost_usd
        bar.set_postfix(
            acc=f"{n_correct / len(records):.3f}", cost=f"${total_cost:.4f}", refresh=False
        )
    summary = summarize(
        records,
        env_id=env_id_of(env),
        controller=controller_name or type(controller).__name__,
        agents=pool_agents(env, records),
        privileged=bool(getattr(controller, "privileged", False)),
    )
    return summary, records


def format_summary(summary: RunSummary) -> str:
    """A human-readable block for the terminal."""
    lo, hi = summary.accuracy_ci95
    tag = "  (privileged: reads ground truth)" if summary.privileged else ""
    lines = [
        f"env          {summary.env_id}",
        f"controller   {summary.controller}{tag}",
        f"episodes     {summary.episodes}",
        f"accuracy     {summary.accuracy:.3f}  (95% CI {lo:.3f}-{hi:.3f})",
        f"reward       {summary.mean_reward:.3f} per episode",
        *(
            [f"score        {summary.mean_score:.3f} mean"]
            if not math.isclose(summary.mean_score, summary.accuracy)
            else []
        ),
        f"cost         ${summary.total_cost_usd:.4f} total, ${summary.mean_cost_usd:.6f} per episode",
        f"tokens       {summary.mean_prompt_tokens:.0f} prompt + {summary.mean_completion_tokens:.0f} completion per episode",
        f"turns        {summary.mean_turns:.2f} per episode",
        f"latency      {summary.mean_latency_s:.2f} s of agent time per episode "
        f"({summary.cached_call_fraction:.0%} of calls replayed/cached, "
        f"{summary.estimated_token_fraction:.0%} with estimated token counts)",
        f"invalid      {summary.invalid_action_rate:.3f} of actions",
        "usage ratio  (calls / episodes)",
    ]
    for agent, ratio in summary.usage_ratios.items():
        lines.append(f"  {agent:<28} {ratio:.3f}")
    if summary.metrics:
        lines.append("env metrics  (mean per episode)")
        lines.extend(f"  {name:<28} {value:.3f}" for name, value in summary.metrics.items())
    return "\n".join(lines)
