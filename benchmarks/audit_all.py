"""``orchenv audit`` on every registered id: one summary line and one report per id.

Each id is audited with the same settings (skill reference swept over the skill levels, best
blind policy, shortcuts and, unless ``--no-best-response``, the privileged best response as an
upper bound). ``--markdown FILE`` writes the summary table and every id's report (docs/audit.md's
per-id section is filled from it); ``--out DIR`` also writes each report as ``DIR/<id>.md`` and
``DIR/<id>.json``. An id that cannot be audited here (a missing optional dependency, an env
error) gets a line saying why, and the others still run. Target: under 10 minutes per id (the
default ``time_limit_s`` of 480 s audits fewer tasks rather than run past it; the report says so).

``--tells`` adds the tell meter (and the surface-feature verifier where the env has accept /
reject choices) and ``--observer-steps N`` the observer's reference (a MaskablePPO trained for
``N`` env steps; needs the ``train`` extra): two more summary columns.

    python benchmarks/audit_all.py --tasks 100 --markdown docs/audit_tables.md
    python benchmarks/audit_all.py --tasks 20 --no-best-response --ids orch/MathRoute-v0
    python benchmarks/audit_all.py --tasks 20 --no-best-response --tells --observer-steps 2048 \
        --ids orch/MathRoute-v0

``--combine DIR [DIR ...]`` audits nothing: it writes ``--markdown`` from the JSON reports that
runs with ``--out DIR`` left (ids split across processes), in ``--ids`` order; pass the same
settings flags as those runs so the header states them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import time
from pathlib import Path

import orchenv  # noqa: F401  (registers the ids)
from orchenv.audit import (
    DEFAULT_BLIND_BUDGET,
    DEFAULT_BUDGET,
    DEFAULT_TASKS,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_TOLERANCE,
    AuditReport,
    audit,
)
from orchenv.audit_tells import DEFAULT_TELL_EPISODES
from orchenv.cliargs import forward
from orchenv.error import OrchEnvError
from orchenv.registry import ENV_SUMMARIES

HEAD = (
    "| env id | tasks | realistic s | curve rises | skill@realistic | skill@1 | best blind "
    "| best shortcut | gameability gap [95% CI] | flagged (by) | upper bound "
    "| tell AUC within authors [95% CI] | observer: minus best blind; skill@realistic minus it "
    "| seconds |"
)


def retell(args: argparse.Namespace) -> int:
    """``--tells-only``: re-run the tell meter (the same episodes and seed as ``audit``) and
    replace the ``tells`` section of each ``--out`` report; refused for an id whose report
    has the surface-verifier shortcut (its row comes from the meter's classifier: re-audit)."""
    import dataclasses

    from orchenv.audit import DEFAULT_TELL_TEST_EPISODES
    from orchenv.audit_tells import SURFACE_VERIFIER, tell_meter

    if args.out is None:
        raise SystemExit("--tells-only needs --out DIR (the reports to update)")
    status = 0
    for env_id in args.ids:
        path = args.out / f"{env_id.replace('/', '_')}.json"
        if not path.is_file():
            print(f"{env_id}: no report {path}", flush=True)
            status = 1
            continue
        report = AuditReport.from_json(path.read_text(encoding="utf-8"))
        if any(row.name == SURFACE_VERIFIER for row in report.rows):
            print(f"{env_id}: has a {SURFACE_VERIFIER} row: re-audit it instead", flush=True)
            status = 1
            continue
        meter, _ = tell_meter(
            env_id,
            episodes=args.tell_episodes,
            test_episodes=max(2, min(DEFAULT_TELL_TEST_EPISODES, args.tell_episodes // 2)),
            seed=args.seed,
        )
        report.tells = dataclasses.asdict(meter)
        report.notes.append(
            f"tell meter re-measured alone (`audit_all.py --tells-only`, {_commit()})"
        )
        path.write_text(report.to_json() + "\n", encoding="utf-8")
        path.with_suffix(".md").write_text(report.to_markdown(), encoding="utf-8")
        print(f"{env_id}: {meter.line()}", flush=True)
    return status


def tell_cell(report: AuditReport) -> str:
    """The tell meter's within-author AUC with its interval (FLAG above the threshold)."""
    tells = report.tells
    if tells is None:
        return "not run"
    if not tells.get("measurable"):
        return "not measurable"
    value, ci = tells.get("auc_within"), tells.get("auc_within_ci") or []
    if value is None:
        return "– (no author with both outcomes)"
    interval = f" [{_num(ci[0])}, {_num(ci[1])}]" if len(ci) == 2 else ""
    task = tells.get("auc_within_task")
    task_text = "" if task is None else f"; task alone {_num(task)}"
    return f"{_num(value)}{interval}{task_text}" + (" **FLAG**" if tells.get("flagged") else "")


def observer_cell(report: AuditReport) -> str:
    """The observer's reference against the best blind policy and skill@realistic."""
    observer = report.observer
    if observer is None:
        return "not run"
    parts = []
    if "over_baseline" in observer:
        parts.append(_pm(*observer["over_baseline"]))
    if "gap_to_reference" in observer:
        parts.append(_pm(*observer["gap_to_reference"]))
    verdict = "learned" if observer.get("beyond_baseline") else "not learned"
    return "; ".join(parts) + f" ({verdict}, {observer['steps']:,} steps)"


def _num(value: float) -> str:
    return f"{round(value, 3) + 0.0:.3f}"  # no "-0.000"


def _pm(mean: float, ci: float) -> str:
    return f"{_num(mean)} ± {_num(ci)}"


def summary_line(report: AuditReport, seconds: float) -> str:
    """One row of the summary table."""
    reference, top = report.reference, report.skill_row(1.0)
    shortcuts = [r for r in report.rows if r.kind in ("env", "generic")]
    best_short = max(shortcuts, key=lambda r: r.return_mean) if shortcuts else None
    blind = next((r for r in report.rows if r.kind == "blind"), None)
    gap = report.gameability_gap
    realistic = f"{report.realistic_skill:g}" + (" (default)" if report.realistic_defaulted else "")
    cells = [
        f"`{report.env_id}`",
        str(len(report.task_ids)),
        realistic if report.skill_available else "no skill reference",
        {True: "yes", False: "**no**", None: "–"}[report.skill_rises],
        _pm(reference.return_mean, reference.return_ci) if reference else "–",
        _pm(top.return_mean, top.return_ci) if top else "–",
        _pm(blind.return_mean, blind.return_ci) if blind else "–",
        f"{best_short.name} {_pm(best_short.return_mean, best_short.return_ci)}"
        if best_short
        else "–",
        f"{_num(gap['mean'])} [{_num(gap['ci95'][0])}, {_num(gap['ci95'][1])}] vs {gap['against']}"
        if gap
        else "–",
        ", ".join(f"{r.name} ({', '.join(r.flagged_by)})" for r in report.flagged) or "none",
        _pm(report.best.return_mean, report.best.return_ci)
        + ("" if report.exact else " (lower bound)")
        if report.best
        else "not searched",
        tell_cell(report),
        observer_cell(report),
        f"{seconds:.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=DEFAULT_TASKS)
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--blind-budget", type=int, default=DEFAULT_BLIND_BUDGET)
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE)
    parser.add_argument("--skill-levels", type=float, nargs="+", default=None)
    parser.add_argument("--no-best-response", action="store_true")
    parser.add_argument("--tells", action="store_true", help="run the tell meter")
    parser.add_argument("--tell-episodes", type=int, default=DEFAULT_TELL_EPISODES)
    parser.add_argument("--observer-steps", type=int, default=0, help="0: no observer")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ids", nargs="+", default=sorted(ENV_SUMMARIES))
    parser.add_argument("--out", type=Path, help="write each report here (.md and .json)")
    parser.add_argument("--markdown", type=Path, help="write the summary and every report here")
    parser.add_argument("--note", default="", help="a sentence added to the markdown's header")
    parser.add_argument(
        "--combine", type=Path, nargs="+", help="merge the JSON reports in these --out folders"
    )
    parser.add_argument(
        "--tells-only",
        action="store_true",
        help="re-measure only the tell meter into the reports already in --out (ids without "
        "an accept/reject decision, where the meter's classifier plays no shortcut)",
    )
    args = parser.parse_args(argv)
    if args.tells_only:
        return retell(args)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    lines, reports, failed = [HEAD, "|" + "---|" * HEAD.count(" | ") + "---|"], [], []
    print("\n".join(lines), flush=True)
    if args.combine:
        found = {}
        for folder in args.combine:
            for path in sorted(folder.glob("*.json")):
                report = AuditReport.from_json(path.read_text(encoding="utf-8"))
                found[report.env_id] = report
        for env_id in [i for i in args.ids if i in found] + sorted(set(found) - set(args.ids)):
            report = found[env_id]
            reports.append(report)
            lines.append(summary_line(report, report.elapsed_s))
            print(lines[-1], flush=True)
        for env_id in [i for i in args.ids if i not in found]:
            failed.append(env_id)
            lines.append(
                f"| `{env_id}` | not audited: no report in {', '.join(map(str, args.combine))} |"
            )
    for env_id in [] if args.combine else args.ids:
        start = time.perf_counter()
        try:
            report = audit(
                env_id,
                **forward(args, "tasks", "seed", "tolerance", "budget", "blind_budget"),
                skill_levels=args.skill_levels,
                best_response=not args.no_best_response,
                tells=args.tells,
                tell_episodes=args.tell_episodes,
                observer_steps=args.observer_steps,
                time_limit_s=args.time_limit or None,
                progress=False,
            )
        except (OrchEnvError, ImportError) as exc:  # one id's failure must not stop the rest
            line = f"| `{env_id}` | not audited: {type(exc).__name__}: {str(exc)[:200]} |"
            failed.append(env_id)
            lines.append(line)
            print(line, flush=True)
            continue
        line = summary_line(report, time.perf_counter() - start)
        lines.append(line)
        reports.append(report)
        print(line, flush=True)
        if args.out:
            stem = env_id.replace("/", "_")
            (args.out / f"{stem}.md").write_text(report.to_markdown(), encoding="utf-8")
            (args.out / f"{stem}.json").write_text(report.to_json() + "\n", encoding="utf-8")
    if args.markdown:
        settings = (
            f"`python benchmarks/audit_all.py --tasks {args.tasks} --seed {args.seed}"
            + (" --no-best-response" if args.no_best_response else "")
            + (f" --tells --tell-episodes {args.tell_episodes}" if args.tells else "")
            + (f" --observer-steps {args.observer_steps}" if args.observer_steps else "")
            + (
                " --skill-levels " + " ".join(f"{s:g}" for s in args.skill_levels)
                if args.skill_levels
                else ""
            )
            + (" --out DIR` in parallel runs merged by `--combine" if args.combine else "")
            + f"` (tolerance {args.tolerance:g}, blind budget {args.blind_budget}, search "
            f"budget {args.budget}); commit {_commit()}, "
            f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC."
        )
        text = [
            "# `orchenv audit` on every registered id",
            "",
            "Generated by " + settings + " Columns: returns are mean ± 95% interval over the "
            "tasks; the gameability gap is skill@1 minus the best blind or shortcut policy, "
            "paired by task; flags name the comparison level reached; the upper bound is the "
            "privileged best response (it sees the future; never the comparison)."
            + (f" {args.note}" if args.note else ""),
            "",
            *lines,
            "",
        ]
        for report in reports:
            text += [report.to_markdown().replace("### ", "## ", 1), ""]
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("\n".join(text), encoding="utf-8")
    if failed:
        print(f"not audited: {', '.join(failed)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
