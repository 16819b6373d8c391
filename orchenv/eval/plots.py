"""Leaderboard plots (matplotlib, Agg canvas; pyplot's global state is never touched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchenv.error import require
from orchenv.eval.rows import Group, Row, fmt_money

PURPOSE = "leaderboard plots"


def _figure(width: float, height: float) -> Any:
    """A Figure bound to an Agg canvas: works headless and leaves pyplot's backend alone."""
    require("matplotlib", "eval", PURPOSE)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def pareto_frontier(rows: list[Row]) -> list[Row]:
    """Runs no other run beats on both axes (cheaper or equal and more accurate), by cost."""
    frontier: list[Row] = []
    for row in sorted(rows, key=lambda r: (r.mean_cost_usd, -r.accuracy)):
        if not frontier or row.accuracy > frontier[-1].accuracy:
            frontier.append(row)
    return frontier


def accuracy_vs_cost_png(group: Group, path: Path) -> Path:
    """Accuracy (with its interval) against mean cost per episode; the Pareto frontier of the
    ranked runs as a step line; privileged runs as red diamonds, unverified runs (on a board
    where some run is verified) as grey squares."""
    fig = _figure(7.5, 5.0)
    ax = fig.add_subplot()
    costs = [r.mean_cost_usd for r in group.rows]
    positive = [c for c in costs if c > 0]
    if positive and len(positive) == len(costs) and max(positive) / min(positive) >= 20:
        ax.set_xscale("log")
    for section, marker, color, label in (
        (
            "ranked",
            "o",
            "tab:blue",
            "verified controller" if group.verified_board else "controller",
        ),
        ("privileged", "D", "tab:red", "privileged † (reads ground truth)"),
        ("unverified", "s", "tab:gray", "unverified (not ranked)"),
    ):
        rows = group.rows_in(section)
        if not rows:
            continue
        ax.errorbar(
            [r.mean_cost_usd for r in rows],
            [r.accuracy for r in rows],
            yerr=[
                [r.accuracy - r.ci_low for r in rows],
                [r.ci_high - r.accuracy for r in rows],
            ],
            fmt=marker,
            color=color,
            ecolor=color,
            alpha=0.9,
            capsize=3,
            label=label,
        )
        for r in rows:
            ax.annotate(
                r.display_name,
                (r.mean_cost_usd, r.accuracy),
                textcoords="offset points",
                xytext=(5, 5),
                fontsize=8,
            )
    frontier = pareto_frontier(group.rows_in("ranked"))
    if frontier:
        ax.step(
            [r.mean_cost_usd for r in frontier],
            [r.accuracy for r in frontier],
            where="post",
            color="tab:green",
            linestyle="--",
            linewidth=1.2,
            label="Pareto frontier (ranked runs)",
        )
    top = max(costs, default=0.0) * 3 or 1.0
    shown = sorted(((m, u) for m, u in group.budgets.items() if u <= top), key=lambda kv: kv[1])
    off = [f"{m} ${fmt_money(u)}" for m, u in group.budgets.items() if u > top]
    if off:
        ax.annotate(
            "budgets off the axis: " + ", ".join(off),
            (0.01, 0.01),
            xycoords="axes fraction",
            fontsize=7,
            color="tab:orange",
        )
    for i, (mode, usd) in enumerate(shown):
        ax.axvline(usd, color="tab:orange", linestyle=":", linewidth=1.0)
        ax.annotate(
            f"{mode} budget ${fmt_money(usd)}",
            (usd, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12 - 10 * i),
            textcoords="offset points",
            fontsize=7,
            color="tab:orange",
        )
    ax.margins(x=0.12, y=0.08)  # room for the labels at the edges
    ax.set_xlabel("mean cost per episode (USD)")
    ax.set_ylabel("accuracy")
    ax.set_title(group.title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.savefig(path, format="png")
    return path


def usage_png(group: Group, path: Path) -> Path:
    """Grouped bars: each run's usage ratio (calls / episodes) per agent."""
    rows = group.rows
    agents = group.agents or ["(no agents)"]
    fig = _figure(max(8.0, 3.2 + 1.1 * len(rows)), 4.6)
    ax = fig.add_subplot()
    width = 0.8 / len(agents)
    colors = [f"C{j % 10}" for j in range(len(agents))]
    for j, agent in enumerate(agents):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(rows))]
        ax.bar(
            xs, [r.usage.get(agent, 0.0) for r in rows], width=width, label=agent, color=colors[j]
        )
        limit = group.constraints.get(agent)
        if limit is not None:  # the pool's usage constraint of this agent (e.g. 0.25/0.5/1)
            ax.axhline(
                limit,
                color=colors[j],
                linestyle="--",
                linewidth=1.0,
                alpha=0.8,
                label=f"{agent} constraint {limit:g}",
            )
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r.display_name for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("usage ratio (calls / episodes)")
    ax.set_title(group.title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, format="png")
    return path
