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
    #: share of agent calls cut at ``max_tokens`` (``finish_reason == "length"``), its Wilson
    #: 95% interval and count
    truncated_call_share: float = 0.0
    truncated_call_ci95: tuple[float, float] = (0.0, 0.0)
    truncated_calls: int = 0
    agent_calls_total: int = 0
    #: share of the controller's model replies (its actions) cut at ``max_tokens``; None
    #: when the controller calls no model
    truncated_action_share: float | None = None
    truncated_action_ci95: tuple[float, float] | None = None
    truncated_actions: int = 0
    controller_replies: int = 0

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
    total, invalid, cut, actions = 0.0, 0, 0, []
    spent_before = controller_usage(controller)
    for _ in range(10_000):
        action = controller.act(obs, info)
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        invalid += int(bool(info.get("invalid_action")))
        cut += _cut_calls(info)
        if terminated or truncated:
            break
    else:
        raise EnvStateError("episode did not end within 10,000 steps")
    meter = getattr(env.unwrapped, "meter", None) or UsageMeter()
    correct = bool(info.get("correct", False))
    metrics = episode_metrics(info)
    metrics[TRUNCATED_CALLS] = float(cut)
    spent_after = controller_usage(controller)
    if spent_after is not None:  # a model-calling controller: its share of this episode
        base = spent_before or {}
        metrics.update({k: v - base.get(k, 0.0) for k, v in spent_after.items()})
    if meter.metering_checked:  # verified metering (an openai backend given the tokenizer)
        metrics["metering_checked"] = float(meter.metering_checked)
        metrics["metering_disagreements"] = float(meter.metering_disagreements)
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
        metrics=metrics,
    )


#: ``EpisodeRecord.metrics`` keys: agent calls cut at ``max_tokens`` (``finish_reason``
#: ``"length"``), and the controller's own model replies (``usage()``) and how many were cut
TRUNCATED_CALLS = "truncated_calls"
CONTROLLER_CALLS = "controller_calls"
CONTROLLER_TRUNCATED = "controller_truncated"


def _cut_calls(info: Mapping[str, Any]) -> int:
    """Agent calls of this step that stopped at ``max_tokens`` (``info["calls"]``)."""
    calls = info.get("calls")
    if not isinstance(calls, list):
        return 0
    return sum(1 for call in calls if isinstance(call, Mapping) and call.get("truncated") is True)


