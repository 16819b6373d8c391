"""``orchenv reproduce SEED [--quick]``: each seed paper's headline tables and figures, rerun
in simulation, written as a page with the paper's numbers beside orchenv's.

Each seed's experiments live with its env family (``orchenv.envs.mathroute.reproduce`` for
seed 000, ``budgetroute`` 001, ``orchmas`` 002, ``puppeteer`` 003, ``multihopqa`` 004), registered
by ``orchenv.envs`` with ``register_reproduction`` (core never imports the plug-ins); a seed's
``build(rep)`` returns its ``Section``s from experiments run through a ``Reproduction``
(resumable storage, sizes, progress). This module resolves the seed,
writes ``SEED.md`` (and ``SEED.json`` with the same numbers) and returns the page's path. The
documented pages in ``docs/reproduction/`` come from full runs; ``--quick`` runs the same code
on small sizes (under 5 minutes a seed, for the tests) and writes under ``runs/`` instead.
"""

from __future__ import annotations

import contextlib
import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from orchenv.error import ConfigError
from orchenv.registry import REPRODUCTION_TITLES, REPRODUCTIONS, register_reproduction
from orchenv.reproduce.context import (
    Reproduction,
    accuracy,
    eval_command,
    metric,
    simulator_fingerprint,
)
from orchenv.reproduce.report import (
    STATUSES,
    Estimate,
    Finding,
    Row,
    Section,
    Source,
    assumed,
    calibrated,
    check_difference,
    check_direction,
    check_equivalence,
    check_order,
    check_sweep,
    chosen,
    count_statuses,
    counts_markdown,
)

#: seed id -> the plug-in's ``build`` entry point (registered by ``orchenv.envs``)
SEEDS = REPRODUCTIONS


def resolve_seed(name: str) -> str:
    """``0``, ``000``, ``seed000`` or a seed file's name (``000_492b...``) -> ``"000"``."""
    text = str(name).strip().lower().removeprefix("seed").split("_", 1)[0]
    if text.isdigit() and f"{int(text):03d}" in REPRODUCTIONS:
        return f"{int(text):03d}"
    raise ConfigError(f"unknown seed {name!r}; choose one of {', '.join(sorted(REPRODUCTIONS))}")


def reproduce(
    seed: str,
    *,
    quick: bool = False,
    runs_dir: str | Path | None = None,
    report: str | Path | None = None,
    progress: bool = True,
    seeds: Sequence[int] | None = None,
) -> Path:
    """Run seed ``seed``'s experiments (resuming what ``runs_dir`` holds) and write its page.

    Defaults: a full run stores results in ``runs/reproduce/SEED`` and writes
    ``docs/reproduction/SEED.md``; a quick run keeps both under ``runs/reproduce/SEED-quick``.
    ``seeds`` overrides the run seeds (default: 0, 1, 2; quick: 0).
    """
    sid = resolve_seed(seed)
    tag = f"{sid}-quick" if quick else sid
    runs = Path(runs_dir) if runs_dir is not None else Path("runs/reproduce") / tag
    page = (
        Path(report)
        if report is not None
        else (runs / f"{sid}.md" if quick else Path("docs/reproduction") / f"{sid}.md")
    )
    page.parent.mkdir(parents=True, exist_ok=True)
    untimed = not (runs / "timing.json").exists() and runs.is_dir() and any(runs.iterdir())
    build = REPRODUCTIONS.resolve(sid)
    module = sys.modules.get(getattr(build, "__module__", ""), None)
    module_file = getattr(module, "__file__", None)
    rep = Reproduction(
        sid,
        quick=quick,
        runs_dir=runs,
        figures_dir=page.parent / "figures",
        figures_link="figures",
        progress=progress,
        seeds=seeds,
        fingerprint=simulator_fingerprint(Path(module_file).parent if module_file else None),
    )
    short = REPRODUCTION_TITLES.get(sid, sid)
    try:
        sections: list[Section] = build(rep)
    finally:
        rep.close()
    compute_s, invocations, untimed = _add_time(runs, rep.elapsed_s, untimed)
    command = f"orchenv reproduce {sid}" + (" --quick" if quick else "")
    if seeds is not None:
        command += " --seeds " + " ".join(map(str, seeds))
    header = [
        f"# Seed {sid} reproduced in simulation: {short}",
        "",
        f"Made by `{command}` {_timing(compute_s, invocations, rep.elapsed_s, untimed)} on "
        f"{platform.machine()} (Python {platform.python_version()}), run seeds "
        f"{', '.join(map(str, rep.seeds))}. "
        "Every number in an orchenv column comes from that run; the paper columns are the "
        "seed paper's. ± is the half-width of a 95% confidence interval (over episodes, or "
        "over run seeds where a row is a training run; the row says which). "
        "Rerunning the command resumes from `runs/`.",
        "",
    ]
    counts = count_statuses(sections)
    header += [
        "**Counts** (computed from the rows' and claims' checks and provenance: only "
        "`reproduced` is a reproduction by mechanism; `calibrated`, `assumed` and `chosen` "
        "matches echo a simulator input the row names; `undecided` means the interval cannot "
        "decide):",
        "",
        counts_markdown(counts),
        "",
    ]
    intro = getattr(module, "INTRO", "")
    if intro:
        header += [intro, ""]
    if quick:
        header += [
            "**This is a `--quick` run** (small sizes for tests): its numbers are noisy and "
            "are not the documented ones.",
            "",
        ]
    body = "\n".join(header) + "\n" + "\n".join(s.to_markdown() for s in sections)
    page.write_text(body.rstrip() + "\n", encoding="utf-8")
    data = {
        "seed": sid,
        "command": command,
        "quick": quick,
        "run_seeds": rep.seeds,
        "elapsed_s": round(rep.elapsed_s, 1),
        "compute_s": round(compute_s, 1),
        "invocations": invocations,
        "counts": counts,
        "sections": [s.to_dict() for s in sections],
    }
    page.with_suffix(".json").write_text(
        json.dumps(data, indent=1, allow_nan=True) + "\n", encoding="utf-8"
    )
    if report is None and not quick:  # a documented page: keep the counts tables current
        with contextlib.suppress(ConfigError, OSError):
            write_index()
    return page


