"""The leaderboard's row and group model and its cell formatting, shared by the writers.

``orchenv.eval.leaderboard`` builds ``Row`` and ``Group`` objects from run directories and
ranks them; ``orchenv.eval.html_report`` and ``orchenv.eval.plots`` render them. Keeping the
model here, below all three, is what keeps the renderers from importing the board builder
(issue 27 item 2b: the leaderboard <-> html_report import circle).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

RANKING_RULE = (
    "Ranking: runs are grouped by (env, pool, split). Within a group, controllers that do not "
    "read ground truth come first, by the env's primary metric (what the env pays for: the "
    "return unless the env names another, e.g. OrchMAS's F1 score; higher first, with a normal "
    "95% interval), ties broken by lower mean cost per episode; privileged controllers (marked "
    "†: they read ground truth) follow in their own section, ordered the same way, and are not "
    "ranked against the others. 'vs next' is the difference to the next row with its 95% "
    "interval, paired on the same tasks when both runs played the same (seed, episode) plan; "
    "an interval containing 0 is no evidence of order. Accuracy (Wilson 95% interval), cost and "
    "calls per episode are columns, not the ranking; usage is calls per agent / episodes."
)
VERIFIED_RULE = (
    "Verification: a run whose bundle passed `orchenv verify` (its score and cost re-derived "
    "from the env, its submitted actions and its recorded calls; docs/leaderboard.md) is marked "
    "verified and links to its report; the board trusts a verdict only when it is signed with "
    "the board's key (HMAC) or when it verified the bundle itself (`--verify`), and only a "
    "re-executed verdict ranks (`orchenv verify --rerun`: the registered controller produced "
    "the submitted actions); a replay-only verdict is listed as consistent: the log agrees "
    "with the env and the recorded calls, which does not show who chose the actions. When any run on the board is verified, only verified "
    "runs are ranked; unverified, failed and stale runs (files changed after verification) are "
    "listed apart, unranked. Overlapping intervals are not evidence of order."
)
DAGGER = "†"
CHECK = "✓"

#: (env, pool, split, variant): variant is "" for the env's default kwargs, else names the
#: kwargs (or the board spec) by hash, so a variant never ranks among default runs
GroupKey = tuple[str, str, str, str]

#: verification statuses (``orchenv.verify.checks.read_verification``), in display order
STATUSES = ("verified", "consistent", "failed", "stale", "unsigned", "unreadable", "unverified")


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
    rank: int | None = None  # 1-based among the ranked rows of its group
    verification: str = "unverified"  # one of STATUSES
    verification_reason: str = ""
    report: str | None = None  # the verification report (path relative to the board)
    audit_gap: str | None = None  # the env's gameability gap named by the verification report
    variant: str = ""  # "" (default env kwargs), "env kwargs <hash>" or "board <hash>"
    env_kwargs: dict[str, object] = field(default_factory=dict)
    metric: str = "return"  # the env's primary metric's label (orchenv.eval.metrics)
    primary: float = 0.0  # its mean over the run's episodes
    primary_low: float = 0.0
    primary_high: float = 0.0
    vs_next: str = ""  # difference to the next row of its section, with its interval
    sealed: bool = False  # played by the board on its sealed plan (`orchenv board play`)
    view: str | None = None  # RUN_DIR/view.html (`orchenv view`), relative to the board
    #: {(seed, episode): (episode seed, primary value)}; not written to leaderboard.json
    per_episode: dict[tuple[int, int], tuple[int, float]] = field(default_factory=dict, repr=False)

    @property
    def group(self) -> GroupKey:
        return (self.env_id, self.pool, self.split, self.variant)

    @property
    def display_name(self) -> str:
        return f"{self.controller} {DAGGER}" if self.privileged else self.controller

    @property
    def verified(self) -> bool:
        return self.verification == "verified"


@dataclass
class Rejected:
    """A run directory the board could not read (e.g. a NaN in its summary), and why."""

    dir: str
    reason: str


@dataclass
class Group:
    key: GroupKey
    rows: list[Row]  # display order: ranked, privileged, then unranked (unverified)
    agents: list[str]
    plots: dict[str, Path] = field(default_factory=dict)  # kind -> png path
    verified_board: bool = False  # some run on the board is verified: only those are ranked
    #: agent -> the pool's usage constraint (calls / episode), drawn on the usage plot
    constraints: dict[str, float] = field(default_factory=dict)
    #: budget mode -> USD per episode (BudgetRoute's budgets), drawn on the cost plot
    budgets: dict[str, float] = field(default_factory=dict)

    @property
    def title(self) -> str:
        env, pool, split, variant = self.key
        return f"{env} · pool {pool} · split {split}" + (f" · {variant}" if variant else "")

    @property
    def metric(self) -> str:
        """The label of the env's primary metric the group is ranked by."""
        return self.rows[0].metric if self.rows else "return"

    @property
    def header(self) -> str:
        """What every row of the group shares, said once above its table."""
        env, pool, split, variant = self.key
        kwargs = self.rows[0].env_kwargs if self.rows else {}
        shown = (
            f"{variant}: {json.dumps(kwargs, sort_keys=True)[:300]}" if kwargs else "default kwargs"
        )
        text = f"env `{env}` ({shown}), pool `{pool}`, "
        return text + f"split `{split}`; ranked by {self.metric}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", "-".join(self.key)).strip("-").lower()

    def section(self, row: Row) -> str:
        """``ranked``, ``privileged`` or ``unverified`` (listed apart, not ranked)."""
        if self.verified_board and not row.verified:
            return "unverified"
        return "privileged" if row.privileged else "ranked"

    def rows_in(self, section: str) -> list[Row]:
        return [r for r in self.rows if self.section(r) == section]

    @property
    def audit_gap(self) -> str | None:
        """The env's gameability gap (``orchenv audit``) from a verified row's report."""
        return next((r.audit_gap for r in self.rows if r.verified and r.audit_gap), None)


