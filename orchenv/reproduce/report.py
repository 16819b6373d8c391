"""What a reproduction page is made of: estimates with 95% intervals, rows that put the paper's
number beside orchenv's, checks of the paper's claims, and the markdown they render to.

A row's sentence is composed from its numbers (``Row.verdict``: inside the interval, above or
below by how much) followed by the seed module's explanation (``Row.why``); an ordering or a
direction the paper claims is checked by ``check_order`` / ``check_direction``, so every
"matches" or "does not match" on a page is computed, never typed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchenv.runner import wilson_interval

Z95 = 1.959964


def t975(df: int) -> float:
    """The two-sided 95% Student-t quantile (scipy; the normal quantile past 1,000 dof)."""
    if df >= 1000:
        return Z95
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95% interval ``[lo, hi]`` over ``n`` values (episodes or seeds)."""

    mean: float
    lo: float
    hi: float
    n: int
    over: str = "episodes"  # what n counts: "episodes" or "seeds"

    @classmethod
    def of_values(cls, values: Iterable[float], *, over: str = "episodes") -> Estimate:
        """Normal-approximation interval over many episodes; Student t over a few seeds."""
        vals = [float(v) for v in values]
        if not vals:
            return cls(math.nan, math.nan, math.nan, 0, over)
        mean = statistics.fmean(vals)
        if len(vals) < 2:
            return cls(mean, mean, mean, 1, over)
        quantile = t975(len(vals) - 1) if over == "seeds" else Z95
        half = quantile * statistics.stdev(vals) / math.sqrt(len(vals))
        return cls(mean, mean - half, mean + half, len(vals), over)

    @classmethod
    def of_proportion(cls, successes: int, n: int) -> Estimate:
        """A success rate with its Wilson interval (well-behaved near 0 and 1)."""
        lo, hi = wilson_interval(successes, n)
        return cls(successes / n if n else math.nan, lo, hi, n)

    @classmethod
    def of_differences(cls, a: Sequence[float], b: Sequence[float]) -> Estimate:
        """The paired difference ``a - b`` (same episodes in the same order)."""
        if len(a) != len(b):
            raise ValueError(f"paired differences need equal lengths, got {len(a)} and {len(b)}")
        return cls.of_values([x - y for x, y in zip(a, b, strict=True)])

    @property
    def half(self) -> float:
        return (self.hi - self.lo) / 2

    def contains(self, value: float, slack: float = 0.0) -> bool:
        return self.lo - slack <= value <= self.hi + slack

    def fmt(self, digits: int = 3, scale: float = 1.0) -> str:
        """``0.955 ± 0.013`` (scaled, e.g. ``scale=100`` for percentages)."""
        if math.isnan(self.mean):
            return "n/a"
        m = f"{self.mean * scale:.{digits}f}"
        if self.n < 2:
            return m
        below, above = self.mean - self.lo, self.hi - self.mean
        if abs(below - above) <= 0.05 * max(below, above, 1e-12):
            return f"{m} ± {self.half * scale:.{digits}f}"
        return f"{m} [{self.lo * scale:.{digits}f}, {self.hi * scale:.{digits}f}]"

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n, "over": self.over}


Cell = Estimate | float | int | str | None


def format_cell(value: Cell, digits: int = 3, scale: float = 1.0) -> str:
    if value is None:
        return "—"
    if isinstance(value, Estimate):
        return value.fmt(digits, scale)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value * scale:.{digits}f}"
    return str(value)


@dataclass
class Row:
    """One line of a table: the paper's numbers and orchenv's for the same columns.

    ``compare`` names the column whose paper number is checked against orchenv's interval;
    ``tolerance`` widens the interval for that check (simulation is calibrated, not exact).
    ``why`` explains the match or the gap; it follows the computed verdict on the page.
    """

    label: str
    ours: dict[str, Cell]
    paper: dict[str, Cell] = field(default_factory=dict)
    command: str = ""
    why: str = ""
    compare: str | None = None
    tolerance: float = 0.02

    def verdict(self) -> str:
        """The computed half of the row's sentence (empty when there is nothing to compare)."""
        if self.compare is None:
            return ""
        theirs, ours = self.paper.get(self.compare), self.ours.get(self.compare)
        if not isinstance(theirs, (int, float)):
            return "not in the paper."
        target = float(theirs)
        if isinstance(ours, Estimate):
            est = ours
        elif isinstance(ours, (int, float)):
            est = Estimate(float(ours), float(ours), float(ours), 1)
        else:
            return "not reproduced: no orchenv number."
        if math.isnan(est.mean):
            return "not reproduced: no orchenv number."
        if est.contains(target, self.tolerance):
            return (
                f"matches: the paper's {target:.3f} is within {self.tolerance:.3f} of the interval."
            )
        side = "above" if est.mean > target else "below"
        return f"does not match: {abs(est.mean - target):.3f} {side} the paper's {target:.3f}."

    def sentence(self) -> str:
        return " ".join(part for part in (self.verdict(), self.why) if part)


@dataclass(frozen=True)
class Finding:
    """A claim of the paper checked on orchenv's numbers."""

    claim: str
    observed: str
    reproduced: bool
    why: str = ""

    def render(self) -> str:
        mark = "reproduced" if self.reproduced else "not reproduced"
        tail = f" {self.why}" if self.why else ""
        return f"- **{mark}**: {self.claim}. orchenv: {self.observed}.{tail}"


