"""``orchenv audit``: is the best way to score well the skill the env's paper studies?

For sampled tasks, the audit computes a best response with privileged information: from the
task's start state it searches over the env's discrete choices (``action_choices()``) by
stepping ``fork()`` copies (simulated agents are deterministic given the state, so every
branch is exact). It then plays named shortcut strategies (the env's ``audit_strategies()``
plus generic ones: always choice k, first available, random available) from the same start
states, and flags every strategy whose mean return comes within ``tolerance`` of the best
response's: a benchmark where a shortcut scores as well as the best policy measures the
shortcut.

Search (``method``): ``"exact"`` enumerates every sequence of available choices (depth-first,
a fork per branch); ``"mcts"`` is UCT with random-choice rollouts and a budget of env steps
per task (a subtree whose leaves were all reached is marked solved, so a small tree is still
searched exhaustively and reported exact); ``"beam"`` keeps the ``width`` best partial
sequences by return so far; ``"auto"`` is exact when the largest possible tree,
``sum(n**d for d in 1..max_turns)`` steps for ``n`` choices, is within the per-task budget,
else MCTS. Whatever the search, a task's best response
is the best episode found, the strategies' episodes included (each is an achievable episode
from the same state), so it never scores below a strategy; it is a lower bound of the true
best response unless the report says the search was exact.

Every task starts from its own ``reset`` of one env that is itself never stepped; the search
tree, its statistics and the random streams are built afresh per task, so nothing carries
from one task to the next. Returns are the env's summed step rewards (gamma = 1). Each row also reports the outcome
(``correct`` as accuracy, ``score``), cost, tokens, agent calls, invalid actions, turns,
``info["metrics"]`` means and, per turn, which actions were taken.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from orchenv.core import OrchestrationEnv
from orchenv.discrete import available, current_choices, orch_base
from orchenv.error import ConfigError, OrchEnvError

__all__ = ["AuditReport", "AuditRow", "audit", "tree_size"]

METHODS = ("auto", "exact", "mcts", "beam")
#: defaults: minutes per env id on two CPU cores (benchmarks/audit_all.py measures them)
DEFAULT_TASKS = 100
DEFAULT_BUDGET = 2000
DEFAULT_TOLERANCE = 0.05
DEFAULT_TIME_LIMIT_S = 480.0
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
    errors; ``gap``: the best response's mean return minus this one's, paired by task)."""

    name: str
    kind: str  # "best-response", "env" (the env's audit_strategies) or "generic"
    description: str
    returns: list[float]
    return_mean: float
    return_se: float
    gap: float
    gap_se: float
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

    @property
    def best(self) -> AuditRow:
        return self.rows[0]

    @property
    def flagged(self) -> list[AuditRow]:
        return [row for row in self.rows if row.flagged]

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
        values = {k: v for k, v in data.items() if k in fields}
        values["rows"] = [AuditRow(**row) for row in data["rows"]]
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> AuditReport:
        return cls.from_dict(json.loads(text))

    def to_markdown(self) -> str:
        return _markdown(self)


