"""What a board ranks: each env's primary metric, per-episode values and paired intervals.

An env pays for something: its return (the sum of rewards, ``EpisodeRecord.reward``) by
default, which is what a controller trained on the env maximises; BudgetRoute pays for correct
answers within budget, so always calling o3 (accuracy 0.93, return 0.37) must rank below
answering alone (accuracy 0.72, return 0.72). An env names its objective with a class
attribute ``primary_metric`` (``"reward"``, ``"score"`` or ``"metrics.KEY"``: a number of
``info["metrics"]``); envs that do not are looked up in ``PRIMARY_METRICS``, then default to
the return. OrchMAS is ranked by its score (token F1, cosine for summaries).

Intervals: the mean with a normal 95% interval (1.96 standard errors); the difference between
two adjacent rows is paired (per-episode differences on the same (seed, episode) with the
same episode seed) when both played the same tasks, else Welch's unpaired difference. Paired
differences are much tighter than two overlapping intervals suggest, and an interval that
contains 0 is no evidence of order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

Z95 = 1.959963984540054

#: env id -> (field, label) for envs whose class names no ``primary_metric``
PRIMARY_METRICS: dict[str, tuple[str, str]] = {
    "orch/OrchMAS-v0": ("score", "F1 score"),
}
DEFAULT_METRIC = ("reward", "return")
_LABELS = {"reward": "return", "score": "score"}


@dataclass(frozen=True)
class Metric:
    """Which number of an episode row a board ranks by (``field``) and its name on the page."""

    field: str  # "reward", "score" or "metrics.KEY"
    label: str

    def value(self, row: Mapping[str, Any]) -> float:
        """The metric of one episode log line (``episodes.jsonl``); 0.0 where the env's own
        metric is absent (an episode that ended before the env reported it)."""
        if self.field.startswith("metrics."):
            metrics = row.get("metrics") or {}
            raw = metrics.get(self.field[8:], 0.0) if isinstance(metrics, Mapping) else 0.0
        else:
            raw = row.get(self.field, 0.0)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            return 0.0
        return value if math.isfinite(value) else 0.0


def primary_metric(env_id: str) -> Metric:
    """The metric ``env_id``'s board ranks by (module docstring)."""
    declared: Any = None
    try:
        import gymnasium as gym

        from orchenv.registry import load_entry_point

        entry = gym.spec(env_id).entry_point
        cls = load_entry_point(entry) if isinstance(entry, str) else entry
        declared = getattr(cls, "primary_metric", None)
    except Exception as exc:  # noqa: BLE001 - not registered here: the table or the default
        logger.debug("primary metric of %s: %s", env_id, exc)
    if isinstance(declared, str) and declared:
        label = PRIMARY_METRICS.get(env_id, ("", _LABELS.get(declared, declared)))[1]
        return Metric(declared, label)
    field, label = PRIMARY_METRICS.get(env_id, DEFAULT_METRIC)
    return Metric(field, label)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): normal 95% interval of the mean (a point for n < 2)."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = math.fsum(values) / n
    if n < 2:
        return mean, mean, mean
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = Z95 * math.sqrt(var / n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class Difference:
    """``a - b`` of two rows' primary metric with its 95% interval."""

    estimate: float
    low: float
    high: float
    n: int
    paired: bool

    @property
    def text(self) -> str:
        how = "paired" if self.paired else "unpaired"
        return f"{self.estimate:+.3f} [{self.low:+.3f}, {self.high:+.3f}] ({how}, n={self.n})"

    @property
    def separates(self) -> bool:
        """Whether the interval excludes 0 (evidence of order at the 95% level)."""
        return self.low > 0 or self.high < 0


def difference(
    a: Mapping[tuple[int, int], tuple[int, float]], b: Mapping[tuple[int, int], tuple[int, float]]
) -> Difference | None:
    """a - b from per-episode {(seed, episode): (episode seed, value)}: paired when both hold
    the same (seed, episode) keys with the same episode seeds, else Welch (unpaired)."""
    if not a or not b:
        return None
    if a.keys() == b.keys() and all(a[k][0] == b[k][0] for k in a):
        diffs = [a[k][1] - b[k][1] for k in sorted(a)]
        m, lo, hi = mean_interval(diffs)
        return Difference(m, lo, hi, len(diffs), True)
    ma, la, _ = mean_interval([v for _, v in a.values()])
    mb, lb, _ = mean_interval([v for _, v in b.values()])
    d = ma - mb
    half = math.hypot(ma - la, mb - lb)
    return Difference(d, d - half, d + half, min(len(a), len(b)), False)


def per_episode(
    rows: Sequence[Mapping[str, Any]], metric: Metric
) -> dict[tuple[int, int], tuple[int, float]]:
    """{(seed, episode): (episode seed, metric value)} of an episode log."""
    return {
        (int(r["seed"]), int(r["episode"])): (int(r.get("episode_seed", -1)), metric.value(r))
        for r in rows
    }


__all__ = [
    "DEFAULT_METRIC",
    "PRIMARY_METRICS",
    "Difference",
    "Metric",
    "difference",
    "mean_interval",
    "per_episode",
    "primary_metric",
]
