"""Seed statistics and curve binning for the reproduction pages, in one place.

Every page states a number as an :class:`~orchenv.reproduce.report.Estimate` (a mean with its
95% interval). The seed modules take those estimates from here:

- :func:`over_seeds`: one value per run seed (a training run per seed), Student-t interval;
- :func:`seed_difference`: ``a - b`` paired by run seed (the same seed's two runs);
- :func:`paired_difference`: ``a - b`` paired by episode (the same tasks in the same order);
- :func:`unpaired_difference`: ``a - b`` of two independent estimates (half-widths added in
  quadrature: a conservative normal approximation, stated on the pages where it is used);
- :func:`scaled` and :func:`relative_change`: an estimate in other units, or as a fraction of a
  reference mean.

Training curves are cut and averaged by the same few functions: :func:`chunk_bounds` (equal
consecutive chunks of episodes), :func:`bin_means` (a sequence averaged per chunk),
:func:`bins_by_position` (items binned by a position such as the training step),
:func:`moving_average` and :func:`mean_band` (the mean of per-seed curves with a 95% or
min-max band, as the figures draw it).

Written by hand: the intervals are a few lines over :mod:`statistics` and scipy's t quantile
(``report.t975``); no well-kept library has the "one value per seed, t interval, paired by
seed" vocabulary these pages use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

from orchenv.reproduce.report import Estimate, t975

__all__ = [
    "bin_means",
    "bins_by_position",
    "chunk_bounds",
    "divided",
    "mean_band",
    "moving_average",
    "over_seeds",
    "paired_difference",
    "relative_change",
    "scaled",
    "seed_difference",
    "t975",
    "unpaired_difference",
]

T = TypeVar("T")


def over_seeds(values: Iterable[float]) -> Estimate:
    """The mean of one value per run seed, with the Student-t 95% interval over seeds."""
    return Estimate.of_values(values, over="seeds")


def seed_difference(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """``a - b`` paired by run seed (``a[i]`` and ``b[i]`` come from seed ``i``)."""
    if len(a) != len(b):
        raise ValueError(f"differences by seed need equal lengths, got {len(a)} and {len(b)}")
    return over_seeds(x - y for x, y in zip(a, b, strict=True))


def paired_difference(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """``a - b`` paired by episode (the same episodes in the same order), interval over
    episodes."""
    return Estimate.of_differences(a, b)


def unpaired_difference(a: Estimate, b: Estimate) -> Estimate:
    """``a - b`` of two independent estimates: the half-widths combined in quadrature."""
    diff = a.mean - b.mean
    half = math.hypot(a.half, b.half)
    return Estimate(diff, diff - half, diff + half, min(a.n, b.n), a.over)


def scaled(est: Estimate, factor: float) -> Estimate:
    """``est`` in other units (``factor`` > 0: per 1,000, percent, ...)."""
    if factor < 0:
        lo, hi = est.hi * factor, est.lo * factor
    else:
        lo, hi = est.lo * factor, est.hi * factor
    return Estimate(est.mean * factor, lo, hi, est.n, est.over)


def divided(est: Estimate, divisor: float) -> Estimate:
    """``est`` divided by ``divisor`` > 0 (tokens in thousands, ...; divided, not multiplied
    by the reciprocal, so the numbers are exactly the quotients)."""
    if not divisor > 0:
        raise ValueError(f"divisor must be > 0, got {divisor!r}")
    return Estimate(est.mean / divisor, est.lo / divisor, est.hi / divisor, est.n, est.over)


def relative_change(diff: Estimate, base: float) -> Estimate:
    """A difference as a fraction of the reference mean ``base`` > 0 (the interval is the
    difference's, divided by ``base``)."""
    return divided(diff, base)


# -- curves ------------------------------------------------------------------------------------
def chunk_bounds(n: int, bins: int) -> list[tuple[int, int]]:
    """``min(bins, n)`` consecutive ``[lo, hi)`` chunks of ``range(n)``, as equal as integer
    bounds allow (``numpy.linspace`` rounded down)."""
    if n <= 0 or bins <= 0:
        return []
    edges = np.linspace(0, n, min(bins, n) + 1).astype(int)
    return [(int(lo), int(hi)) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]


def bin_means(values: Sequence[float], bins: int) -> list[float]:
    """The mean of each of :func:`chunk_bounds` ``(len(values), bins)``'s chunks."""
    return [float(np.mean(values[lo:hi])) for lo, hi in chunk_bounds(len(values), bins)]


def bins_by_position(
    items: Iterable[T], position: Callable[[T], float], total: float, bins: int
) -> list[tuple[float, list[T]]]:
    """Items binned by ``position`` into ``bins`` equal widths of ``(0, total]`` (a bin
    ``(lo, hi]``; e.g. episodes by the training step they ended at). Returns ``(hi, items)``
    per bin, empty bins left out."""
    width = max(1, math.ceil(total / bins))
    grouped: list[list[T]] = [[] for _ in range(bins)]
    for item in items:
        b = math.ceil(position(item) / width) - 1
        if 0 <= b < bins:
            grouped[b].append(item)
    return [((b + 1) * width, group) for b, group in enumerate(grouped) if group]


def moving_average(values: Sequence[float], width: int) -> np.ndarray:
    """The running mean over ``width`` values (``mode="valid"``: ``len - width + 1`` points);
    the values themselves when ``width`` is 1 or longer than them."""
    arr = np.asarray(values, dtype=float)
    if width <= 1 or len(arr) < width:
        return arr
    return np.convolve(arr, np.ones(width) / width, mode="valid")


def mean_band(
    curves: Sequence[Sequence[float] | np.ndarray], band: str = "ci"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean of per-seed curves (cut to the shortest) and a band around it: ``"ci"`` (95%
    Student-t over seeds), ``"minmax"`` (the seeds' range) or ``"none"`` (the mean twice).
    One curve gives a band of zero width."""
    kept = [np.asarray(c, dtype=float) for c in curves if len(c)]
    if not kept:
        empty = np.zeros(0)
        return empty, empty, empty
    n = min(len(c) for c in kept)
    ys = np.array([c[:n] for c in kept])
    mean = ys.mean(axis=0)
    if band == "none" or ys.shape[0] < 2:
        return mean, mean, mean
    if band == "minmax":
        return mean, ys.min(axis=0), ys.max(axis=0)
    if band != "ci":
        raise ValueError(f"band must be 'ci', 'minmax' or 'none', got {band!r}")
    half = t975(ys.shape[0] - 1) * ys.std(axis=0, ddof=1) / math.sqrt(ys.shape[0])
    return mean, mean - half, mean + half