# -- the audit -------------------------------------------------------------------------------------
@dataclass
class _Tally:
    """What the audit collects task by task (nothing of it feeds back into a search)."""

    task_ids: list[str] = field(default_factory=list)
    best: list[Episode] = field(default_factory=list)
    strategies: dict[str, list[Episode]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=lambda: dict(GENERIC))
    #: label of choice k the first time "always choice k" could take it
    seen: dict[int, str] = field(default_factory=dict)
    #: tasks where a strategy's episode scored above the search
    beaten: list[str] = field(default_factory=list)
    steps: int = 0
    exact: bool = True
    #: tasks per search that produced their result ("exact", "mcts", "beam")
    searches: dict[str, int] = field(default_factory=dict)


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
) -> AuditReport:
    """Best response and shortcut strategies of ``env_id`` on ``tasks`` sampled tasks.

    Args:
        tasks: how many tasks (sampled without replacement from ``split`` with ``seed``).
        split: the split; ``None``: ``"test"`` when the env has one, else the env's default.
        env_kwargs: arguments for ``gym.make`` (e.g. ``{"reward": "paper"}``).
        tolerance: a strategy whose mean return is within this of the best's is flagged.
        method: ``"auto"``, ``"exact"``, ``"mcts"`` or ``"beam"`` (module docstring).
        budget: env steps of search per task (MCTS, beam; ``auto`` compares the tree to it).
        time_limit_s: stop before a task that would end past this (the report says so).
        progress: a tqdm bar over the tasks (on stderr).
    """
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    if tasks < 1 or budget < 1:
        raise ConfigError(f"tasks and budget must be >= 1, got {tasks} and {budget}")
    started = time.monotonic()
    kwargs = dict(env_kwargs or {})
    env, split, notes = _make(env_id, split, dict(kwargs))
    base = orch_base(env)
    plan = _plan(base, tasks, seed, notes)
    tally = _Tally()
    n, chosen = 0, method
    bar = tqdm(total=len(plan), desc=f"audit {env_id}", disable=not progress, leave=False)
    try:
        for number, (reset_seed, options) in enumerate(plan):
            elapsed = time.monotonic() - started
            if (
                time_limit_s is not None
                and number
                and elapsed * (number + 1) / number > time_limit_s
            ):
                notes.append(
                    f"stopped after {number} of {len(plan)} tasks to stay within "
                    f"time_limit_s={time_limit_s:g}"
                )
                break
            base.reset(seed=reset_seed, options=options)
            if number == 0:
                n = _n_choices(base, env_id)
                chosen = _plan_search(method, n, base.max_turns, budget)
            _audit_task(base, tally, n, chosen, budget, (seed, number))
            bar.update(1)
    finally:
        bar.close()
        env.close()
    if tally.beaten:
        notes.append(
            f"on {len(tally.beaten)} of {len(tally.task_ids)} tasks a strategy scored above the "
            f"search (its episode is the best response there), e.g. {tally.beaten[0]}"
        )
    return AuditReport(
        env_id=env_id,
        split=split,
        seed=seed,
        env_kwargs=json.loads(json.dumps(kwargs, default=repr)),
        task_ids=tally.task_ids,
        method="+".join(sorted(tally.searches)) or chosen,
        searches=tally.searches,
        exact=tally.exact,
        budget=budget,
        search_steps=tally.steps,
        n_choices=n,
        max_turns=base.max_turns,
        tolerance=tolerance,
        elapsed_s=round(time.monotonic() - started, 3),
        notes=notes,
        rows=_rows(tally, tolerance),
    )


def _audit_task(
    root: OrchestrationEnv, tally: _Tally, n: int, method: str, budget: int, key: tuple[int, int]
) -> None:
    """Search and play the strategies from ``root`` (just reset; only its forks are stepped)."""
    assert root.task is not None
    tally.task_ids.append(root.task.id)
    found = _search(method, root, n, budget, np.random.default_rng([*key, 0]))
    tally.steps += found.steps
    tally.searches[found.method] = tally.searches.get(found.method, 0) + 1
    tally.exact = tally.exact and found.exact
    task_best = found.best
    rng = np.random.default_rng([*key, 1])  # the random strategy's draws, whatever the search
    for name, (kind, policy) in _strategies(root, n, rng, tally).items():
        ep = _play_named(root, name, policy)
        tally.strategies.setdefault(name, []).append(ep)
        tally.kinds[name] = kind
        task_best = better(task_best, ep)
    assert task_best is not None
    if found.best is None or task_best.ret > found.best.ret + TIE:
        tally.beaten.append(root.task.id)
    tally.best.append(task_best)


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


def _n_choices(base: OrchestrationEnv, env_id: str) -> int:
    try:
        return len(current_choices(base))
    except NotImplementedError as exc:
        raise ConfigError(
            f"{env_id} has no discrete action set (action_choices()), so its best response "
            "cannot be searched; see docs/adding-an-env.md"
        ) from exc


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
def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return math.nan, math.nan
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return float(arr.mean()), se


def _mean_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def _row(
    name: str,
    kind: str,
    description: str,
    eps: Sequence[Episode],
    best: Sequence[float],
    tolerance: float,
) -> AuditRow:
    returns = [ep.ret for ep in eps]
    mean, se = _mean_se(returns)
    gap, gap_se = _mean_se([b - r for b, r in zip(best, returns, strict=True)])
    agents: Counter[str] = Counter()
    metrics: dict[str, list[float]] = {}
    for ep in eps:
        agents.update({a: int(c) for a, c in (ep.info.get("agent_calls") or {}).items()})
        for key, value in (ep.info.get("metrics") or {}).items():
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
        gap=gap,
        gap_se=gap_se,
        flagged=kind != "best-response" and gap <= tolerance,
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
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _rows(tally: _Tally, tolerance: float) -> list[AuditRow]:
    best = [ep.ret for ep in tally.best]
    rows = [_row("best-response", "best-response", "", tally.best, best, tolerance)]
    for name, eps in tally.strategies.items():
        description = tally.descriptions.get(name, "")
        if name.startswith("always-choice-"):
            k = int(name.rsplit("-", 1)[1])
            if k not in tally.seen:
                continue  # choice k was never available: the row would repeat first-available
            description = f"choice {k} when available ({tally.seen[k]}), else the first"
        rows.append(_row(name, tally.kinds[name], description, eps, best, tolerance))
    return rows