def index_table(pages_dir: str | Path = "docs/reproduction") -> str:
    """The markdown table of counts over every page's JSON twin in ``pages_dir`` (the table in
    ``docs/reproduction/README.md`` and the README): table rows and the paper's claims per
    status, per seed. Computed from the JSON, never typed."""
    pages = sorted(Path(pages_dir).glob("[0-9][0-9][0-9].json"))
    head = ["seed", "what", *STATUSES]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in pages:
        data = json.loads(path.read_text(encoding="utf-8"))
        counts = data.get("counts")
        if not isinstance(counts, dict):
            cells = " | ".join("n/a" for _ in STATUSES)
            out.append(
                f"| {path.stem} | not classified: the page predates provenance (rerun "
                f"`orchenv reproduce {path.stem}`) | {cells} |"
            )
            continue
        for key, label in (("rows", "table rows"), ("findings", "paper's claims")):
            values = counts.get(key, {})
            out.append(
                f"| {path.stem} | {label} | "
                + " | ".join(str(values.get(s, 0)) for s in STATUSES)
                + " |"
            )
    return "\n".join(out)


#: the markers around the generated counts table in the README and the reproduction index
INDEX_START = "<!-- reproduction-counts:start (orchenv reproduce index) -->"
INDEX_END = "<!-- reproduction-counts:end -->"
INDEX_FILES = ("README.md", "docs/reproduction/README.md")


def write_index(
    files: Sequence[str | Path] = INDEX_FILES, pages_dir: str | Path = "docs/reproduction"
) -> list[Path]:
    """Replace the counts table between ``INDEX_START`` and ``INDEX_END`` in ``files`` with
    ``index_table(pages_dir)`` (``orchenv reproduce index``); the files that changed."""
    table = index_table(pages_dir)
    changed = []
    for name in files:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        if INDEX_START not in text or INDEX_END not in text:
            raise ConfigError(f"{path} has no {INDEX_START!r} ... {INDEX_END!r} block")
        head, rest = text.split(INDEX_START, 1)
        _, tail = rest.split(INDEX_END, 1)
        new = f"{head}{INDEX_START}\n{table}\n{INDEX_END}{tail}"
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def count_statuses_from_dict(data: dict) -> dict[str, dict[str, int]]:
    """Counts from a page's JSON sections (for pages written before counts were stored)."""
    rows = dict.fromkeys(STATUSES, 0)
    findings = dict.fromkeys(STATUSES, 0)
    own = dict.fromkeys(STATUSES, 0)
    for section in data.get("sections", []):
        for row in section.get("rows", []):
            if row.get("status"):
                rows[row["status"]] += 1
        for finding in section.get("findings", []):
            status = finding.get("status") or (
                "reproduced" if finding.get("reproduced") else "not reproduced"
            )
            (findings if finding.get("paper", True) else own)[status] += 1
    return {"rows": rows, "findings": findings, "own": own}


def _timing(total_s: float, invocations: int, last_s: float, untimed: bool) -> str:
    if untimed:
        return (
            f"(the runs that computed its results predate timing; the last invocation, "
            f"resuming, took {last_s / 60:.1f} min)"
        )
    if invocations == 1:
        return f"in {total_s / 60:.1f} min"
    return f"in {total_s / 60:.1f} min over {invocations} invocations (resumed)"


def _add_time(runs: Path, seconds: float, untimed: bool) -> tuple[float, int, bool]:
    """Add this invocation's time to ``runs/timing.json``: a resumed run's page states the
    time all its invocations took, not only the last (which may only have read results).
    ``untimed`` (kept once set) marks results made before timing was recorded."""
    path = runs / "timing.json"
    total, count = 0.0, 0
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        stored = json.loads(path.read_text(encoding="utf-8"))
        total, count = float(stored["total_s"]), int(stored["invocations"])
        untimed = untimed or bool(stored.get("untimed", False))
    total, count = total + seconds, count + 1
    record = {"total_s": round(total, 1), "invocations": count, "untimed": untimed}
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return total, count, untimed


__all__ = [
    "SEEDS",
    "STATUSES",
    "Estimate",
    "Finding",
    "Reproduction",
    "Row",
    "Section",
    "Source",
    "accuracy",
    "assumed",
    "calibrated",
    "check_difference",
    "check_direction",
    "check_equivalence",
    "check_order",
    "check_sweep",
    "chosen",
    "count_statuses",
    "index_table",
    "write_index",
    "eval_command",
    "metric",
    "reproduce",
    "register_reproduction",
    "resolve_seed",
    "simulator_fingerprint",
]