def check_order(
    claim: str,
    values: Mapping[str, Estimate | float],
    paper_order: Sequence[str],
    *,
    why: str = "",
    digits: int = 3,
    strict: bool = True,
) -> Finding:
    """Does orchenv rank ``paper_order`` (best first) the same way?

    ``strict`` (the default): every neighbour pair must be in the claimed order by its means
    with intervals that do not overlap; identical numbers and overlapping intervals are no
    evidence of an order, so the claim is then not reproduced (the observation says which
    pairs). ``strict=False`` counts overlapping pairs as ties that break no order (for a claim
    of "no worse than")."""

    def mean(v: Estimate | float) -> float:
        return v.mean if isinstance(v, Estimate) else float(v)

    def overlap(a: Estimate | float, b: Estimate | float) -> bool:
        return isinstance(a, Estimate) and isinstance(b, Estimate) and a.lo <= b.hi and b.lo <= a.hi

    broken, same, noise = [], [], []
    for better, worse in zip(paper_order, paper_order[1:], strict=False):
        a, b = values[better], values[worse]
        if math.isclose(mean(a), mean(b), rel_tol=0.0, abs_tol=1e-12):
            same.append(f"{better} = {worse}")
        elif mean(a) < mean(b):
            if not overlap(a, b):
                broken.append(f"{worse} > {better}")
            elif strict:
                broken.append(f"{worse} > {better}, within noise")
        elif overlap(a, b):
            noise.append(f"{better} ~ {worse}")
    observed = " > ".join(
        f"{k} {mean(v):.{digits}f}" for k, v in sorted(values.items(), key=lambda kv: -mean(kv[1]))
    )
    notes = [f"order broken: {', '.join(broken)}"] if broken else []
    if strict:
        notes += [f"identical: {', '.join(same)}"] if same else []
        notes += [f"within noise, the intervals overlap: {', '.join(noise)}"] if noise else []
    if notes:
        observed += f" ({'; '.join(notes)})"
    reproduced = not broken and (not strict or not (same or noise))
    return Finding(claim, observed, reproduced, why)


def check_direction(
    claim: str,
    before: Estimate | float,
    after: Estimate | float,
    *,
    up: bool,
    why: str = "",
    digits: int = 3,
) -> Finding:
    """Did the number move the way the paper says (``up`` or down), by more than its noise?"""
    b = before.mean if isinstance(before, Estimate) else float(before)
    a = after.mean if isinstance(after, Estimate) else float(after)
    moved = a > b if up else a < b
    separated = not (
        isinstance(before, Estimate)
        and isinstance(after, Estimate)
        and before.lo <= after.hi
        and after.lo <= before.hi
    )
    observed = f"{b:.{digits}f} -> {a:.{digits}f}"
    if moved and not separated:
        observed += " (within noise: the intervals overlap)"
    return Finding(claim, observed, moved and separated, why)


@dataclass
class Section:
    """One paper table or figure and orchenv's counterpart."""

    title: str
    source: str  # where in the paper, e.g. "Table 1, column M-LEval"
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    intro: str = ""
    findings: list[Finding] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)  # paths relative to the page
    notes: list[str] = field(default_factory=list)
    digits: int = 3
    scale: float = 1.0

    def to_markdown(self) -> str:
        out = [f"## {self.title}", "", f"*Paper: {self.source}.*", ""]
        if self.intro:
            out += [self.intro, ""]
        if self.rows:
            paper_cols = [c for c in self.columns if any(c in r.paper for r in self.rows)]
            head = (
                ["row"]
                + [f"{c} (paper)" for c in paper_cols]
                + [f"{c} (orchenv)" for c in self.columns]
            )
            out.append("| " + " | ".join(head) + " | what matches and why |")
            out.append("|" + "---|" * (len(head) + 1))
            for row in self.rows:
                cells = [row.label]
                cells += [
                    format_cell(row.paper.get(c), self.digits, self.scale) for c in paper_cols
                ]
                cells += [
                    format_cell(row.ours.get(c), self.digits, self.scale) for c in self.columns
                ]
                cells.append(row.sentence() or "—")
                out.append("| " + " | ".join(_escape(c) for c in cells) + " |")
            out.append("")
            commands = [(r.label, r.command) for r in self.rows if r.command]
            if commands:
                out += ["<details><summary>Commands for these rows</summary>", ""]
                out += [f"- {label}: `{command}`" for label, command in commands]
                out += ["", "</details>", ""]
        if self.findings:
            out += [f.render() for f in self.findings] + [""]
        for fig in self.figures:
            out += [f"![{self.title}]({fig})", ""]
        for note in self.notes:
            out += [note, ""]
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        def cell(v: Cell) -> Any:
            return v.to_dict() if isinstance(v, Estimate) else v

        return {
            "title": self.title,
            "source": self.source,
            "columns": self.columns,
            "rows": [
                {
                    "label": r.label,
                    "ours": {k: cell(v) for k, v in r.ours.items()},
                    "paper": {k: cell(v) for k, v in r.paper.items()},
                    "command": r.command,
                    "verdict": r.verdict(),
                    "why": r.why,
                }
                for r in self.rows
            ],
            "findings": [
                {"claim": f.claim, "observed": f.observed, "reproduced": f.reproduced, "why": f.why}
                for f in self.findings
            ],
            "figures": self.figures,
        }


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
