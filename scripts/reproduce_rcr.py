"""Seed 004 in simulation: full-context vs static vs RCR routing on the embedded multihop generator.

Runs the three-role team (Planner, Searcher, Recommender; simulated pool agents) on the test
split for each router mode, plus ablations (Algorithm 1's overflow rule, the stage term, the
per-agent budget as in the paper's Table 3, the rounds T), over several seeds, and writes a
markdown table and the raw numbers.

    scripts/reproduce_rcr.sh          # sets up .venv, then --episodes 300 --seeds 0 1 2 --out docs/rcr

Seed ``s`` builds its own question set (``SyntheticMultihopSource(seed=s)``) and its own agents'
luck (``multihop_pool(seed=s)``); every setting plays the same (seed, question) episodes, so
differences are paired. Means come with 95% confidence intervals (normal approximation over
all episodes, which are independent across questions and seeds); "vs full" differences are
paired by episode. The simulated judge derives its 1-5 score from the answer's F1, so that
column is labelled "from F1", not answer quality. Every number comes from this run; nothing is
copied from the paper.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from tqdm import tqdm

from orchenv.envs.multihopqa.agents import multihop_pool
from orchenv.envs.multihopqa.env import MultihopQAGame, run_team
from orchenv.memory import RoutingSettings

METRICS = (
    "tokens_total",
    "f1",
    "em",
    "precision",
    "recall",
    "answer_quality",
    "answer_quality_from_f1",
    "latency_parallel_s",
    "latency_serial_s",
)
ROUTING_FIELDS = frozenset(f.name for f in fields(RoutingSettings))
#: z of a two-sided 95% interval (normal approximation; hundreds of episodes per setting)
Z95 = 1.959964
#: the per-agent budgets of the Table 3 style sweep (every role gets the same B_i)
BUDGETS = (64, 128, 256, 384, 512, 1024)
UNIFORM = {"planner": 0, "searcher": 0, "recommender": 0}


def run_setting(
    label: str, episodes: int, seeds: Sequence[int], setting: Mapping[str, Any]
) -> dict[str, Any]:
    """Every (seed, question) episode of one game configuration: per-episode metrics.

    ``setting`` holds ``MultihopQAGame`` arguments and ``RoutingSettings`` fields (such as
    ``beta_base``) side by side, with the number of rounds T as ``rounds`` (the paper's
    name), as results.json records them.
    """
    routing = {k: v for k, v in setting.items() if k in ROUTING_FIELDS}
    game_kwargs = {
        ("max_turns" if k == "rounds" else k): v
        for k, v in setting.items()
        if k not in ROUTING_FIELDS
    }
    rows = []
    for seed in seeds:
        game = MultihopQAGame(**game_kwargs, routing=routing, task_source_kwargs={"seed": seed})
        pool = multihop_pool(seed=seed, token_counter=game.counter)
        for i in tqdm(range(episodes), desc=f"{label} (seed {seed})", unit="ep", leave=False):
            rows.append({"seed": seed, **run_team(game, pool, options={"task_index": i})})
    return {"label": label, "setting": dict(setting), "rows": rows}


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (0 for fewer than two values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, Z95 * statistics.stdev(values) / math.sqrt(len(values))


def summarize(run: Mapping[str, Any], reference: Mapping[str, Any] | None) -> dict[str, Any]:
    """Means with 95% CIs, per-seed means, and paired differences from ``reference``."""
    rows = run["rows"]
    out: dict[str, Any] = {"label": run["label"], **run["setting"], "episodes": len(rows)}
    for key in METRICS:
        values = [r[key] for r in rows if r.get(key) is not None]
        if not values:
            out[key] = None
            continue
        out[key], out[f"{key}_ci95"] = mean_ci(values)
    seeds = sorted({r["seed"] for r in rows})
    out["f1_per_seed"] = {
        str(s): statistics.fmean(r["f1"] for r in rows if r["seed"] == s) for s in seeds
    }
    if reference is not None:
        ref = reference["rows"]
        for key in ("f1", "tokens_total"):
            diffs = [a[key] - b[key] for a, b in zip(rows, ref, strict=True)]
            out[f"{key}_vs_full"], out[f"{key}_vs_full_ci95"] = mean_ci(diffs)
    return out


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = (
        "| setting | tokens (K) | tokens vs full | F1 | F1 vs full (paired) | F1 by seed | EM | "
        "quality from F1 (1-5) | latency parallel (s) | latency serial (s) |"
    )
    lines = [head, "|" + "---|" * 10]
    for row in rows:
        tokens = f"{row['tokens_total'] / 1000:.2f} ± {row['tokens_total_ci95'] / 1000:.2f}"
        saving = f1_diff = "-"
        if "f1_vs_full" in row:
            full_tokens = row["tokens_total"] - row["tokens_total_vs_full"]
            change, ci = (
                100 * row[k] / full_tokens
                for k in ("tokens_total_vs_full", "tokens_total_vs_full_ci95")
            )
            saving = f"{change:+.1f}% ± {ci:.1f}"
            f1_diff = f"{100 * row['f1_vs_full']:+.1f} ± {100 * row['f1_vs_full_ci95']:.1f}"
        quality = row.get("answer_quality") or row.get("answer_quality_from_f1")
        by_seed = " / ".join(f"{100 * v:.1f}" for v in row["f1_per_seed"].values())
        lines.append(
            f"| {row['label']} | {tokens} | {saving} | "
            f"{100 * row['f1']:.1f} ± {100 * row['f1_ci95']:.1f} | {f1_diff} | {by_seed} | "
            f"{100 * row['em']:.1f} | {quality:.2f} | {row['latency_parallel_s']:.2f} | "
            f"{row['latency_serial_s']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300, help="questions per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("docs/rcr"))
    parser.add_argument("--no-ablations", action="store_true")
    args = parser.parse_args(argv)
    started = time.monotonic()

    base: dict[str, Any] = {"split": "test", "rounds": 3}

    def run(label: str, **setting: Any) -> dict[str, Any]:
        return run_setting(label, args.episodes, args.seeds, {**base, **setting})

    full = run("full", router="full")
    runs = {"main": [full, run("static", router="static"), run("rcr", router="rcr")]}
    if not args.no_ablations:
        rcr = runs["main"][2]
        runs["overflow"] = [rcr, run("rcr, on_overflow=skip", router="rcr", on_overflow="skip")]
        runs["stage"] = [
            rcr,
            run("rcr, no stage term (w2 = 0)", router="rcr", weights=(0.5, 0.0, 1.0)),
        ]
        runs["budget"] = [
            run(f"rcr, B_i = {b} for every role", router="rcr", beta_base=b, budget_offsets=UNIFORM)
            for b in BUDGETS
        ]
        runs["rounds"] = [
            rcr if t == 3 else run(f"rcr, T={t}", router="rcr", rounds=t) for t in range(1, 6)
        ]
    summaries = {
        name: [summarize(r, None if r is full else full) for r in group]
        for name, group in runs.items()
    }
    elapsed = time.monotonic() - started
    titles = {
        "main": "Router modes (T = 3)",
        "overflow": "Algorithm 1 line 18: stop at the first item that does not fit (default) vs skip it",
        "stage": "The stage term of appendix E (S_t from the round: planning, retrieval, decision)",
        "budget": "Per-agent budget, the same B_i for every role (Table 3 style, T = 3)",
        "rounds": "Rounds T (the full-context reference stays at T = 3)",
    }
    sections = []
    for name, rows in summaries.items():
        sections += [f"## {titles[name]}", "", table(rows), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = " ".join(map(str, args.seeds))
    command = (
        f"scripts/reproduce_rcr.sh --episodes {args.episodes} --seeds {seeds} --out {args.out}"
    )
    header = (
        f"Made by `{command}` in {elapsed / 60:.1f} min: {args.episodes} test questions per "
        f"seed, seeds {seeds} ({args.episodes * len(args.seeds)} episodes per setting). "
        '± is the half-width of a 95% confidence interval; "vs full" differences are paired '
        "by episode; \"F1 by seed\" lists each seed's mean, in seed order. The simulated judge scores 1-5 from the answer's F1, so that column is "
        "not an LLM judge's answer quality.\n\n"
        "Defaults: RCR budgets B_i = 384 / 128 / 384 (Planner / Searcher / Recommender), "
        'weights (0.5, 1, 1), decay 1.0, on_overflow="stop".\n'
    )
    (args.out / "results.md").write_text(header + "\n" + "\n".join(sections))
    payload = {"command": command, "elapsed_s": round(elapsed, 1), **summaries}
    (args.out / "results.json").write_text(json.dumps(payload, indent=1))
    print("\n".join(sections))
    rcr_row, full_tokens = summaries["main"][2], summaries["main"][0]["tokens_total"]
    print(
        f"RCR vs full: tokens {100 * rcr_row['tokens_total_vs_full'] / full_tokens:+.1f}%, "
        f"F1 {100 * rcr_row['f1_vs_full']:+.1f} ± {100 * rcr_row['f1_vs_full_ci95']:.1f} "
        f"({elapsed:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