# -- formatting ---------------------------------------------------------------------------------
def fmt_money(x: float) -> str:
    """Three significant digits without scientific notation: 0.000147, 0.0213, 1.50."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(2, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def fmt_accuracy(row: Row) -> str:
    return f"{row.accuracy:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}]"


def fmt_primary(row: Row) -> str:
    return f"{row.primary:.3f} [{row.primary_low:.3f}, {row.primary_high:.3f}]"


def fmt_verification(row: Row) -> str:
    return f"{CHECK} verified" if row.verified else row.verification


def columns(group: Group) -> list[tuple[str, str]]:
    """(key, header) of the board's columns, shared by the markdown and HTML writers."""
    cols = [
        ("rank", "#"),
        ("controller", "controller"),
        ("verification", "verified"),
        ("primary", f"{group.metric} [95% CI]"),
        ("vs_next", "vs next [95% CI]"),
        ("accuracy", "accuracy [95% CI]"),
        ("cost", "cost / episode (USD)"),
        ("calls", "calls / episode"),
        ("seeds", "seeds"),
        ("episodes", "episodes"),
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
        "rank": (
            str(row.rank) if row.rank is not None else DAGGER if row.privileged else "-",
            row.rank,
        ),
        "controller": (row.display_name, None),
        "verification": (fmt_verification(row), None),
        "env": (row.env_id, None),
        "pool": (row.pool, None),
        "split": (row.split, None),
        "seeds": (
            "sealed" if row.sealed else ",".join(map(str, row.seeds)),
            float(len(row.seeds)),
        ),
        "episodes": (str(row.episodes), float(row.episodes)),
        "accuracy": (fmt_accuracy(row), row.accuracy),
        "primary": (fmt_primary(row), row.primary),
        "vs_next": (row.vs_next or "-", None),
        "calls": (f"{sum(row.usage.values()):.2f}", sum(row.usage.values())),
        "cost": (fmt_money(row.mean_cost_usd), row.mean_cost_usd),
        "tokens": (f"{row.mean_tokens:,.0f}", row.mean_tokens),
        "turns": (f"{row.mean_turns:.2f}", row.mean_turns),
        "invalid": (f"{row.invalid_rate:.3f}", row.invalid_rate),
        "run": (row.run, None),
    }
    return table[key]
