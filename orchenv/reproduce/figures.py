"""Figures for the reproduction pages, on matplotlib's object API.

A figure is a :class:`matplotlib.figure.Figure` bound to an Agg canvas (:func:`new_figure`):
it renders headless and never touches pyplot's global state or backend (no
``matplotlib.use``), as ``orchenv.eval.plots`` does for the leaderboard. On its axes the seed
modules draw with the few shapes their pages need:

- :func:`curves_with_band`: per-seed curves as their mean with a 95% (or min-max) band;
- :func:`points_with_intervals`: points whose x and/or y are
  :class:`~orchenv.reproduce.report.Estimate` s, with their intervals as error bars;
- :func:`bars_with_intervals`: bars of estimates with their intervals;

and :func:`save` lays the figure out and writes the PNG. Written by hand only as thin helpers
over matplotlib (which does all the drawing).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from orchenv.error import require
from orchenv.reproduce.report import Estimate
from orchenv.reproduce.stats import mean_band

__all__ = [
    "bars_with_intervals",
    "curves_with_band",
    "errors",
    "new_figure",
    "points_with_intervals",
    "save",
]

PURPOSE = "reproduction figures"


def new_figure(
    rows: int = 1,
    cols: int = 1,
    *,
    size: tuple[float, float] = (6.0, 4.0),
    squeeze: bool = True,
    **subplots: Any,
) -> tuple[Any, Any]:
    """``(figure, axes)``: a Figure on an Agg canvas and its ``rows`` x ``cols`` axes (as
    ``Figure.subplots`` returns them; ``subplots`` are passed on, e.g. ``sharey=True``)."""
    require("matplotlib", "eval", PURPOSE)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=squeeze, **subplots)
    return fig, axes


def save(
    fig: Any,
    path: str | Path,
    *,
    dpi: int = 110,
    rect: tuple[float, float, float, float] | None = None,
) -> Path:
    """Lay out (``tight_layout``, within ``rect`` if given) and write ``fig`` as a PNG."""
    if rect is None:
        fig.tight_layout()
    else:
        fig.tight_layout(rect=rect)
    fig.savefig(str(path), dpi=dpi)
    return Path(path)


def errors(estimates: Sequence[Estimate], scale: float = 1.0) -> np.ndarray:
    """The 2 x n asymmetric error bars (below, above) of ``estimates``; NaN drawn as 0."""
    err = np.array(
        [
            [(e.mean - e.lo) * scale for e in estimates],
            [(e.hi - e.mean) * scale for e in estimates],
        ],
        dtype=float,
    ).reshape(2, len(estimates))
    return np.nan_to_num(err)


def curves_with_band(
    ax: Any,
    x: ArrayLike,
    curves: Sequence[Sequence[float] | np.ndarray],
    *,
    band: str = "ci",
    alpha: float = 0.2,
    **line: Any,
) -> Any:
    """The mean of per-seed ``curves`` (cut to the shortest, and ``x`` with them) as a line,
    with a band (``"ci"``: 95% over seeds; ``"minmax"``; ``"none"``). Returns the line."""
    mean, lo, hi = mean_band(curves, band)
    xs = np.asarray(x, dtype=float)[: len(mean)]
    (drawn,) = ax.plot(xs, mean, **line)
    if len(curves) > 1 and band != "none":
        ax.fill_between(xs, lo, hi, color=drawn.get_color(), alpha=alpha)
    return drawn


def points_with_intervals(
    ax: Any,
    x: Sequence[Estimate | float],
    y: Sequence[Estimate | float],
    *,
    scale_x: float = 1.0,
    scale_y: float = 1.0,
    labels: Sequence[str] = (),
    **style: Any,
) -> Any:
    """Points at (``x``, ``y``); an :class:`Estimate` coordinate gets its interval as an
    error bar. ``labels`` annotate the points. Returns the errorbar container."""

    def split(values: Sequence[Estimate | float], scale: float) -> tuple[list[float], Any]:
        ests = [v if isinstance(v, Estimate) else None for v in values]
        means = [(v.mean if isinstance(v, Estimate) else float(v)) * scale for v in values]
        if all(e is None for e in ests):
            return means, None
        filled = [
            e or Estimate(m / scale, m / scale, m / scale, 1)
            for e, m in zip(ests, means, strict=True)
        ]
        return means, errors(filled, scale)

    xs, xerr = split(x, scale_x)
    ys, yerr = split(y, scale_y)
    style.setdefault("fmt", "o")
    style.setdefault("capsize", 3)
    drawn = ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, **style)
    for label, px, py in zip(labels, xs, ys, strict=False):
        ax.annotate(label, (px, py), textcoords="offset points", xytext=(5, 5), fontsize=8)
    return drawn


def bars_with_intervals(
    ax: Any,
    x: ArrayLike,
    values: Sequence[Estimate | float],
    width: float,
    *,
    scale: float = 1.0,
    **style: Any,
) -> Any:
    """Bars of ``values`` at ``x``; estimates get their intervals as error bars."""
    means = [(v.mean if isinstance(v, Estimate) else float(v)) * scale for v in values]
    ests = [v for v in values if isinstance(v, Estimate)]
    if ests and len(ests) == len(values):
        style.setdefault("yerr", errors(ests, scale))
        style.setdefault("capsize", 3)
    return ax.bar(x, means, width, **style)
