"""``orchenv audit``: is the best way to score well the skill the env's paper studies?

A shortcut matters when it scores as well as what a learner with the paper's skill reaches,
so the audit compares every shortcut with a **skill reference**, never with a policy that
sees the future:

- **Skill reference** (``skill@s``): at each decision it draws ``skilled = u < s`` and plays
  ``env.skill_action(skilled, rng)``: with the skill it does what the paper's skill does with
  the privileged truth, without it the env's no-skill default. Played for ``s`` over a sweep
  (0, 0.25, 0.5, 0.75, 1 and the env's ``realistic_skill``, or ``DEFAULT_REALISTIC_SKILL``),
  the curve should rise with ``s``; the report checks that ``s = 1`` is above ``s = 0``
  beyond the 95% interval and says where the curve does not rise. The draws ``u`` come from
  one stream per task shared by every ``s`` (so the skilled decisions at a lower ``s`` are a
  subset of those at a higher one while the episodes agree), ``skill_action``'s own ``rng``
  from a stream per task and ``s``.
- **Best blind policy** (``best-blind``): the best task-independent sequence of choice
  indices (choice ``k_t`` at turn ``t`` when available, else the first available), found by
  enumerating every sequence when there are at most ``BLIND_EXHAUSTIVE_CAP``, else by
  coordinate ascent from the best constant sequence. Two-fold: the sequence picked on the
  even-numbered tasks is reported on the odd ones and the reverse, so the pick does not
  inflate its reported return.
- **Shortcuts**: the env's ``audit_strategies()`` (policies that read only what a learner
  sees) and generic ones (always choice k, first available, random available).
- **Trained** rows (optional ``trained={name: policy}``, e.g. a MaskablePPO through the
  discrete view) are comparison levels too.
- **Tell meter** (optional, ``tells=True``; ``orchenv.audit_tells``): a logistic regression on
  surface features of every agent output the controller sees predicts the output's privileged
  correctness; its AUC on test episodes (within one author, across authors, and from the
  context alone) with a bootstrap interval; flagged above 0.65 within authors. Where the env
  has a verify decision (choices that accept or reject the draft), the fitted classifier also
  plays as the ``surface-verifier`` shortcut, flagged like the others.
- **Observer's reference** (optional, ``observer_steps=N``; ``orchenv.audit_observer``): a
  MaskablePPO trained for ``N`` env steps on the train split through the discrete view, played
  greedily on the audited tasks (kind ``observer``: reported, never a comparison level, never
  flagged). The report compares it with the best blind policy and the skill reference at the
  realistic level (paired by task) and says whether the skill is learnable from the
  observation at that budget.

A blind or shortcut policy is flagged when its mean return is within ``tolerance`` of (or
above) a comparison level: the skill reference at the realistic ``s``, or a trained row; the
report names the level. The **gameability gap** is the skill reference at ``s = 1`` minus the
best blind or shortcut policy, paired by task, with a 95% interval.

The **privileged best response** (``best-response``) is an upper bound only, never a
comparison: from the task's start state it searches over the env's discrete choices
(``action_choices()``) by stepping ``fork()`` copies (simulated agents are deterministic given
the state, so every branch is exact: the search sees the future no policy can). Search
(``method``): ``"exact"`` enumerates every sequence of available choices (depth-first, a fork
per branch); ``"mcts"`` is UCT with random-choice rollouts and a budget of env steps per task
(a subtree whose leaves were all reached is marked solved, so a small tree is still searched
exhaustively and reported exact); ``"beam"`` keeps the ``width`` best partial sequences by
return so far; ``"auto"`` is exact when the largest possible tree, ``sum(n**d for d in
1..max_turns)`` steps for ``n`` choices, is within the per-task budget, else MCTS. A task's
best response is the best episode found, every other policy's episode included, so it never
scores below one; it is a lower bound of the true best response unless the report says the
search was exact. ``best_response=False`` skips it.

Every task starts from its own ``reset`` of one env that is itself never stepped; searches,
their statistics and the random streams are built afresh per task, so nothing carries from
one task to the next. Returns are the env's summed step rewards (gamma = 1). Each row also
reports the outcome (``correct`` as accuracy, ``score``), cost, tokens, agent calls, invalid
actions, turns, ``info["metrics"]`` means and, per turn, which actions were taken.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import numbers
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from orchenv.audit_tells import (
    DEFAULT_TELL_EPISODES,
    DEFAULT_TELL_TEST_EPISODES,
    SURFACE_VERIFIER,
    SURFACE_VERIFIER_DOC,
    TASK_MARGIN,
    surface_verifier,
    tell_meter,
    tune_verifier,
)
from orchenv.core import OrchestrationEnv
from orchenv.discrete import available, current_choices, orch_base
from orchenv.error import ConfigError, OrchEnvError

__all__ = ["DEFAULT_REALISTIC_SKILL", "AuditReport", "AuditRow", "audit", "tree_size"]

METHODS = ("auto", "exact", "mcts", "beam")
#: defaults: minutes per env id on two CPU cores (benchmarks/audit_all.py measures them)
DEFAULT_TASKS = 100
DEFAULT_BUDGET = 2000
DEFAULT_TOLERANCE = 0.05
DEFAULT_TIME_LIMIT_S = 480.0
#: the skill reference's sweep, and the level compared with when the env names none
DEFAULT_SKILL_LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
DEFAULT_REALISTIC_SKILL = 0.75
#: the best blind policy enumerates every sequence when there are at most this many, else
#: searches by coordinate ascent with at most ``blind_budget`` sequences per fold
BLIND_EXHAUSTIVE_CAP = 512
DEFAULT_BLIND_BUDGET = 200
#: with a time limit, the share of it kept for the blind coordinate ascent (after the tasks)
BLIND_TIME_SHARE = 0.3
#: with a time limit, the share of it the tell meter may spend collecting episodes
TELL_TIME_SHARE = 0.25
#: returns closer than this are ties (then the cheaper, then the shorter episode wins)
TIE = 1e-9
#: ``auto`` tries a capped exhaustive search when the largest possible tree is at most this
#: many budgets (masks often make the real tree much smaller), else goes straight to MCTS
TRY_EXACT_FACTOR = 1000
#: exploration constant of UCT on returns normalised to [0, 1]
UCT_C = 0.7
LABEL_CHARS = 80
_EMPTY_TAG_RE = re.compile(r"<([A-Za-z][\w-]*)>\s*</\1>")
#: what the generic strategies do
GENERIC = {
    "first-available": "the first available choice at every turn",
    "random-available": "a uniformly random available choice (seeded per task)",
}

Strategy = Callable[[OrchestrationEnv], str]


# -- episodes --------------------------------------------------------------------------------------
@dataclass
class Episode:
    """One played episode: what the audit needs of it (not the env states)."""

    ret: float = 0.0
    actions: tuple[str, ...] = ()
    tokens: int = 0
    invalid: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def then(self, text: str, reward: float, info: Mapping[str, Any]) -> Episode:
        """This episode followed by one step (a new object: search branches share prefixes)."""
        tokens = info.get("tokens") or {}
        return Episode(
            ret=self.ret + float(reward),
            actions=(*self.actions, label(text)),
            tokens=self.tokens + int(tokens.get("prompt", 0)) + int(tokens.get("completion", 0)),
            invalid=self.invalid + int(bool(info.get("invalid_action"))),
            info={k: v for k, v in info.items() if k not in ("messages", "calls")},
        )

    @property
    def cost(self) -> float:
        return float(self.info.get("episode_cost_usd", 0.0) or 0.0)


def label(text: str) -> str:
    """A short one-line label of an action text: whitespace collapsed, empty tag pairs
    (``<thinking></thinking>``) dropped, the middle of a long text cut out."""
    flat = " ".join(_EMPTY_TAG_RE.sub(" ", text).split()) or " ".join(text.split())
    if len(flat) <= LABEL_CHARS:
        return flat
    half = (LABEL_CHARS - 1) // 2
    return f"{flat[:half]}…{flat[-half:]}"


def better(a: Episode | None, b: Episode | None) -> Episode | None:
    """The better episode: higher return; on a tie the cheaper, then the shorter; else ``a``."""
    if a is None or b is None:
        return a if b is None else b
    if abs(a.ret - b.ret) > TIE:
        return a if a.ret > b.ret else b
    if abs(a.cost - b.cost) > TIE:
        return a if a.cost < b.cost else b
    return b if len(b.actions) < len(a.actions) else a


def _step(env: OrchestrationEnv, ep: Episode, text: str) -> tuple[Episode, bool]:
    _, reward, terminated, truncated, info = env.step(text)
    return ep.then(text, float(reward), info), bool(terminated or truncated)


def play(root: OrchestrationEnv, policy: Strategy) -> Episode:
    """One episode of ``policy`` from a fork of ``root`` (``root`` is left as it was)."""
    env, ep = root.fork(), Episode()
    for _ in range(env.max_turns + 1):
        ep, done = _step(env, ep, policy(env))
        if done:
            return ep
    raise OrchEnvError(f"an episode of {type(env).__name__} did not end within max_turns")


# -- search ----------------------------------------------------------------------------------------
@dataclass
class SearchResult:
    best: Episode | None
    steps: int
    exact: bool
    method: str


class _OverBudget(Exception):
    """A capped exhaustive search ran out of steps (``auto`` then falls back to MCTS)."""

    def __init__(self, steps: int) -> None:
        super().__init__(steps)
        self.steps = steps


def tree_size(n_choices: int, horizon: int) -> int:
    """Env steps an exhaustive search takes at most: ``sum(n**d for d in 1..horizon)``."""
    return sum(n_choices**d for d in range(1, horizon + 1))


def search_exact(root: OrchestrationEnv, n: int, cap: int | None = None) -> SearchResult:
    """Depth-first enumeration of every sequence of available choices (a fork per branch
    but the last); raises ``_OverBudget`` past ``cap`` env steps."""
    best: Episode | None = None
    steps = 0

    def visit(env: OrchestrationEnv, ep: Episode) -> None:
        nonlocal best, steps
        choices = current_choices(env, n)
        options = available(choices)
        for k in options:
            # the last branch steps ``env`` itself: this search's own fork, not needed after
            child = env if k == options[-1] else env.fork()
            text = choices[k]
            assert text is not None
            child_ep, done = _step(child, ep, text)
            steps += 1
            if cap is not None and steps > cap:
                raise _OverBudget(steps)
            if done:
                best = better(best, child_ep)
            else:
                visit(child, child_ep)

    visit(root.fork(), Episode())
    return SearchResult(best, steps, exact=True, method="exact")


class _Node:
    __slots__ = ("best", "children", "solved", "total", "untried", "visits")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.untried: list[int] | None = None
        self.visits = 0
        self.total = 0.0
        self.best = -math.inf
        self.solved = False


def search_mcts(
    root: OrchestrationEnv, n: int, budget: int, rng: np.random.Generator
) -> SearchResult:
    """UCT over the choices with random-choice rollouts, ``budget`` env steps.

    Each iteration replays its path on one fresh fork of the root (forks are exact, so a
    replay reaches the same state), expands one untried choice in index order, and rolls out
    uniformly over the available choices. Values blend a node's mean and best return
    (single-player search: the best leaf is what counts), normalised by the range seen.
    """
    top = _Node()
    best: Episode | None = None
    steps = 0
    low, high = math.inf, -math.inf

    def score(parent: _Node, child: _Node) -> float:
        value = (child.total / child.visits + child.best) / 2
        norm = (value - low) / (high - low) if high > low else 0.5
        return norm + UCT_C * math.sqrt(math.log(parent.visits) / child.visits)

    while steps < budget and not top.solved:
        env, ep, node, path, done = root.fork(), Episode(), top, [top], False
        while not done:
            choices = current_choices(env, n)
            if node.untried is None:
                node.untried = available(choices)
            if node.untried:  # expand one choice, then roll out
                k = node.untried.pop(0)
                child = node.children[k] = _Node()
            else:
                open_children = [(k, c) for k, c in node.children.items() if not c.solved]
                k, child = max(open_children, key=lambda kc: score(node, kc[1]))
            text = choices[k]
            assert text is not None
            ep, done = _step(env, ep, text)
            steps += 1
            path.append(child)
            child.solved = child.solved or done
            if child.visits == 0:
                break
            node = child
        while not done:  # rollout
            choices = current_choices(env, n)
            options = available(choices)
            text = choices[options[int(rng.integers(len(options)))]]
            assert text is not None
            ep, done = _step(env, ep, text)
            steps += 1
        best = better(best, ep)
        low, high = min(low, ep.ret), max(high, ep.ret)
        for visited in path:
            visited.visits += 1
            visited.total += ep.ret
            visited.best = max(visited.best, ep.ret)
        for visited in reversed(path):
            if visited.untried == [] and all(c.solved for c in visited.children.values()):
                visited.solved = True
    return SearchResult(best, steps, exact=top.solved, method="mcts")


def search_beam(root: OrchestrationEnv, n: int, budget: int) -> SearchResult:
    """Beam search: per level, every available choice of the kept states; keep the
    ``width = budget // (max_turns * n)`` best unfinished ones by return so far."""
    width = max(1, budget // max(1, root.max_turns * n))
    beam: list[tuple[OrchestrationEnv, Episode]] = [(root.fork(), Episode())]
    best: Episode | None = None
    steps, pruned = 0, False
    while beam and steps < budget:
        frontier: list[tuple[OrchestrationEnv, Episode]] = []
        for env, ep in beam:
            choices = current_choices(env, n)
            for k in available(choices):
                child, text = env.fork(), choices[k]
                assert text is not None
                child_ep, done = _step(child, ep, text)
                steps += 1
                if done:
                    best = better(best, child_ep)
                else:
                    frontier.append((child, child_ep))
        frontier.sort(key=lambda item: -item[1].ret)  # stable: index order breaks ties
        pruned = pruned or len(frontier) > width
        beam = frontier[:width]
    if beam:  # out of budget: finish the leading state with its first choices
        env, ep = beam[0]
        done = False
        while not done:
            choices = current_choices(env, n)
            text = choices[available(choices)[0]]
            assert text is not None
            ep, done = _step(env, ep, text)
            steps += 1
        best = better(best, ep)
    return SearchResult(best, steps, exact=not pruned and not beam, method="beam")


# -- the report ------------------------------------------------------------------------------------
@dataclass
class AuditRow:
    """One policy's results over the audited tasks (per-episode means; ``*_se``: standard
    errors; ``*_ci``: half-widths of 95% intervals). ``gap_ref``: the comparison level's
    mean return (the skill reference at the realistic ``s``, else the first trained row)
    minus this one's, paired by task; ``gap``: the same against the privileged best response
    (an upper bound; ``None`` when it was not searched)."""

    name: str
    #: "best-response" (the upper bound), "skill" (the skill reference), "blind" (the best
    #: blind policy), "env" (the env's audit_strategies), "generic", "trained" or "control"
    #: (the env's control_strategies: honest plans, reported, never flagged, not in the gap)
    kind: str
    description: str
    returns: list[float]
    return_mean: float
    return_se: float
    gap: float | None
    gap_se: float | None
    flagged: bool
    accuracy: float | None
    score: float | None
    cost_usd: float
    tokens: float
    calls: float
    agent_calls: dict[str, float]
    invalid_actions: float
    turns: float
    metrics: dict[str, float]
    #: per turn: action label -> share of episodes that took it
    actions: list[dict[str, float]]
    return_ci: float = 0.0
    gap_ref: float | None = None
    gap_ref_se: float | None = None
    gap_ref_ci: float | None = None
    #: the comparison levels (row names) this row came within the tolerance of
    flagged_by: list[str] = field(default_factory=list)
    #: the skill level of a "skill" row
    skill: float | None = None


@dataclass
class AuditReport:
    """What ``audit`` found for one env id (``to_markdown``, ``to_json``/``from_json``)."""

    env_id: str
    split: str
    seed: int
    env_kwargs: dict[str, Any]
    task_ids: list[str]
    method: str
    searches: dict[str, int]
    exact: bool
    budget: int
    search_steps: int
    n_choices: int
    max_turns: int
    tolerance: float
    elapsed_s: float
    notes: list[str]
    rows: list[AuditRow]
    #: whether the privileged best response (the upper bound) was searched
    best_response: bool = True
    #: whether the env has a skill reference (``skill_action`` returned actions)
    skill_available: bool = False
    skill_levels: list[float] = field(default_factory=list)
    realistic_skill: float = DEFAULT_REALISTIC_SKILL
    realistic_skill_source: str = ""
    realistic_defaulted: bool = True
    #: s = 1 above s = 0 beyond the 95% interval (None: no skill reference)
    skill_rises: bool | None = None
    #: where the skill curve does not rise
    skill_trend: list[str] = field(default_factory=list)
    #: how the best blind policy was found (method, sequences, folds)
    blind: dict[str, Any] = field(default_factory=dict)
    #: skill reference at s = 1 minus the best blind/shortcut policy, paired by task
    gameability_gap: dict[str, Any] | None = None
    #: the rows shortcuts are compared with (the skill reference at the realistic s, trained)
    comparison_levels: list[str] = field(default_factory=list)
    #: the tell meter (``orchenv.audit_tells.TellMeter`` as a dict); None: not measured
    tells: dict[str, Any] | None = None
    #: the observer's reference (``_observer_summary``); None: not trained
    observer: dict[str, Any] | None = None

    @property
    def best(self) -> AuditRow | None:
        """The privileged best response (an upper bound), if searched."""
        return next((row for row in self.rows if row.kind == "best-response"), None)

    @property
    def flagged(self) -> list[AuditRow]:
        return [row for row in self.rows if row.flagged]

    @property
    def reference(self) -> AuditRow | None:
        """The skill reference at the realistic skill level, if the env has one."""
        return self.skill_row(self.realistic_skill)

    def skill_row(self, s: float) -> AuditRow | None:
        return next(
            (
                r
                for r in self.rows
                if r.kind == "skill" and r.skill is not None and _same(r.skill, s)
            ),
            None,
        )

    @property
    def skill_curve(self) -> list[AuditRow]:
        return sorted((r for r in self.rows if r.kind == "skill"), key=lambda r: r.skill or 0.0)

    def row(self, name: str) -> AuditRow:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no row {name!r}; rows: {[r.name for r in self.rows]}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditReport:
        fields = {f.name for f in dataclasses.fields(cls)}
        row_fields = {f.name for f in dataclasses.fields(AuditRow)}
        values = {k: v for k, v in data.items() if k in fields}
        values["rows"] = [
            AuditRow(**{k: v for k, v in row.items() if k in row_fields}) for row in data["rows"]
        ]
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> AuditReport:
        return cls.from_dict(json.loads(text))

    def to_markdown(self) -> str:
        return _markdown(self)


def _same(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9


def skill_name(s: float) -> str:
    return f"skill@{s:g}"


# -- the audit -------------------------------------------------------------------------------------
@dataclass
class _Tally:
    """What the audit collects task by task (nothing of it feeds back into a search)."""

    task_ids: list[str] = field(default_factory=list)
    best: list[Episode] = field(default_factory=list)
    strategies: dict[str, list[Episode]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=lambda: dict(GENERIC))
    #: label of choice k the first time a policy could take it
    seen: dict[int, str] = field(default_factory=dict)
    #: tasks where another policy's episode scored above the search
    beaten: list[str] = field(default_factory=list)
    steps: int = 0
    exact: bool = True
    #: tasks per search that produced their result ("exact", "mcts", "beam")
    searches: dict[str, int] = field(default_factory=dict)
    #: skill level -> its episodes, task by task
    skill: dict[float, list[Episode]] = field(default_factory=dict)
    #: why there is no skill reference (None: there is one, or none was asked for)
    no_skill: str | None = None
    trained: dict[str, list[Episode]] = field(default_factory=dict)
    #: a fork of each task's start state (the best blind search plays them afterwards)
    roots: list[OrchestrationEnv] = field(default_factory=list)
    #: strategies built per task from their own stream: name -> (kind, factory)
    extra: dict[str, tuple[str, Callable[[np.random.Generator], Strategy]]] = field(
        default_factory=dict
    )
    #: names of the trained rows that are observer references (reported, not levels)
    observers: set[str] = field(default_factory=set)


class _NoSkill(Exception):
    """``skill_action`` returned None: the env has no skill reference."""


def audit(
    env_id: str,
    *,
    tasks: int = DEFAULT_TASKS,
    split: str | None = None,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    method: str = "auto",
    budget: int = DEFAULT_BUDGET,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
    progress: bool = True,
    skill_levels: Sequence[float] | None = None,
    best_response: bool = True,
    blind: bool = True,
    blind_budget: int = DEFAULT_BLIND_BUDGET,
    trained: Mapping[str, Any] | None = None,
    tells: bool = False,
    tell_episodes: int = DEFAULT_TELL_EPISODES,
    observer_steps: int = 0,
) -> AuditReport:
    """Skill reference, best blind policy, shortcuts (and the privileged upper bound) of
    ``env_id`` on ``tasks`` sampled tasks.

    Args:
        tasks: how many tasks (sampled without replacement from ``split`` with ``seed``).
        split: the split; ``None``: ``"test"`` when the env has one, else the env's default.
        env_kwargs: arguments for ``gym.make`` (e.g. ``{"reward": "paper"}``).
        tolerance: a blind or shortcut policy whose mean return is within this of (or above)
            a comparison level is flagged.
        method: the best response's search, ``"auto"``, ``"exact"``, ``"mcts"`` or ``"beam"``.
        budget: env steps of search per task (MCTS, beam; ``auto`` compares the tree to it).
        time_limit_s: stop before a task that would end past this (the report says so).
        progress: a tqdm bar over the tasks (on stderr).
        skill_levels: the skill reference's sweep (default ``DEFAULT_SKILL_LEVELS``); 0, 1
            and the realistic level are always added; ``()``: no skill reference.
        best_response: search the privileged best response (an upper bound; the expensive part).
        blind: search the best blind policy.
        blind_budget: sequences per fold the coordinate ascent may evaluate.
        trained: ``{name: policy}`` comparison levels: a callable ``env -> action text``
            (reading only what a learner sees) or a controller with ``act(obs, info)`` (and
            optionally ``bind(env)``, ``reset(seed)``), e.g. ``MaskedPolicyController``.
        tells: run the tell meter (``orchenv.audit_tells``; ``tell_episodes`` train episodes,
            half as many test ones) and, where the env has a verify decision, add the
            ``surface-verifier`` shortcut.
        observer_steps: train the observer's reference (MaskablePPO, this many env steps on the
            train split; needs the ``train`` extra) and report it; 0: skip.
    """
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    if tasks < 1 or budget < 1 or blind_budget < 1:
        raise ConfigError(
            f"tasks, budget and blind_budget must be >= 1, got {tasks}, {budget}, {blind_budget}"
        )
    if not math.isfinite(tolerance):
        raise ConfigError(f"tolerance must be a finite number, got {tolerance!r}")
    if observer_steps < 0:
        raise ConfigError(f"observer_steps must be >= 0 (0: skip), got {observer_steps}")
    started = time.monotonic()
    kwargs = dict(env_kwargs or {})
    tally = _Tally()
    trained = dict(trained or {})
    meter = None
    if tells:
        meter, fitted = tell_meter(
            env_id,
            episodes=tell_episodes,
            test_episodes=max(2, min(DEFAULT_TELL_TEST_EPISODES, tell_episodes // 2)),
            seed=seed,
            env_kwargs=kwargs,
            time_limit_s=None if time_limit_s is None else TELL_TIME_SHARE * time_limit_s,
        )
        if fitted is not None and meter.verify_decisions:
            threshold, tried = tune_verifier(
                env_id, fitted, episodes=min(tell_episodes, 100), seed=seed, env_kwargs=kwargs
            )
            tally.extra[SURFACE_VERIFIER] = (
                "generic",
                lambda rng: surface_verifier(fitted, rng, threshold),
            )
            shown = ", ".join(f"{t:g}: {m:.3f}" for t, m in tried.items())
            tally.descriptions[SURFACE_VERIFIER] = (
                f"{SURFACE_VERIFIER_DOC} (threshold {threshold:g}; train returns {shown})"
            )
    observer_info: dict[str, Any] | None = None
    if observer_steps:
        from orchenv.audit_observer import OBSERVER, train_observer

        controller, observer_info = train_observer(
            env_id, steps=observer_steps, seed=seed, env_kwargs=kwargs
        )
        trained[OBSERVER] = controller
        tally.observers.add(OBSERVER)
        tally.descriptions[OBSERVER] = (
            f"MaskablePPO, {observer_steps:,} env steps on the train split through the discrete "
            "view, played greedily (observation only; reported, not a comparison level)"
        )
    env, split, notes = _make(env_id, split, dict(kwargs))
    base = orch_base(env)
    realistic, source, defaulted = _realistic(base, notes)
    levels = _levels(skill_levels, realistic)
    plan = _plan(base, tasks, seed, notes)
    n, chosen = 0, method
    deadline = None if time_limit_s is None else started + time_limit_s
    bar = tqdm(total=len(plan), desc=f"audit {env_id}", disable=not progress, leave=False)
    loop_limit = time_limit_s
    try:
        for number, (reset_seed, options) in enumerate(plan):
            elapsed = time.monotonic() - started
            if (
                loop_limit is not None
                and time_limit_s is not None
                and number
                and elapsed * (number + 1) / number > loop_limit
            ):
                notes.append(
                    f"stopped after {number} of {len(plan)} tasks to stay within "
                    f"time_limit_s={time_limit_s:g}"
                )
                break
            obs, info = base.reset(seed=reset_seed, options=options)
            if number == 0:
                n = _n_choices(base, env_id, notes)
                if n and best_response:
                    chosen = _plan_search(method, n, base.max_turns, budget)
                if time_limit_s is not None and blind and n**base.max_turns > BLIND_EXHAUSTIVE_CAP:
                    loop_limit = time_limit_s * (1 - BLIND_TIME_SHARE)  # time for the ascent
            _audit_task(
                base,
                (obs, info),
                tally,
                n,
                chosen if (n and best_response) else None,
                budget,
                (seed, number),
                levels,
                trained,
            )
            bar.update(1)
        if tally.no_skill is not None:
            tally.skill.clear()
            notes.append(f"no skill reference: {tally.no_skill}")
        blind_info: dict[str, Any] = {}
        blind_eps: list[Episode] | None = None
        if not blind:
            blind_info = {"method": "skipped", "note": "not asked for"}
        elif not n:
            blind_info = {"method": "skipped", "note": "the env has no action_choices()"}
        else:
            blind_eps, blind_info = _best_blind(tally, n, base.max_turns, blind_budget, deadline)
    finally:
        bar.close()
        env.close()
    if tally.beaten:
        notes.append(
            f"on {len(tally.beaten)} of {len(tally.task_ids)} tasks another policy scored above "
            f"the search (its episode is the best response there), e.g. {tally.beaten[0]}"
        )
    rows = _rows(tally, blind_eps, blind_info, bool(n) and best_response)
    comparison = _compare(rows, realistic, tolerance)
    rises, trend = _trend(rows)
    observer = None
    if observer_info is not None:
        observer = _observer_summary(rows, observer_info, realistic, tolerance)
    return AuditReport(
        env_id=env_id,
        split=split,
        seed=seed,
        env_kwargs=json.loads(json.dumps(kwargs, default=repr)),
        task_ids=tally.task_ids,
        method=("+".join(sorted(tally.searches)) or chosen) if tally.best else "none",
        searches=tally.searches,
        exact=tally.exact and bool(tally.best),
        budget=budget,
        search_steps=tally.steps,
        n_choices=n,
        max_turns=base.max_turns,
        tolerance=tolerance,
        elapsed_s=round(time.monotonic() - started, 3),
        notes=notes,
        rows=rows,
        best_response=bool(tally.best),
        skill_available=bool(tally.skill),
        skill_levels=list(levels) if tally.skill else [],
        realistic_skill=realistic,
        realistic_skill_source=source,
        realistic_defaulted=defaulted,
        skill_rises=rises,
        skill_trend=trend,
        blind=blind_info,
        gameability_gap=_gameability(rows),
        comparison_levels=comparison,
        tells=None if meter is None else dataclasses.asdict(meter),
        observer=observer,
    )


def _realistic(base: OrchestrationEnv, notes: list[str]) -> tuple[float, str, bool]:
    """The env's realistic skill level, its source, and whether it was defaulted."""
    value = getattr(type(base), "realistic_skill", None)
    source = str(getattr(type(base), "realistic_skill_source", "") or "")
    if value is None:
        return DEFAULT_REALISTIC_SKILL, "", True
    try:
        level = float(value)
    except (TypeError, ValueError):
        level = math.nan
    if not 0.0 <= level <= 1.0:
        notes.append(
            f"{type(base).__name__}.realistic_skill={value!r} is not in [0, 1]; used the "
            f"default {DEFAULT_REALISTIC_SKILL:g}"
        )
        return DEFAULT_REALISTIC_SKILL, "", True
    return level, source, False


def _levels(asked: Sequence[float] | None, realistic: float) -> tuple[float, ...]:
    if asked is not None and len(asked) == 0:
        return ()
    values = DEFAULT_SKILL_LEVELS if asked is None else tuple(asked)
    for s in values:
        if not isinstance(s, numbers.Real) or isinstance(s, bool) or not 0.0 <= s <= 1.0:
            raise ConfigError(f"skill levels must be numbers in [0, 1], got {s!r}")
    out: list[float] = []
    for s in sorted({0.0, 1.0, realistic, *(float(v) for v in values)}):
        if not any(_same(s, t) for t in out):
            out.append(s)
    return tuple(out)


def _audit_task(
    root: OrchestrationEnv,
    start: tuple[Any, dict[str, Any]],
    tally: _Tally,
    n: int,
    method: str | None,
    budget: int,
    key: tuple[int, int],
    levels: Sequence[float],
    trained: Mapping[str, Any],
) -> None:
    """Play every policy (and search) from ``root`` (just reset; only its forks are stepped)."""
    assert root.task is not None
    tally.task_ids.append(root.task.id)
    found = None
    if method is not None:
        found = _search(method, root, n, budget, np.random.default_rng([*key, 0]))
        tally.steps += found.steps
        tally.searches[found.method] = tally.searches.get(found.method, 0) + 1
        tally.exact = tally.exact and found.exact
    task_best = None if found is None else found.best
    rng = np.random.default_rng([*key, 1])  # the random strategy's draws, whatever the search
    strategies = _strategies(root, n, rng, tally)
    for number, (name, (kind, factory)) in enumerate(tally.extra.items()):
        strategies[name] = (kind, factory(np.random.default_rng([*key, 4, number])))
    for name, (kind, policy) in strategies.items():
        ep = _play_named(root, name, policy)
        tally.strategies.setdefault(name, []).append(ep)
        tally.kinds[name] = kind
        task_best = better(task_best, ep)
    if levels and tally.no_skill is None:
        for s in levels:
            try:
                ep = play_skill(root, s, key)
            except _NoSkill as exc:
                tally.no_skill = str(exc)
                break
            tally.skill.setdefault(s, []).append(ep)
            task_best = better(task_best, ep)
    for name, policy in trained.items():
        ep = _play_trained(root, start, name, policy)
        tally.trained.setdefault(name, []).append(ep)
        task_best = better(task_best, ep)
    if n:
        tally.roots.append(root.fork())
    if found is not None:
        assert task_best is not None
        if found.best is None or task_best.ret > found.best.ret + TIE:
            tally.beaten.append(root.task.id)
        tally.best.append(task_best)


def play_skill(root: OrchestrationEnv, s: float, key: tuple[int, int]) -> Episode:
    """One episode of the skill reference at level ``s`` from a fork of ``root``.

    ``skilled`` is drawn per decision from a stream seeded by ``key`` alone (the same draws
    at every ``s``); ``skill_action``'s own ``rng`` is seeded by ``key`` and ``s``.
    """
    draws = np.random.default_rng([*key, 2])
    act_rng = np.random.default_rng([*key, 3, round(s * 1_000_000)])
    name = type(root).__name__

    def policy(env: OrchestrationEnv) -> str:
        skilled = bool(draws.random() < s)
        text = env.skill_action(skilled, act_rng)
        if text is None:
            raise _NoSkill(
                f"{name}.skill_action(skilled={skilled}) returned None (turn {env.turn}); "
                "shortcuts are compared with no skill reference"
            )
        if not isinstance(text, str):
            raise OrchEnvError(f"{name}.skill_action must return str or None, got {text!r}")
        return text

    try:
        return play(root, policy)
    except (_NoSkill, OrchEnvError):
        raise
    except Exception as exc:
        raise OrchEnvError(f"{name}.skill_action failed: {type(exc).__name__}: {exc}") from exc


def _play_trained(
    root: OrchestrationEnv, start: tuple[Any, dict[str, Any]], name: str, policy: Any
) -> Episode:
    """One episode of a trained policy: a callable on the env, or a controller (``act``)."""
    if not hasattr(policy, "act"):
        return _play_named(root, name, policy)
    env, ep = root.fork(), Episode()
    obs, info = start
    try:
        if hasattr(policy, "reset"):
            policy.reset(seed=0)
        if hasattr(policy, "bind"):
            policy.bind(env)
        for _ in range(env.max_turns + 1):
            text = policy.act(obs, info)
            obs, reward, terminated, truncated, info = env.step(text)
            ep = ep.then(text, float(reward), info)
            if terminated or truncated:
                return ep
    except OrchEnvError:
        raise
    except Exception as exc:
        raise OrchEnvError(f"trained policy {name!r} failed: {type(exc).__name__}: {exc}") from exc
    raise OrchEnvError(f"an episode of {type(env).__name__} did not end within max_turns")


# -- the best blind policy -------------------------------------------------------------------------
class _Blind:
    """Episodes of task-independent choice sequences, cached by the prefix actually played
    (a sequence's episode on a task depends only on the choices up to its end)."""

    def __init__(self, tally: _Tally, n: int) -> None:
        self.roots, self.seen, self.n = tally.roots, tally.seen, n
        self.done: dict[tuple[int, tuple[int, ...]], Episode] = {}
        self.played = 0
        self.longest = 1

    def episode(self, seq: tuple[int, ...], task: int) -> Episode:
        for length in range(1, len(seq) + 1):
            hit = self.done.get((task, seq[:length]))
            if hit is not None:
                return hit
        decision = 0
        n, seen = self.n, self.seen

        def policy(env: OrchestrationEnv) -> str:
            nonlocal decision
            choices = current_choices(env, n)
            k = seq[min(decision, len(seq) - 1)]
            decision += 1
            text = choices[k]
            if text is None:
                text = choices[available(choices)[0]]
            else:
                seen.setdefault(k, label(text))
            assert text is not None
            return text

        ep = play(self.roots[task], policy)
        self.played += 1
        self.longest = max(self.longest, len(ep.actions))
        self.done[(task, seq[: len(ep.actions)])] = ep
        return ep

    def mean(self, seq: tuple[int, ...], tasks: Sequence[int]) -> float:
        return float(np.mean([self.episode(seq, t).ret for t in tasks]))


def _best_blind(
    tally: _Tally, n: int, horizon: int, budget: int, deadline: float | None
) -> tuple[list[Episode], dict[str, Any]]:
    """The best blind policy's episodes (each task's from the sequence picked on the other
    fold) and how it was found."""
    blind = _Blind(tally, n)
    count = len(tally.roots)
    folds = [list(range(0, count, 2)), list(range(1, count, 2))] if count > 1 else [[0], [0]]
    exhaustive = n**horizon <= BLIND_EXHAUSTIVE_CAP
    out_of_time = False
    picks = []
    tables = [_blind_table(root, n, horizon) for root in tally.roots] if exhaustive else []
    for pick_on in folds[: 2 if count > 1 else 1]:
        if exhaustive:
            seq, mean, tried, timed = _blind_enumerate(tables, pick_on)
        else:
            seq, mean, tried, timed = _blind_ascent(blind, n, horizon, pick_on, budget, deadline)
        out_of_time = out_of_time or timed
        picks.append({"sequence": list(seq), "in_sample_return": mean, "evaluated": tried})
    episodes: list[Episode] = []
    for task in range(count):
        fold = 0 if count == 1 else 1 - task % 2  # the pick made on the other fold
        episodes.append(blind.episode(tuple(cast("list[int]", picks[fold]["sequence"])), task))
    for number, (pick, (on, to)) in enumerate(
        zip(picks, [("even", "odd"), ("odd", "even")], strict=False)
    ):
        pick["picked_on"], pick["reported_on"] = f"{on}-numbered tasks", f"{to}-numbered tasks"
        reported = [ep for task, ep in enumerate(episodes) if count == 1 or task % 2 != number]
        pick["labels"] = _turn_labels(cast("list[int]", pick["sequence"]), reported)
    if count == 1:
        picks[0]["picked_on"] = picks[0]["reported_on"] = "the only task"
    info: dict[str, Any] = {
        "method": "exhaustive" if exhaustive else "coordinate ascent",
        "sequences": n**horizon,
        "episodes_played": blind.played,
        "folds": picks,
        "note": (
            "two-fold: each task's return is that of the sequence picked on the other half"
            if count > 1
            else "one task: the sequence was picked and reported on the same task (inflated)"
        ),
    }
    if out_of_time:
        info["note"] += "; the search stopped at the time limit (a lower bound)"
    return episodes, info


def _turn_labels(sequence: Sequence[int], episodes: Sequence[Episode]) -> list[str]:
    """Per turn of a blind sequence: its choice index and the action most often played
    there (choice lists can change with the state), or that every episode had ended."""
    labels = []
    for turn, k in enumerate(sequence):
        taken = Counter(ep.actions[turn] for ep in episodes if len(ep.actions) > turn)
        if not taken:
            labels.append(f"{k}: (ended)")
            continue
        text, times = taken.most_common(1)[0]
        share = "" if times == sum(taken.values()) else f" ({times / sum(taken.values()):.0%})"
        labels.append(f"{k}: {text}{share}")
    return labels


def _blind_table(root: OrchestrationEnv, n: int, horizon: int) -> np.ndarray:
    """The return of every sequence of ``horizon`` choice indices on one task, an array of
    shape ``(n,) * horizon``: a depth-first walk (a fork per branch) in which the indices
    that play the same action (an unavailable one plays the first available) share a branch,
    and an episode that ends early fills every sequence with its prefix."""
    table = np.zeros((n,) * horizon)

    def visit(env: OrchestrationEnv, prefixes: list[tuple[int, ...]], ret: float) -> None:
        choices = current_choices(env, n)
        first = available(choices)[0]
        groups: dict[int, list[int]] = {}
        for k in range(n):
            groups.setdefault(k if choices[k] is not None else first, []).append(k)
        for number, (played, ks) in enumerate(groups.items()):
            child = env if number == len(groups) - 1 else env.fork()
            text = choices[played]
            assert text is not None
            _, reward, terminated, truncated, _ = child.step(text)
            longer = [(*p, k) for p in prefixes for k in ks]
            if terminated or truncated or len(longer[0]) >= horizon:
                for prefix in longer:
                    table[prefix] = ret + float(reward)
            else:
                visit(child, longer, ret + float(reward))

    visit(root.fork(), [()], 0.0)
    return table


def _blind_enumerate(
    tables: Sequence[np.ndarray], tasks: Sequence[int]
) -> tuple[tuple[int, ...], float, int, bool]:
    means = np.mean([tables[t] for t in tasks], axis=0)
    flat = means.reshape(-1)
    first = int(np.flatnonzero(flat >= flat.max() - TIE)[0])  # ties: the lowest indices
    seq = tuple(int(k) for k in np.unravel_index(first, means.shape))
    return seq, float(flat[first]), flat.size, False


def _blind_ascent(
    blind: _Blind,
    n: int,
    horizon: int,
    tasks: Sequence[int],
    budget: int,
    deadline: float | None,
) -> tuple[tuple[int, ...], float, int, bool]:
    """Coordinate ascent from the best constant sequence: per turn position (up to the
    longest episode seen), every choice with the others fixed; until a pass changes nothing
    or ``budget`` sequences were evaluated."""
    scores: dict[tuple[int, ...], float] = {}

    def score(seq: tuple[int, ...]) -> float:
        if seq not in scores:
            scores[seq] = blind.mean(seq, tasks)
        return scores[seq]

    def out_of_time() -> bool:
        return deadline is not None and bool(scores) and time.monotonic() > deadline

    best, best_mean = (0,) * horizon, -math.inf
    for k in range(n):
        if len(scores) >= budget or out_of_time():
            return best, best_mean, len(scores), out_of_time()
        seq = (k,) * horizon
        if score(seq) > best_mean + TIE:
            best, best_mean = seq, score(seq)
    improved = True
    while improved:
        improved = False
        for position in range(min(horizon, blind.longest)):
            for k in range(n):
                if len(scores) >= budget or out_of_time():
                    return best, best_mean, len(scores), out_of_time()
                seq = (*best[:position], k, *best[position + 1 :])
                if score(seq) > best_mean + TIE:
                    best, best_mean, improved = seq, score(seq), True
    return best, best_mean, len(scores), False


def _make(env_id: str, split: str | None, kwargs: dict[str, Any]) -> tuple[gym.Env, str, list[str]]:
    """The env on the audited split, the split's name, and notes on how it was chosen."""
    notes: list[str] = []
    if split is not None:
        kwargs["split"] = split
    try:
        env = gym.make(env_id, **kwargs)
    except (gym.error.Error, TypeError) as exc:
        raise ConfigError(f"cannot make {env_id!r}: {exc}. See `orchenv list`.") from exc
    base = orch_base(env)
    if split is None and "split" not in kwargs:
        splits = _splits(base)
        if "test" in splits and base.split != "test":
            env.close()
            env = gym.make(env_id, **kwargs, split="test")
        elif "test" not in splits:
            notes.append(f"the env has no 'test' split; audited its default {base.split!r}")
    return env, orch_base(env).split, notes


def _splits(base: OrchestrationEnv) -> tuple[str, ...]:
    try:
        return tuple(base.task_source.splits)
    except OrchEnvError:
        return ()


def _plan(
    base: OrchestrationEnv, tasks: int, seed: int, notes: list[str]
) -> list[tuple[int, dict[str, Any]]]:
    """``(reset seed, reset options)`` per task: distinct task indices drawn with ``seed``
    when the env has an indexable task source, else tasks drawn by the reset seeds."""
    seeds = [int(s) for s in np.random.SeedSequence(seed).generate_state(tasks)]
    try:
        size = base.task_source.size(base.split)
    except OrchEnvError:
        notes.append("the env has no task source: tasks drawn by reset seeds (may repeat)")
        return [(s, {}) for s in seeds]
    if size < tasks:
        notes.append(f"split {base.split!r} has {size} tasks; audited all of them")
    indices = np.random.default_rng(seed).permutation(size)[: min(tasks, size)]
    return [(s, {"task_index": int(i)}) for s, i in zip(seeds, indices, strict=False)]


def _n_choices(base: OrchestrationEnv, env_id: str, notes: list[str]) -> int:
    """The number of discrete choices; 0 (with a note) when the env has none."""
    try:
        return len(current_choices(base))
    except NotImplementedError:
        notes.append(
            f"{env_id} has no discrete action set (action_choices()): no best response, best "
            "blind policy or generic strategies; see docs/adding-an-env.md"
        )
        return 0


def _plan_search(method: str, n: int, horizon: int, budget: int) -> str:
    """``auto``: exact when the largest possible tree fits the budget; exact capped at the
    budget, then MCTS, when masks might make the real tree fit; else MCTS."""
    if method != "auto":
        return method
    size = tree_size(n, horizon)
    if size <= budget:
        return "exact"
    return "exact-then-mcts" if size <= TRY_EXACT_FACTOR * budget else "mcts"


def _search(
    method: str, root: OrchestrationEnv, n: int, budget: int, rng: np.random.Generator
) -> SearchResult:
    if method == "exact":
        return search_exact(root, n)
    if method == "beam":
        return search_beam(root, n, budget)
    if method == "exact-then-mcts":
        try:
            return search_exact(root, n, cap=budget)
        except _OverBudget as over:
            found = search_mcts(root, n, budget, rng)
            return dataclasses.replace(found, steps=found.steps + over.steps)
    return search_mcts(root, n, budget, rng)


def _strategies(
    base: OrchestrationEnv, n: int, rng: np.random.Generator, tally: _Tally
) -> dict[str, tuple[str, Strategy]]:
    """The env's named strategies (described by their docstring's first line), then the
    generic ones; fresh per task (the random one draws from this task's ``rng``)."""
    out: dict[str, tuple[str, Strategy]] = {
        name: ("env", policy) for name, policy in base.audit_strategies().items()
    }
    # honest observation-only plans (e.g. the scripted plan in other words): reported beside
    # the skill reference, never flagged and never counted in the gameability gap
    controls = getattr(base, "control_strategies", None)
    if callable(controls):
        out.update({name: ("control", policy) for name, policy in controls().items()})
    for name, (_, policy) in out.items():
        doc = (getattr(policy, "__doc__", None) or "").strip().split("\n\n")[0]
        tally.descriptions.setdefault(name, " ".join(doc.split()))
    seen = tally.seen

    def always(env: OrchestrationEnv, k: int | None) -> str:
        choices = current_choices(env, n)
        preferred = None if k is None else choices[k]
        if k is not None and preferred is not None:
            seen.setdefault(k, label(preferred))
            return preferred
        text = choices[available(choices)[0]]
        assert text is not None
        return text

    def first(env: OrchestrationEnv) -> str:
        return always(env, None)

    def always_k(k: int) -> Strategy:
        return lambda env: always(env, k)

    def random_pick(env: OrchestrationEnv) -> str:
        choices = current_choices(env, n)
        options = available(choices)
        text = choices[options[int(rng.integers(len(options)))]]
        assert text is not None
        return text

    if not n:  # no discrete action set: no generic strategies
        return out
    out["first-available"] = ("generic", first)
    out["random-available"] = ("generic", random_pick)
    for k in range(n):
        out[f"always-choice-{k}"] = ("generic", always_k(k))
    return out


def _play_named(base: OrchestrationEnv, name: str, policy: Strategy) -> Episode:
    try:
        return play(base, policy)
    except OrchEnvError:
        raise
    except Exception as exc:  # an env's strategy failed: say which
        raise OrchEnvError(f"audit strategy {name!r} failed: {type(exc).__name__}: {exc}") from exc


# -- statistics ------------------------------------------------------------------------------------
#: two-sided 95% quantiles of Student's t for 1..30 degrees of freedom
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def t95(n: int) -> float:
    """The 95% two-sided Student-t quantile for a mean of ``n`` values (df = n - 1); beyond
    30 degrees of freedom a Cornish-Fisher expansion of the normal quantile (error < 1e-3)."""
    df = n - 1
    if df < 1:
        return 0.0
    if df <= len(_T95):
        return _T95[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return math.nan, math.nan
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return float(arr.mean()), se


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Mean, standard error and 95% half-width of ``a - b``, task by task."""
    mean, se = _mean_se([x - y for x, y in zip(a, b, strict=True)])
    return mean, se, se * t95(len(a))


def _mean_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def _row(
    name: str, kind: str, description: str, eps: Sequence[Episode], skill: float | None = None
) -> AuditRow:
    returns = [ep.ret for ep in eps]
    mean, se = _mean_se(returns)
    agents: Counter[str] = Counter()
    metrics: dict[str, list[float]] = {}
    for ep in eps:
        agents.update({a: int(c) for a, c in (ep.info.get("agent_calls") or {}).items()})
        for key, value in (ep.info.get("metrics") or {}).items():
            if _number(value) is not None:
                metrics.setdefault(key, []).append(float(value))
    turns = max((len(ep.actions) for ep in eps), default=0)
    actions = []
    for t in range(turns):
        taken = Counter(ep.actions[t] for ep in eps if len(ep.actions) > t)
        actions.append({a: c / len(eps) for a, c in taken.most_common()})
    correct = [float(ep.info["correct"]) if "correct" in ep.info else None for ep in eps]
    score = [_number(ep.info.get("score")) for ep in eps]
    return AuditRow(
        name=name,
        kind=kind,
        description=description,
        returns=returns,
        return_mean=mean,
        return_se=se,
        return_ci=se * t95(len(returns)),
        gap=None,
        gap_se=None,
        flagged=False,
        accuracy=_mean_of(correct),
        score=_mean_of(score),
        cost_usd=float(np.mean([ep.cost for ep in eps])),
        tokens=float(np.mean([ep.tokens for ep in eps])),
        calls=sum(agents.values()) / len(eps),
        agent_calls={a: c / len(eps) for a, c in sorted(agents.items())},
        invalid_actions=float(np.mean([ep.invalid for ep in eps])),
        turns=float(np.mean([len(ep.actions) for ep in eps])),
        metrics={k: float(np.mean(v)) for k, v in sorted(metrics.items())},
        actions=actions,
        skill=skill,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


#: the kinds of row that are flagged when they reach a comparison level
SHORTCUT_KINDS = ("blind", "env", "generic")


def _rows(
    tally: _Tally, blind_eps: list[Episode] | None, blind_info: Mapping[str, Any], has_best: bool
) -> list[AuditRow]:
    rows: list[AuditRow] = []
    if has_best:
        described = "privileged: searches the future with fork(); an upper bound, not a policy"
        rows.append(_row("best-response", "best-response", described, tally.best))
    for s in sorted(tally.skill):
        described = f"with probability {s:g} per decision the paper's skill (privileged truth)"
        rows.append(_row(skill_name(s), "skill", described, tally.skill[s], skill=s))
    for name, eps in tally.trained.items():
        if name in tally.observers:
            rows.append(_row(name, "observer", tally.descriptions.get(name, ""), eps))
        else:
            rows.append(_row(name, "trained", "a trained policy (comparison level)", eps))
    if blind_eps:
        described = (
            "the best task-independent sequence of choices (given only the turn and the mask), "
            + str(blind_info.get("note", ""))
        )
        rows.append(_row("best-blind", "blind", described, blind_eps))
    for name, eps in tally.strategies.items():
        description = tally.descriptions.get(name, "")
        if name.startswith("always-choice-"):
            k = int(name.rsplit("-", 1)[1])
            if k not in tally.seen:
                continue  # choice k was never available: the row would repeat first-available
            description = f"choice {k} when available ({tally.seen[k]}), else the first"
        rows.append(_row(name, tally.kinds[name], description, eps))
    if has_best:
        for row in rows[1:]:
            row.gap, row.gap_se, _ = _paired(rows[0].returns, row.returns)
    return rows


def _compare(rows: list[AuditRow], realistic: float, tolerance: float) -> list[str]:
    """Gaps to the comparison levels and the flags; the levels' names."""
    reference = next(
        (
            r
            for r in rows
            if r.kind == "skill" and r.skill is not None and _same(r.skill, realistic)
        ),
        None,
    )
    levels = ([reference] if reference is not None else []) + [
        r for r in rows if r.kind == "trained"
    ]
    if not levels:
        return []
    primary = levels[0]
    for row in rows:
        if row is primary or row.kind == "best-response":
            continue
        row.gap_ref, row.gap_ref_se, row.gap_ref_ci = _paired(primary.returns, row.returns)
        if row.kind not in SHORTCUT_KINDS:
            continue
        for level in levels:
            gap, _, _ = _paired(level.returns, row.returns)
            if gap <= tolerance:
                row.flagged_by.append(level.name)
        row.flagged = bool(row.flagged_by)
    return [level.name for level in levels]


def _trend(rows: list[AuditRow]) -> tuple[bool | None, list[str]]:
    """Whether s = 1 is above s = 0 beyond the 95% interval, and where the curve does not rise."""
    curve = sorted((r for r in rows if r.kind == "skill"), key=lambda r: r.skill or 0.0)
    if len(curve) < 2:
        return None, []
    notes = []
    low, high = curve[0], curve[-1]
    mean, _, ci = _paired(high.returns, low.returns)
    rises = mean - ci > 0
    if not rises:
        notes.append(
            f"{high.name} is not above {low.name} beyond the 95% interval: paired difference "
            f"{mean:.3f} ± {ci:.3f}"
        )
    for a, b in itertools.pairwise(curve):
        step, _, step_ci = _paired(b.returns, a.returns)
        if step <= 0:
            notes.append(
                f"the return does not rise from {a.name} to {b.name}: {a.return_mean:.3f} -> "
                f"{b.return_mean:.3f} (paired {step:.3f} ± {step_ci:.3f})"
            )
    return rises, notes


def _observer_summary(
    rows: list[AuditRow], info: Mapping[str, Any], realistic: float, tolerance: float
) -> dict[str, Any]:
    """The observer's reference beside the best blind policy (or random choice) and the skill
    reference at the realistic level, paired by task, and the verdict on learnability."""
    observer = next(r for r in rows if r.kind == "observer")
    out: dict[str, Any] = {
        **dict(info),
        "name": observer.name,
        "return": observer.return_mean,
        "return_ci": observer.return_ci,
    }
    baseline = next((r for r in rows if r.kind == "blind"), None) or next(
        (r for r in rows if r.name == "random-available"), None
    )
    reference = next(
        (
            r
            for r in rows
            if r.kind == "skill" and r.skill is not None and _same(r.skill, realistic)
        ),
        None,
    )
    beyond = None
    if baseline is not None:
        mean, _, ci = _paired(observer.returns, baseline.returns)
        out["baseline"] = baseline.name
        out["over_baseline"] = [mean, ci]
        beyond = mean - ci > 0
    gap = None
    if reference is not None:
        mean, _, ci = _paired(reference.returns, observer.returns)
        out["reference"] = reference.name
        out["gap_to_reference"] = [mean, ci]
        gap = mean
    verifier = next((r for r in rows if r.name == SURFACE_VERIFIER), None)
    if verifier is not None and reference is not None:
        mean, _, ci = _paired(reference.returns, verifier.returns)
        out["surface_verifier"] = {"return": verifier.return_mean, "gap_to_reference": [mean, ci]}
    if beyond is None:
        verdict = "no blind or random baseline to compare with"
    elif not beyond and gap is not None and gap <= tolerance:
        verdict = (
            f"within the tolerance of {out['reference']} but not above {out['baseline']} "
            "beyond the 95% interval: blind play already scores what the observer learned"
        )
    elif not beyond:
        verdict = (
            f"not learned at this budget: {observer.name} is not above {out['baseline']} "
            "beyond the 95% interval"
        )
    elif gap is not None and gap <= tolerance:
        verdict = (
            f"learnable: above {out['baseline']} and within the tolerance of {out['reference']}"
        )
    elif gap is not None:
        verdict = f"partly learned: above {out['baseline']}, {gap:.3f} below {out['reference']}"
    else:
        verdict = f"learned beyond {out['baseline']} (no skill reference to compare with)"
    out["learnable"] = bool(beyond) and gap is not None and gap <= tolerance
    out["beyond_baseline"] = beyond
    out["verdict"] = verdict
    return out


def _gameability(rows: list[AuditRow]) -> dict[str, Any] | None:
    top = next((r for r in rows if r.kind == "skill" and r.skill == 1.0), None)
    shortcuts = [r for r in rows if r.kind in SHORTCUT_KINDS]
    if top is None or not shortcuts:
        return None
    best = max(shortcuts, key=lambda r: r.return_mean)
    mean, se, ci = _paired(top.returns, best.returns)
    return {
        "reference": top.name,
        "against": best.name,
        "mean": mean,
        "se": se,
        "ci95": [mean - ci, mean + ci],
        "tasks": len(top.returns),
        "note": (
            f"the best of {len(shortcuts)} blind/shortcut policies, picked on the same tasks: "
            "its mean is optimistic, so the gap is if anything understated"
        ),
    }


# -- markdown --------------------------------------------------------------------------------------
def _tell_lines(report: AuditReport) -> list[str]:
    """The tell meter's and the observer's reference's paragraphs (empty when not run)."""
    lines: list[str] = []
    tells = report.tells
    if tells is not None:
        if not tells.get("measurable"):
            lines += ["", f"**Tell meter**: not measurable ({tells.get('reason', '')})."]
        else:
            flag = " **FLAG (tell)**" if tells.get("flagged") else ""
            top = ", ".join(f"{k} {v:+.2f}" for k, v in (tells.get("top_features") or {}).items())
            lines += [
                "",
                f"**Tell meter** (logistic regression on surface features of each agent output, "
                f"fitted on {tells['train_outputs']} outputs of {tells['train_episodes']} "
                f"{tells['train_split']} episodes, measured on {tells['test_outputs']} outputs of "
                f"{tells['test_episodes']} {tells['test_split']} episodes; label "
                f"`{tells['label_key']}`; policies {', '.join(tells['policies'])}): AUC within "
                f"authors {_fmt(tells['auc_within'])} {_ci_text(tells['auc_within_ci'])}, "
                f"across authors {_fmt(tells['auc'])} {_ci_text(tells['auc_ci'])}, context alone "
                f"(author, turn, position) {_fmt(tells['auc_context'])} "
                f"{_ci_text(tells['auc_context_ci'])}, what the task's own statement tells "
                f"within authors {_fmt(tells.get('auc_within_task'))} "
                f"{_ci_text(tells.get('auc_within_task_ci') or [])} (full minus it "
                f"{_ci_text(tells.get('beyond_task_ci') or [])}); threshold "
                f"{tells['threshold']:g} within authors, and {TASK_MARGIN:g} above the task's "
                f"own{flag}. Right share {_fmt(tells['right_share'])}, text shown to the "
                f"controller for {_fmt(tells['text_visible'])} of outputs. Largest weights "
                f"(standardised; + means more often right): {top}.",
            ]
    observer = report.observer
    if observer is not None:
        parts = [
            f"**Observer's reference** (`{observer['name']}`: MaskablePPO, {observer['steps']:,} "
            f"env steps on the {observer['split']} split, discrete view, greedy): return "
            f"{_pm(observer['return'], observer['return_ci'])}"
        ]
        if "over_baseline" in observer:
            mean, ci = observer["over_baseline"]
            parts.append(f"minus `{observer['baseline']}` {_pm(mean, ci)}")
        if "gap_to_reference" in observer:
            mean, ci = observer["gap_to_reference"]
            parts.append(f"`{observer['reference']}` minus it {_pm(mean, ci)}")
        if "surface_verifier" in observer:
            mean, ci = observer["surface_verifier"]["gap_to_reference"]
            parts.append(
                f"the surface-feature verifier (a classifier, observation only) "
                f"{_num(observer['surface_verifier']['return'])}, `{observer['reference']}` minus "
                f"it {_pm(mean, ci)}"
            )
        lines += ["", "; ".join(parts) + f" (paired by task). **{observer['verdict']}**."]
    return lines


def _ci_text(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci and len(ci) == 2 else "[–]"


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _pm(mean: float | None, ci: float | None) -> str:
    if mean is None or ci is None:
        return "–"
    return f"{_num(mean)} ± {_num(ci)}"


def _num(value: float) -> str:
    """Three decimals, with no "-0.000" for a value that rounds to zero."""
    return f"{round(value, 3) + 0.0:.3f}"


def _search_line(report: AuditReport) -> str:
    if not report.best_response:
        return "Privileged best response: not searched."
    names = {
        "exact": "exact enumeration of every sequence of available choices",
        "mcts": f"MCTS (UCT, random rollouts; budget {report.budget:,} env steps per task)",
        "beam": f"beam search (budget {report.budget:,} env steps per task)",
    }
    n = max(len(report.task_ids), 1)
    parts = [f"{names.get(m, m)} on {k} tasks" for m, k in report.searches.items()]
    exact = "exact on every task" if report.exact else "not exhaustive: a lower bound"
    return (
        f"Privileged best response (an upper bound, never the comparison): {'; '.join(parts)}; "
        f"{report.search_steps / n:,.0f} env steps per task; the search is {exact}."
    )


def _skill_lines(report: AuditReport) -> list[str]:
    if not report.skill_available:
        why = next(
            (note.removeprefix("no skill reference: ") for note in report.notes
             if note.startswith("no skill reference: ")),
            "not asked for (no skill levels)",
        )  # fmt: skip
        then = (
            f"only with the trained rows ({', '.join(report.comparison_levels)})"
            if report.comparison_levels
            else "with no level, so nothing can be flagged"
        )
        return [f"**No skill reference** ({why}): shortcuts are compared {then}."]
    source = (
        f"defaulted to {report.realistic_skill:g} (the env names none)"
        if report.realistic_defaulted
        else f"{report.realistic_skill:g} ({report.realistic_skill_source or 'no source given'})"
    )
    curve = report.skill_curve
    outcome = [c for c in ("accuracy", "score") if any(getattr(r, c) is not None for r in curve)]
    head = ["s", "return ± 95% CI", *outcome, "cost (USD)", "agent calls", "turns"]
    lines = [
        f"Skill reference (the paper's skill with the privileged truth at each decision with "
        f"probability s); realistic level s = {source}.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for row in curve:
        s = (
            f"**{row.skill:g}**"
            if _same(row.skill or 0.0, report.realistic_skill)
            else f"{row.skill:g}"
        )
        cells = [s, _pm(row.return_mean, row.return_ci)]
        cells += [_fmt(getattr(row, c)) for c in outcome]
        cells += [_fmt(row.cost_usd, 5), _fmt(row.calls, 2), _fmt(row.turns, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    rise = "rises" if report.skill_rises else "DOES NOT RISE"
    lines += ["", f"The curve {rise}: s = 1 above s = 0 beyond the 95% interval "
              f"{'holds' if report.skill_rises else 'fails'}."]  # fmt: skip
    if report.skill_trend:
        lines += ["", *(f"- {note}" for note in report.skill_trend)]
    return lines


def _markdown(report: AuditReport) -> str:
    rows = report.rows
    outcome_cols = [
        c for c in ("accuracy", "score") if any(getattr(r, c) is not None for r in rows)
    ]
    # an env metric named like a fixed column (Puppeteer reports "tokens") is shown once
    fixed = {*outcome_cols, "cost", "cost_usd", "tokens", "calls", "invalid", "turns"}
    metric_keys = sorted({k for row in rows for k in row.metrics} - fixed)
    level = report.comparison_levels[0] if report.comparison_levels else None
    head = ["policy", "kind", "return ± 95% CI", f"gap to {level or 'reference'}",
            "gap to upper bound", *outcome_cols, "cost (USD)", "tokens", "agent calls",
            "invalid", "turns", *metric_keys, "flag"]  # fmt: skip
    kwargs = f", env kwargs `{json.dumps(report.env_kwargs)}`" if report.env_kwargs else ""
    lines = [
        f"### `{report.env_id}`",
        "",
        f"Split `{report.split}`, {len(report.task_ids)} tasks (seed {report.seed}){kwargs}; "
        f"{report.n_choices} discrete choices, horizon {report.max_turns} turns; "
        f"{report.elapsed_s:.1f} s. {_search_line(report)}",
        "",
        *_skill_lines(report),
        "",
        "Return: summed step rewards (gamma = 1), mean ± 95% interval (t) over tasks; gaps: the "
        "level minus the policy, paired by task. FLAG: a blind or shortcut policy within the "
        f"tolerance ({report.tolerance:g}) of, or above, a comparison level "
        f"({', '.join(f'`{n}`' for n in report.comparison_levels) or 'none'}); the flag names "
        "the level. The best response is privileged (it sees the future): an upper bound only.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for row in rows:
        name = f"**{row.name}**" if row.name == level else row.name
        cells = [name, row.kind, _pm(row.return_mean, row.return_ci)]
        cells.append(_pm(row.gap_ref, row.gap_ref_ci))
        upper = None if row.gap_se is None else row.gap_se * t95(len(row.returns))
        cells.append(_pm(row.gap, upper))
        cells += [_fmt(getattr(row, c)) for c in outcome_cols]
        cells += [_fmt(row.cost_usd, 5), _fmt(row.tokens, 0), _fmt(row.calls, 2)]
        cells += [_fmt(row.invalid_actions, 2), _fmt(row.turns, 2)]
        cells += [_fmt(row.metrics.get(k)) for k in metric_keys]
        cells.append(f"FLAG ({', '.join(row.flagged_by)})" if row.flagged else "")
        lines.append("| " + " | ".join(cells) + " |")
    gap = report.gameability_gap
    lines.append("")
    if gap is None:
        lines.append("Gameability gap: – (needs a skill reference and a blind or shortcut policy).")
    else:
        lo, hi = gap["ci95"]
        lines.append(
            f"**Gameability gap** ({gap['reference']} minus the best blind/shortcut policy, "
            f"`{gap['against']}`, paired over {gap['tasks']} tasks): {_num(gap['mean'])}, 95% "
            f"interval [{_num(lo)}, {_num(hi)}] (reward units; {gap['note']})."
        )
    lines += _tell_lines(report)
    blind = report.blind
    if blind.get("folds"):
        lines += ["", f"Best blind policy ({blind['method']} over {blind['sequences']:,} "
                  f"sequences; {blind['note']}):", ""]  # fmt: skip
        for fold in blind["folds"]:
            shown = " → ".join(f"`{lab}`" for lab in fold["labels"])
            lines.append(
                f"- picked on the {fold['picked_on']} ({fold['evaluated']} sequences, in-sample "
                f"return {fold['in_sample_return']:.3f}), reported on the {fold['reported_on']}: "
                f"{shown}"
            )
    elif blind:
        lines += ["", f"Best blind policy: skipped ({blind.get('note', '')})."]
    best = report.best
    if best is not None:
        lines += ["", "Privileged best response behaviour (share of episodes):", ""]
        for turn, taken in enumerate(best.actions, 1):
            top = list(taken.items())[:3]
            shown = ", ".join(f"`{a}` {share:.0%}" for a, share in top)
            rest = sum(taken.values()) - sum(share for _, share in top)
            lines.append(f"- turn {turn}: {shown}" + (f", other {rest:.0%}" if rest > 1e-9 else ""))
        if best.agent_calls:
            calls = ", ".join(f"{a} {c:.2f}" for a, c in best.agent_calls.items())
            lines.append(f"- agent calls per episode: {calls}")
    described = [
        r
        for r in rows
        if r.description and r.kind in ("env", "generic", "trained", "control", "observer")
    ]
    if described:
        lines += ["", "Strategies:", ""]
        lines += [f"- `{r.name}`: {r.description}" for r in described]
    if report.notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in report.notes]
    return "\n".join(lines) + "\n"
