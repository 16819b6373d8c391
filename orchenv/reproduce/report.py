"""What a reproduction page is made of: estimates with 95% intervals, rows that put the paper's
number beside orchenv's, checks of the paper's claims, and the markdown they render to.

A row's sentence is composed from its numbers (``Row.verdict``) followed by the seed module's
explanation (``Row.why``); an ordering, a direction or an equivalence the paper claims is
checked by ``check_order`` / ``check_direction`` / ``check_equivalence``, so every verdict on a
page is computed, never typed.

**Where a number comes from.** A row or finding names the simulator inputs it depends on
(``Source``: ``calibrated``, ``assumed`` or ``chosen``, each naming the input). Its
*provenance* is computed from them: ``mechanism`` when it depends on none (it follows from the
env's rules and the agents' behaviour), else the strongest kind among them (calibrated, then
assumed, then chosen). Only a ``mechanism`` match counts as *reproduced*; a calibrated match is
the input echoed back and is counted as ``calibrated`` (likewise ``assumed``, ``chosen``).

**Strict verdicts** (``Row.outcome``): a row *matches* only when the paper's number lies in the
interval widened by the tolerance *and* the interval's half-width is within the tolerance
(otherwise the check cannot decide: *undecided*, with the sample size that would decide it);
a difference whose sign is opposite to the paper's never matches (``signed=True``: not
reproduced when the interval excludes zero, else undecided). Ties and
overlapping intervals are no evidence of an order (*undecided*), and a "saturates" or "no
worse" claim is an equivalence test against a stated margin (``check_equivalence``).

Statuses, as counted on pages and in the index (``STATUSES``): ``reproduced`` (mechanism and
the check passes), ``calibrated`` / ``assumed`` / ``chosen`` (the check passes but the number
was put in), ``not reproduced`` (decided against), ``undecided`` (too wide or within noise).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchenv.runner import wilson_interval

Z95 = 1.959964
#: kinds of simulator inputs a number can depend on, strongest first
INPUT_KINDS = ("calibrated", "assumed", "chosen")
#: a number's provenance: ``mechanism`` or one of ``INPUT_KINDS``
PROVENANCES = ("mechanism", *INPUT_KINDS)
#: what a row or finding is counted as on a page
STATUSES = ("reproduced", *INPUT_KINDS, "not reproduced", "undecided")


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


@dataclass(frozen=True)
class Source:
    """A simulator input that a page's number depends on.

    ``kind``: ``calibrated`` (the input was set to this paper number, e.g. an agent's accuracy),
    ``assumed`` (a simulator parameter was chosen to give this direction or size), or
    ``chosen`` (a free parameter such as a budget or weight was picked for the page; ``detail``
    says where its sweep is shown). ``name`` names the input; ``detail`` gives its value.
    """

    kind: str
    name: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in INPUT_KINDS:
            raise ValueError(f"Source kind must be one of {INPUT_KINDS}, got {self.kind!r}")
        if not self.name.strip():
            raise ValueError("a Source must name its input")

    def render(self) -> str:
        return f"{self.kind}: {self.name}" + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail}


def calibrated(name: str, detail: str = "") -> Source:
    """An input set to the paper's number (the row then echoes it back)."""
    return Source("calibrated", name, detail)


def assumed(name: str, detail: str = "") -> Source:
    """A simulator parameter chosen to give the paper's direction or size."""
    return Source("assumed", name, detail)


def chosen(name: str, detail: str = "") -> Source:
    """A free parameter (budget, weight, horizon) picked for the page."""
    return Source("chosen", name, detail)


def provenance_of(sources: Sequence[Source]) -> str:
    """``mechanism`` without sources, else the strongest kind among them."""
    kinds = {source.kind for source in sources}
    return next((kind for kind in INPUT_KINDS if kind in kinds), "mechanism")


def _status(passed: bool | None, provenance: str) -> str:
    """``passed``: True (check passes), False (decided against), None (undecided)."""
    if passed is None:
        return "undecided"
    if not passed:
        return "not reproduced"
    return "reproduced" if provenance == "mechanism" else provenance


def _sources_text(sources: Sequence[Source]) -> str:
    return "; ".join(source.render() for source in sources)


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
    ``tolerance`` widens the interval for that check (and bounds the half-width an interval may
    have to decide it); ``signed``: the column is a difference whose sign must agree with the
    paper's. ``sources`` name the simulator inputs the row depends on (its provenance).
    ``why`` explains the match or the gap; it follows the computed verdict on the page.
    """

    label: str
    ours: dict[str, Cell]
    paper: dict[str, Cell] = field(default_factory=dict)
    command: str = ""
    why: str = ""
    compare: str | None = None
    tolerance: float = 0.02
    sources: tuple[Source, ...] = ()
    signed: bool = False

    @property
    def provenance(self) -> str:
        return provenance_of(self.sources)

    def outcome(self) -> tuple[bool | None, str] | None:
        """``(passed, text)`` of the strict check (``passed`` None: undecided), or ``None``
        when the row compares nothing."""
        if self.compare is None:
            return None
        theirs, ours = self.paper.get(self.compare), self.ours.get(self.compare)
        if not isinstance(theirs, (int, float)) or isinstance(theirs, bool):
            return None
        target = float(theirs)
        if isinstance(ours, Estimate):
            est = ours
        elif isinstance(ours, (int, float)) and not isinstance(ours, bool):
            est = Estimate(float(ours), float(ours), float(ours), 1)
        else:
            return False, "not reproduced: no orchenv number."
        if math.isnan(est.mean) or math.isnan(target):
            return False, "not reproduced: no orchenv number."
        tol = self.tolerance
        if not est.contains(target, tol):
            side = "above" if est.mean > target else "below"
            return False, (
                f"does not match: {abs(est.mean - target):.3f} {side} the paper's {target:.3f}."
            )
        if self.signed and target * est.mean < 0:
            if est.lo > 0 or est.hi < 0:  # the interval excludes zero: the sign is decided
                return False, (
                    f"does not match: the sign differs ({est.mean:+.3f} against the paper's "
                    f"{target:+.3f})."
                )
            return None, (
                f"undecided: the sign is not decided (the interval {est.lo:+.3f} to "
                f"{est.hi:+.3f} holds zero; the paper's {target:+.3f})."
            )
        if est.half > tol:
            need = math.ceil(est.n * (est.half / tol) ** 2) if tol > 0 else 0
            return None, (
                f"undecided: the interval (± {est.half:.3f}) is wider than the tolerance "
                f"{tol:.3f}; about {need:,} {est.over} would decide it."
            )
        return True, f"matches: the paper's {target:.3f} is within {tol:.3f} of the interval."

    @property
    def status(self) -> str:
        """What the row counts as (``STATUSES``), or ``""`` when it compares nothing."""
        result = self.outcome()
        return "" if result is None else _status(result[0], self.provenance)

    def verdict(self) -> str:
        """The computed half of the row's sentence (empty when there is nothing to compare)."""
        if self.compare is None:
            return ""
        result = self.outcome()
        if result is None:
            return "not in the paper."
        passed, text = result
        if passed and self.provenance != "mechanism":
            text += f" Not a reproduction: {_sources_text(self.sources)}."
        elif self.sources:
            text += f" Depends on {_sources_text(self.sources)}."
        return text

    def sentence(self) -> str:
        return " ".join(part for part in (self.verdict(), self.why) if part)


@dataclass(frozen=True)
class Finding:
    """A claim checked on orchenv's numbers.

    ``reproduced``: the check passed; ``decided`` False: it could not decide (intervals
    overlap, a tie, an interval wider than the margin). ``paper`` False marks orchenv's own
    claim (shown apart from the paper's). ``sources`` give the provenance as for ``Row``.
    """

    claim: str
    observed: str
    reproduced: bool
    why: str = ""
    decided: bool = True
    paper: bool = True
    sources: tuple[Source, ...] = ()

    @property
    def provenance(self) -> str:
        return provenance_of(self.sources)

    @property
    def status(self) -> str:
        passed = True if self.reproduced else (False if self.decided else None)
        return _status(passed, self.provenance)

    def with_(self, **changes: Any) -> Finding:
        """A copy with fields changed (e.g. ``sources=`` or ``paper=False``)."""
        return dataclasses.replace(self, **changes)

    def render(self) -> str:
        tail = f" {self.why}" if self.why else ""
        if self.sources:
            tail += f" Depends on {_sources_text(self.sources)}."
        return f"- **{self.status}**: {self.claim}. orchenv: {self.observed}.{tail}"


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
    hard = [b for b in broken if not b.endswith("within noise")]
    reproduced = not broken and (not strict or not (same or noise))
    return Finding(claim, observed, reproduced, why, decided=reproduced or bool(hard))


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
    if not separated:
        observed += " (within noise: the intervals overlap)"
    return Finding(claim, observed, moved and separated, why, decided=separated)


def check_difference(
    claim: str, diff: Estimate, *, up: bool, why: str = "", digits: int = 3
) -> Finding:
    """Is the difference ``diff`` (paired, e.g. by run seed) above zero (``up``) or below it,
    beyond its interval? An interval that holds zero is undecided; one entirely on the other
    side decides against."""
    passed = diff.lo > 0 if up else diff.hi < 0
    against = diff.hi < 0 if up else diff.lo > 0
    observed = f"{diff.fmt(digits)}" + ("" if passed or against else " (holds zero: undecided)")
    return Finding(claim, observed, passed, why, decided=passed or against)


def check_sweep(
    claim: str, points: Mapping[str, Finding], *, why: str = "", paper: bool = False
) -> Finding:
    """A headline checked at every point of a sweep of a free parameter (``points``: the
    point's name -> the headline's check there). It holds only when it holds at every point;
    it is decided against when it fails decidedly at some point; otherwise undecided. The
    observation names the points where it holds, fails and cannot be decided, so a headline
    that holds in part of the sweep says so. ``paper`` False by default: whether a headline
    survives orchenv's sweep is orchenv's claim, not the paper's."""
    held = [k for k, f in points.items() if f.reproduced]
    against = [k for k, f in points.items() if f.decided and not f.reproduced]
    open_ = [k for k, f in points.items() if not f.decided]
    if points and len(held) == len(points):
        head = f"holds at every point of the sweep ({', '.join(held)})"
    else:
        parts = [f"holds at {', '.join(held) or 'no point'}"]
        if against:
            parts.append(f"fails at {', '.join(against)}")
        if open_:
            parts.append(f"undecided at {', '.join(open_)}")
        head = "holds only in part of the sweep: " + "; ".join(parts)
    detail = "; ".join(f"{k}: {f.observed}" for k, f in points.items())
    reproduced = bool(points) and len(held) == len(points)
    return Finding(
        claim,
        f"{head} ({detail})",
        reproduced,
        why,
        decided=reproduced or bool(against),
        paper=paper,
    )


def check_equivalence(
    claim: str,
    a: Estimate | float,
    b: Estimate | float,
    *,
    margin: float,
    difference: Estimate | None = None,
    why: str = "",
    digits: int = 3,
) -> Finding:
    """Are ``a`` and ``b`` the same within ``margin`` ("saturates", "no worse", "on par")?

    An equivalence test, not overlap: the 95% interval of ``b - a`` (``difference`` when the
    two are paired, else the two half-widths combined in quadrature) must lie inside
    ``[-margin, margin]``. Entirely outside: not reproduced; straddling a bound: undecided.
    """
    ma = a.mean if isinstance(a, Estimate) else float(a)
    mb = b.mean if isinstance(b, Estimate) else float(b)
    if difference is not None:
        lo, hi, mean = difference.lo, difference.hi, difference.mean
    else:
        ha = a.half if isinstance(a, Estimate) else 0.0
        hb = b.half if isinstance(b, Estimate) else 0.0
        mean = mb - ma
        half = math.hypot(ha, hb)
        lo, hi = mean - half, mean + half
    inside = -margin <= lo and hi <= margin
    outside = lo > margin or hi < -margin
    observed = (
        f"{ma:.{digits}f} -> {mb:.{digits}f}, difference {mean:+.{digits}f} "
        f"[{lo:+.{digits}f}, {hi:+.{digits}f}] against the margin ± {margin:.{digits}f}"
    )
    return Finding(claim, observed, inside, why, decided=inside or outside)


def count_statuses(sections: Sequence[Section]) -> dict[str, dict[str, int]]:
    """Rows and findings per status over a page's sections (the paper's claims only for
    findings; orchenv's own claims are counted apart under ``own``)."""
    rows = dict.fromkeys(STATUSES, 0)
    findings = dict.fromkeys(STATUSES, 0)
    own = dict.fromkeys(STATUSES, 0)
    for section in sections:
        for row in section.rows:
            if row.status:
                rows[row.status] += 1
        for finding in section.findings:
            (findings if finding.paper else own)[finding.status] += 1
    return {"rows": rows, "findings": findings, "own": own}


def counts_markdown(counts: Mapping[str, Mapping[str, int]]) -> str:
    """The page's count table (rows and the paper's claims by status)."""
    head = "| | " + " | ".join(STATUSES) + " |"
    out = [head, "|" + "---|" * (len(STATUSES) + 1)]
    for key, label in (
        ("rows", "table rows"),
        ("findings", "paper's claims"),
        ("own", "orchenv's own claims"),
    ):
        if key in counts and any(counts[key].values()):
            out.append(
                f"| {label} | " + " | ".join(str(counts[key].get(s, 0)) for s in STATUSES) + " |"
            )
    return "\n".join(out)


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
        paper = [f for f in self.findings if f.paper]
        own = [f for f in self.findings if not f.paper]
        if paper:
            out += [f.render() for f in paper] + [""]
        if own:
            out += ["orchenv's own claims (not the paper's; not counted as reproductions):", ""]
            out += [f.render() for f in own] + [""]
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
                    "status": r.status,
                    "provenance": r.provenance,
                    "sources": [src.to_dict() for src in r.sources],
                    "why": r.why,
                }
                for r in self.rows
            ],
            "findings": [
                {
                    "claim": f.claim,
                    "observed": f.observed,
                    "reproduced": f.reproduced,
                    "decided": f.decided,
                    "status": f.status,
                    "paper": f.paper,
                    "provenance": f.provenance,
                    "sources": [src.to_dict() for src in f.sources],
                    "why": f.why,
                }
                for f in self.findings
            ],
            "figures": self.figures,
        }


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
