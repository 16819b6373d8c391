"""``orchenv audit`` on every registered id with its defaults: wall time per id.

Target: under 10 minutes per id (the issue's acceptance; the default ``time_limit_s`` of 480 s
audits fewer tasks rather than run past it, and the report says so). Ids whose env has no
discrete action set yet are listed as skipped. ``--out DIR`` also writes each report as
``DIR/<id>.md`` and ``DIR/<id>.json``.

    python benchmarks/audit_all.py [--tasks 100] [--budget 2000] [--ids orch/MathRoute-v0 ...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orchenv  # noqa: F401  (registers the ids)
from orchenv.audit import DEFAULT_BUDGET, DEFAULT_TASKS, DEFAULT_TIME_LIMIT_S, audit
from orchenv.error import ConfigError
from orchenv.registry import ENV_SUMMARIES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=DEFAULT_TASKS)
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S)
    parser.add_argument("--ids", nargs="+", default=sorted(ENV_SUMMARIES))
    parser.add_argument("--out", type=Path, help="write each report here (.md and .json)")
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    print("| env id | search | tasks | env steps per task | flagged | seconds |")
    print("|---|---|---|---|---|---|")
    for env_id in args.ids:
        start = time.perf_counter()
        try:
            report = audit(
                env_id,
                tasks=args.tasks,
                budget=args.budget,
                time_limit_s=args.time_limit or None,
                progress=False,
            )
        except ConfigError as exc:
            if "no discrete action set" not in str(exc):
                raise
            print(f"| {env_id} | skipped: no action_choices | | | | |", flush=True)
            continue
        seconds = time.perf_counter() - start
        n = len(report.task_ids)
        search = report.method + ("" if report.exact else " (lower bound)")
        flagged = ", ".join(row.name for row in report.flagged) or "none"
        print(
            f"| {env_id} | {search} | {n} | {report.search_steps / n:,.0f} | {flagged} "
            f"| {seconds:.1f} |",
            flush=True,
        )
        if args.out:
            stem = env_id.replace("/", "_")
            (args.out / f"{stem}.md").write_text(report.to_markdown(), encoding="utf-8")
            (args.out / f"{stem}.json").write_text(report.to_json() + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
