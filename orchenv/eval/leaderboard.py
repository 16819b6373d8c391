"""Leaderboards from ``orchenv eval`` run directories: markdown, HTML and PNG plots.

Ranking rule (also printed at the top of ``leaderboard.md`` and ``leaderboard.html``):
runs are grouped by (env, pool, split), since numbers are only comparable on the same tasks
and agents. Within a group, controllers that do not read ground truth come first, ordered by
accuracy (higher first) with ties broken by lower mean cost per episode; privileged
controllers (marked †: they read ground truth, e.g. a simulated verifier or an oracle) follow
in their own section, ordered the same way. They bound what a controller could reach and are
never ranked against the others.

``build_leaderboard(run_dirs, out_dir)`` writes ``leaderboard.md``, ``leaderboard.html``
(self-contained: inline CSS, JS and images; no network), ``leaderboard.json`` (the rows, in
rank order) and ``accuracy_vs_cost.png`` / ``usage.png`` (one pair per group, suffixed with
the group's name, when there are several groups).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchenv.error import ConfigError, DataError
from orchenv.eval.harness import load_summary

logger = logging.getLogger(__name__)

RANKING_RULE = (
    "Ranking: runs are grouped by (env, pool, split). Within a group, controllers that do not "
    "read ground truth come first, by accuracy (higher first), ties broken by lower mean cost "
    "per episode; privileged controllers (marked †: they read ground truth) follow in their own "
    "section, ordered the same way, and are not ranked against the others. Accuracy pools every "
    "seed's episodes; the interval is a Wilson 95% interval; usage is calls per agent / episodes."
)
DAGGER = "†"

GroupKey = tuple[str, str, str]


@dataclass
class Row:
    """One run on the board (everything shown, in the units shown)."""

    run: str  # the run directory's name
    dir: str
    env_id: str
    pool: str
    split: str
    controller: str  # label: spec(kwargs)
    controller_spec: str
    privileged: bool
    seeds: list[int]
    episodes: int  # over all seeds
    accuracy: float
    ci_low: float
    ci_high: float
    mean_cost_usd: float
    mean_tokens: float
    usage: dict[str, float]
    mean_turns: float
    invalid_rate: float
    mean_reward: float
    rank: int | None = None  # 1-based among the non-privileged rows of its group

    @property
    def group(self) -> GroupKey:
        return (self.env_id, self.pool, self.split)

    @property
    def display_name(self) -> str:
        return f"{self.controller} {DAGGER}" if self.privileged else self.controller


@dataclass
class Group:
    key: GroupKey
    rows: list[Row]  # rank order: non-privileged, then privileged
    agents: list[str]
    plots: dict[str, Path] = field(default_factory=dict)  # kind -> png path

    @property
    def title(self) -> str:
        env, pool, split = self.key
        return f"{env} · pool {pool} · split {split}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", "-".join(self.key)).strip("-").lower()


@dataclass
class Leaderboard:
    groups: list[Group]
    files: list[Path]

    @property
    def rows(self) -> list[Row]:
        return [r for g in self.groups for r in g.rows]


def row_from_summary(summary: dict[str, Any]) -> Row:
    """A board row from a loaded ``summary.json`` (see ``harness.load_summary``)."""
    pooled = summary.get("pooled") or {}
    run = summary.get("run") or {}
    path = Path(summary.get("dir", "."))
    try:
        lo, hi = pooled["accuracy_ci95"]
        return Row(
            run=path.name or str(path),
            dir=str(path),
            env_id=str(pooled.get("env_id") or run.get("env_id")),
            pool=str(pooled.get("pool") or run.get("pool")),
            split=str(pooled.get("split") or run.get("split")),
            controller=str(pooled.get("controller_label") or pooled["controller"]),
            controller_spec=str(pooled.get("controller_spec") or run.get("controller")),
            privileged=bool(pooled.get("privileged", run.get("privileged", False))),
            seeds=[int(s) for s in pooled.get("seeds") or run.get("seeds") or []],
            episodes=int(pooled["episodes"]),
            accuracy=float(pooled["accuracy"]),
            ci_low=float(lo),
            ci_high=float(hi),
            mean_cost_usd=float(pooled["mean_cost_usd"]),
            mean_tokens=float(
                pooled.get("mean_tokens")
                or pooled["mean_prompt_tokens"] + pooled["mean_completion_tokens"]
            ),
            usage={str(k): float(v) for k, v in pooled["usage_ratios"].items()},
            mean_turns=float(pooled["mean_turns"]),
            invalid_rate=float(pooled["invalid_action_rate"]),
            mean_reward=float(pooled["mean_reward"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(
            f"{path / 'summary.json'} lacks a field the leaderboard needs ({exc}); "
            "regenerate it by rerunning its `orchenv eval` command"
        ) from exc


def rank_rows(rows: Iterable[Row]) -> list[Group]:
    """Group by (env, pool, split) and order each group by the ranking rule (module doc)."""
    by_group: dict[GroupKey, list[Row]] = {}
    for row in rows:
        by_group.setdefault(row.group, []).append(row)
    groups = []
    for key in sorted(by_group):
        members = by_group[key]

        def order(r: Row) -> tuple[float, float, str, str]:
            return (-r.accuracy, r.mean_cost_usd, r.controller, r.run)

        open_rows = sorted((r for r in members if not r.privileged), key=order)
        privileged = sorted((r for r in members if r.privileged), key=order)
        for i, r in enumerate(open_rows, 1):
            r.rank = i
        for r in privileged:
            r.rank = None
        agents: list[str] = []
        for r in members:
            agents.extend(a for a in r.usage if a not in agents)
        groups.append(Group(key=key, rows=open_rows + privileged, agents=agents))
    return groups


def build_leaderboard(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    title: str = "orchenv leaderboard",
    plots: bool = True,
) -> Leaderboard:
    """Read each run's summary and write the board files into ``out_dir`` (module doc)."""
    if not run_dirs:
        raise ConfigError("give at least one run directory (made by `orchenv eval --out DIR`)")
    rows = [row_from_summary(load_summary(d)) for d in run_dirs]
    groups = rank_rows(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    if plots:
        from orchenv.eval.plots import accuracy_vs_cost_png, usage_png

        for group in groups:
            suffix = "" if len(groups) == 1 else f"_{group.slug}"
            acc_path = out / f"accuracy_vs_cost{suffix}.png"
            use_path = out / f"usage{suffix}.png"
            accuracy_vs_cost_png(group, acc_path)
            usage_png(group, use_path)
            group.plots = {"accuracy_vs_cost": acc_path, "usage": use_path}
            files += [acc_path, use_path]
    from orchenv.eval.html_report import render_html

    md_path, html_path, json_path = (
        out / "leaderboard.md",
        out / "leaderboard.html",
        out / "leaderboard.json",
    )
    md_path.write_text(render_markdown(groups, title), encoding="utf-8")
    html_path.write_text(render_html(groups, title, RANKING_RULE), encoding="utf-8")
    json_path.write_text(
        json.dumps(
            [{**_row_dict(r), "group": list(r.group)} for g in groups for r in g.rows],
            indent=2,
            allow_nan=False,  # rows come from schema-checked summaries: finite numbers
        )
        + "\n",
        encoding="utf-8",
    )
    files = [md_path, html_path, json_path, *files]
    logger.info("leaderboard of %d runs in %d groups written to %s", len(rows), len(groups), out)
    return Leaderboard(groups=groups, files=files)


def _row_dict(row: Row) -> dict[str, Any]:
    from dataclasses import asdict

    return {**asdict(row), "display_name": row.display_name}


# -- formatting ---------------------------------------------------------------------------------
def fmt_money(x: float) -> str:
    """Three significant digits without scientific notation: 0.000147, 0.0213, 1.50."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(2, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def fmt_accuracy(row: Row) -> str:
    return f"{row.accuracy:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}]"


def columns(group: Group) -> list[tuple[str, str]]:
    """(key, header) of the board's columns, shared by the markdown and HTML writers."""
    cols = [
        ("rank", "#"),
        ("controller", "controller"),
        ("env", "env"),
        ("pool", "pool"),
        ("split", "split"),
        ("seeds", "seeds"),
        ("episodes", "episodes"),
        ("accuracy", "accuracy [95% CI]"),
        ("cost", "cost / episode (USD)"),
        ("tokens", "tokens / episode"),
    ]
    cols += [(f"usage:{a}", f"usage {a}") for a in group.agents]
    cols += [("turns", "turns"), ("invalid", "invalid rate"), ("run", "run")]
    return cols


def cell(row: Row, key: str) -> tuple[str, float | None]:
    """(text, sort value) of one cell; the sort value is None for text columns."""
    if key.startswith("usage:"):
        value = row.usage.get(key[6:], 0.0)
        return f"{value:.3f}", value
    table: dict[str, tuple[str, float | None]] = {
        "rank": (str(row.rank) if row.rank is not None else DAGGER, row.rank),
        "controller": (row.display_name, None),
        "env": (row.env_id, None),
        "pool": (row.pool, None),
        "split": (row.split, None),
        "seeds": (",".join(map(str, row.seeds)), float(len(row.seeds))),
        "episodes": (str(row.episodes), float(row.episodes)),
        "accuracy": (fmt_accuracy(row), row.accuracy),
        "cost": (fmt_money(row.mean_cost_usd), row.mean_cost_usd),
        "tokens": (f"{row.mean_tokens:,.0f}", row.mean_tokens),
        "turns": (f"{row.mean_turns:.2f}", row.mean_turns),
        "invalid": (f"{row.invalid_rate:.3f}", row.invalid_rate),
        "run": (row.run, None),
    }
    return table[key]


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(group: Group, rows: list[Row]) -> list[str]:
    cols = columns(group)
    lines = [
        "| " + " | ".join(_md_escape(h) for _, h in cols) + " |",
        "|" + "|".join("---:" if k not in {"controller", "run"} else "---" for k, _ in cols) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_md_escape(cell(row, k)[0]) for k, _ in cols) + " |")
    return lines


def render_markdown(groups: Sequence[Group], title: str) -> str:
    lines = [f"# {title}", "", RANKING_RULE, ""]
    for group in groups:
        lines += [f"## {group.title}", ""]
        open_rows = [r for r in group.rows if not r.privileged]
        privileged = [r for r in group.rows if r.privileged]
        lines += _md_table(group, open_rows) if open_rows else ["(no non-privileged runs)"]
        lines.append("")
        if privileged:
            lines += [
                f"### Privileged controllers {DAGGER} (read ground truth; not ranked)",
                "",
                *_md_table(group, privileged),
                "",
            ]
        for kind, path in group.plots.items():
            lines += [f"![{kind.replace('_', ' ')}]({path.name})", ""]
    return "\n".join(lines).rstrip() + "\n"