def controller_usage(controller: Any) -> dict[str, float] | None:
    """A model-calling controller's spend so far (``usage()``: calls, tokens, dollars, replies
    cut at ``max_tokens``), or None; only finite numbers are kept."""
    usage = getattr(controller, "usage", None)
    if not callable(usage):
        return None
    try:
        raw = usage()
    except Exception:  # noqa: BLE001 - a controller's own method; the run goes on without it
        return None
    if not isinstance(raw, Mapping):
        return None
    return {
        str(k): float(v)
        for k, v in raw.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def truncation_shares(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """The share of agent calls, and of the controller's model replies, cut at ``max_tokens``,
    with the counts and Wilson 95% intervals (the controller's share is None when it made no
    model calls, e.g. a scripted baseline)."""
    agent_calls = sum(sum(r.agent_calls.values()) for r in records)
    agent_cut = int(sum(r.metrics.get(TRUNCATED_CALLS, 0.0) for r in records))
    replies = int(sum(r.metrics.get(CONTROLLER_CALLS, 0.0) for r in records))
    replies_cut = int(sum(r.metrics.get(CONTROLLER_TRUNCATED, 0.0) for r in records))
    agent_cut = min(agent_cut, agent_calls)
    replies_cut = min(replies_cut, replies)
    return {
        "truncated_call_share": agent_cut / agent_calls if agent_calls else 0.0,
        "truncated_call_ci95": wilson_interval(agent_cut, agent_calls),
        "truncated_calls": agent_cut,
        "agent_calls_total": agent_calls,
        "truncated_action_share": replies_cut / replies if replies else None,
        "truncated_action_ci95": wilson_interval(replies_cut, replies) if replies else None,
        "truncated_actions": replies_cut,
        "controller_replies": replies,
    }


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
        **truncation_shares(records),
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
        bar.set_postfix(acc=f"{n_correct / len(records):.3f}", cost=usd(total_cost), refresh=False)
    summary = summarize(
        records,
        env_id=env_id_of(env),
        controller=controller_name or type(controller).__name__,
        agents=pool_agents(env, records),
        privileged=bool(getattr(controller, "privileged", False)),
    )
    return summary, records


def _truncation_line(summary: RunSummary) -> str:
    """Calls and controller replies cut at ``max_tokens``, with their 95% intervals."""
    lo, hi = summary.truncated_call_ci95
    line = (
        f"cut at max   {summary.truncated_call_share:.3f} of agent calls "
        f"({summary.truncated_calls} of {summary.agent_calls_total}, 95% CI {lo:.3f}-{hi:.3f})"
    )
    if summary.truncated_action_share is not None and summary.truncated_action_ci95:
        lo, hi = summary.truncated_action_ci95
        line += (
            f"; {summary.truncated_action_share:.3f} of controller replies "
            f"({summary.truncated_actions} of {summary.controller_replies}, "
            f"95% CI {lo:.3f}-{hi:.3f})"
        )
    return line


def usd(value: float) -> str:
    """One cost format for every figure orchenv prints: dollars with six decimals."""
    return f"${value:.6f}"


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
        f"cost         {usd(summary.mean_cost_usd)} per episode, {usd(summary.total_cost_usd)} total",
        f"tokens       {summary.mean_prompt_tokens:.0f} prompt + {summary.mean_completion_tokens:.0f} completion per episode",
        f"turns        {summary.mean_turns:.2f} per episode",
        f"agent time   {summary.mean_latency_s:.2f} s per episode, summed over its agent calls "
        "(simulated agents: their modelled latency, not this run's wall time; "
        f"{summary.cached_call_fraction:.0%} of calls replayed/cached, "
        f"{summary.estimated_token_fraction:.0%} with estimated token counts)",
        f"invalid      {summary.invalid_action_rate:.3f} of actions",
        _truncation_line(summary),
        "usage ratio  (calls to each agent per episode, every call counted: routed drafts and "
        "verifier or consult calls; the env's usage constraints cap these)",
    ]
    for agent, ratio in summary.usage_ratios.items():
        lines.append(f"  {agent:<28} {ratio:.3f}")
    if summary.metrics:
        lines.append("env metrics  (mean per episode)")
        lines.extend(f"  {name:<28} {value:.3f}" for name, value in summary.metrics.items())
    return "\n".join(lines)


# -- yardsticks: what a learner should be compared with (``orchenv baselines``) -------------------
#: the audit's rows shown as yardsticks, in order: (row name or kind, label, what it is)
YARDSTICK_ROWS = (
    ("random-available", "random valid", "a uniformly random available choice each turn"),
    (
        "blind",
        "best fixed plan",
        "the best task-blind sequence of choices (picked on one half of the tasks, "
        "scored on the other)",
    ),
    ("skill@realistic", "skill @ realistic", "the paper's skill at the env's realistic level"),
    (
        "best-response",
        "upper bound",
        "privileged: searches the future with fork(); no policy can beat it",
    ),
)


@dataclass
class Yardstick:
    """One yardstick on the audited tasks: mean episode return on the env's reward with its
    95% interval (``mean - ci``, ``mean + ci``), over ``n`` tasks."""

    name: str
    label: str
    description: str
    mean: float
    ci: float
    n: int
    accuracy: float | None = None

    @property
    def interval(self) -> tuple[float, float]:
        return self.mean - self.ci, self.mean + self.ci


def yardsticks(
    env_id: str,
    *,
    tasks: int = 100,
    split: str | None = None,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    trained: Mapping[str, Any] | None = None,
    best_response: bool = True,
    progress: bool = True,
    time_limit_s: float | None = None,
) -> tuple[list[Yardstick], Any]:
    """Random valid, the best fixed plan, skill at the realistic level and the upper bound of
    ``env_id`` on the same ``tasks`` sampled tasks (``orchenv.audit.audit``: its rows
    ``random-available``, ``best-blind``, ``skill@REALISTIC`` and ``best-response``), with the
    ``trained`` policies (``{name: controller}``, e.g. a ``MaskedPolicyController``) played on
    the same tasks and listed first. Returns the yardsticks and the audit's report.

    The env's own reward unless ``env_kwargs`` says otherwise; an env without a discrete
    view (``action_choices``) has no yardsticks and raises ``ConfigError``."""
    from orchenv.audit import audit

    report = audit(
        env_id,
        tasks=tasks,
        split=split,
        seed=seed,
        env_kwargs=env_kwargs,
        trained=trained,
        best_response=best_response,
        progress=progress,
        time_limit_s=time_limit_s,
    )
    rows: list[Yardstick] = []

    def add(row: Any, label: str, description: str) -> None:
        rows.append(
            Yardstick(
                name=row.name,
                label=label,
                description=description,
                mean=float(row.return_mean),
                ci=float(row.return_ci),
                n=len(row.returns),
                accuracy=row.accuracy,
            )
        )

    for row in report.rows:
        if row.kind == "trained":
            add(row, row.name, "the learner, played greedily on the same tasks")
    for key, label, description in YARDSTICK_ROWS:
        if key == "skill@realistic":
            found = report.reference
            label = f"skill @ realistic {report.realistic_skill:g}"
        elif key == "blind":
            found = next((r for r in report.rows if r.kind == "blind"), None)
        else:
            found = next((r for r in report.rows if r.name == key), None)
        if found is not None:
            add(found, label, description)
    return rows, report


def format_yardsticks(rows: Sequence[Yardstick], report: Any) -> str:
    """The yardsticks as a table for the terminal (mean return, 95% interval, accuracy)."""
    kwargs = ", ".join(f"{k}={v!r}" for k, v in report.env_kwargs.items()) or "its defaults"
    lines = [
        f"Yardsticks for {report.env_id} (split {report.split}, {len(report.task_ids)} tasks, "
        f"seed {report.seed}; env arguments: {kwargs})",
        "mean episode return on the env's reward, 95% interval; overlapping intervals "
        "prove no order",
        "",
        f"  {'policy':<24} {'return':>7}  {'95% interval':<16} {'accuracy':>8}  what it is",
    ]
    for row in rows:
        lo, hi = row.interval
        acc = "-" if row.accuracy is None else f"{row.accuracy:.3f}"
        lines.append(
            f"  {row.label:<24} {row.mean:>7.3f}  {f'[{lo:.3f}, {hi:.3f}]':<16} {acc:>8}  "
            f"{row.description}"
        )
    if report.realistic_skill_source:
        lines += [
            "",
            f"realistic skill {report.realistic_skill:g}: {report.realistic_skill_source}",
        ]
    elif not report.skill_available:
        lines += ["", "no skill reference: the env has no skill_action()"]
    return "\n".join(lines)