# -- markdown --------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _search_line(report: AuditReport) -> str:
    names = {
        "exact": "exact enumeration of every sequence of available choices",
        "mcts": f"MCTS (UCT, random rollouts; budget {report.budget:,} env steps per task)",
        "beam": f"beam search (budget {report.budget:,} env steps per task)",
    }
    n = max(len(report.task_ids), 1)
    parts = [f"{names.get(m, m)} on {k} tasks" for m, k in report.searches.items()]
    exact = "exact on every task" if report.exact else "not exhaustive: a lower bound"
    return (
        f"Search: {'; '.join(parts)}; {report.search_steps / n:,.0f} env steps per task; "
        f"the best response is {exact}."
    )


def _markdown(report: AuditReport) -> str:
    rows = report.rows
    outcome_cols = [
        c for c in ("accuracy", "score") if any(getattr(r, c) is not None for r in rows)
    ]
    # an env metric named like a fixed column (Puppeteer reports "tokens") is shown once
    fixed = {*outcome_cols, "cost", "cost_usd", "tokens", "calls", "invalid", "turns"}
    metric_keys = sorted({k for row in rows for k in row.metrics} - fixed)
    head = ["policy", "return", "gap to best", *outcome_cols, "cost (USD)", "tokens", "agent calls",
            "invalid", "turns", *metric_keys, "flag"]  # fmt: skip
    kwargs = f", env kwargs `{json.dumps(report.env_kwargs)}`" if report.env_kwargs else ""
    lines = [
        f"### `{report.env_id}`",
        "",
        f"Split `{report.split}`, {len(report.task_ids)} tasks (seed {report.seed}){kwargs}; "
        f"{report.n_choices} discrete choices, horizon {report.max_turns} turns; "
        f"{report.elapsed_s:.1f} s. {_search_line(report)}",
        "",
        "Return: summed step rewards (gamma = 1), mean ± standard error over tasks; gap: best "
        "response minus the policy, paired by task. FLAG: within the tolerance "
        f"({report.tolerance:g}) of the best response.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for row in rows:
        name = f"**{row.name}**" if row.kind == "best-response" else row.name
        gap = "–" if row.kind == "best-response" else f"{row.gap:.3f} ± {row.gap_se:.3f}"
        cells = [name, f"{row.return_mean:.3f} ± {row.return_se:.3f}", gap]
        cells += [_fmt(getattr(row, c)) for c in outcome_cols]
        cells += [_fmt(row.cost_usd, 5), _fmt(row.tokens, 0), _fmt(row.calls, 2)]
        cells += [_fmt(row.invalid_actions, 2), _fmt(row.turns, 2)]
        cells += [_fmt(row.metrics.get(k)) for k in metric_keys]
        cells.append("FLAG" if row.flagged else "")
        lines.append("| " + " | ".join(cells) + " |")
    best = report.best
    lines += ["", "Best response behaviour (share of episodes):", ""]
    for turn, taken in enumerate(best.actions, 1):
        top = list(taken.items())[:3]
        shown = ", ".join(f"`{a}` {share:.0%}" for a, share in top)
        rest = sum(taken.values()) - sum(share for _, share in top)
        lines.append(f"- turn {turn}: {shown}" + (f", other {rest:.0%}" if rest > 1e-9 else ""))
    if best.agent_calls:
        calls = ", ".join(f"{a} {c:.2f}" for a, c in best.agent_calls.items())
        lines.append(f"- agent calls per episode: {calls}")
    described = [r for r in rows if r.description and r.kind != "best-response"]
    if described:
        lines += ["", "Strategies:", ""]
        lines += [f"- `{r.name}`: {r.description}" for r in described]
    if report.notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in report.notes]
    return "\n".join(lines) + "\n"
