"""Seed 004 in simulation: full-context vs static vs RCR routing on the embedded multihop generator.

Runs the three-role team (Planner, Searcher, Recommender; simulated pool
agents) on the test split for each router mode, plus the paper's ablations
(per-agent budget, rounds T), and writes a markdown table and the raw numbers.

    scripts/reproduce_rcr.sh          # sets up .venv, then --episodes 300 --seed 0 --out docs/rcr

Every number comes from this run; nothing is copied from the paper.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Mapping
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
    "latency_parallel_s",
    "latency_serial_s",
)
ROUTING_FIELDS = frozenset(f.name for f in fields(RoutingSettings))


def evaluate(label: str, episodes: int, seed: int, setting: Mapping[str, Any]) -> dict[str, Any]:
    """Mean metrics over the first ``episodes`` test tasks with one game configuration.

    ``setting`` holds ``MultihopQAGame`` arguments and ``RoutingSettings`` fields (such
    as ``beta_base``) side by side, with the number of rounds T as ``rounds`` (the
    paper's name), as results.json records them.
    """
    routing = {k: v for k, v in setting.items() if k in ROUTING_FIELDS}
    game_kwargs = {
        ("max_turns" if k == "rounds" else k): v
        for k, v in setting.items()
        if k not in ROUTING_FIELDS
    }
    game = MultihopQAGame(**game_kwargs, routing=routing)
    pool = multihop_pool(seed=seed, token_counter=game.counter)
    rows = [
        run_team(game, pool, options={"task_index": i})
        for i in tqdm(range(episodes), desc=label, unit="episode", leave=False)
    ]
    summary: dict[str, Any] = {"label": label, "episodes": episodes, **dict(setting)}
    for key in METRICS:
        values = [r[key] for r in rows if r[key] is not None]
        summary[key] = statistics.fmean(values) if values else None
    return summary


def table(rows: list[dict[str, Any]], reference: dict[str, Any] | None = None) -> str:
    head = "| setting | tokens (K) | vs full | F1 | EM | precision | recall | quality (1-5) | latency parallel (s) | latency serial (s) |"
    lines = [head, "|" + "---|" * 10]
    for row in rows:
        saving = "-"
        if reference and row is not reference:
            change = 1 - row["tokens_total"] / reference["tokens_total"]
            saving = f"{100 * abs(change):.1f}% {'fewer' if change >= 0 else 'more'}"
        lines.append(
            f"| {row['label']} | {row['tokens_total'] / 1000:.2f} | {saving} | {100 * row['f1']:.1f} | "
            f"{100 * row['em']:.1f} | {100 * row['precision']:.1f} | {100 * row['recall']:.1f} | "
            f"{row['answer_quality']:.2f} | {row['latency_parallel_s']:.2f} | {row['latency_serial_s']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("docs/rcr"))
    parser.add_argument("--no-ablations", action="store_true")
    args = parser.parse_args(argv)

    base: dict[str, Any] = {"split": "test", "rounds": 3}
    main_rows = [
        evaluate(f"{mode}", args.episodes, args.seed, {**base, "router": mode})
        for mode in ("full", "static", "rcr")
    ]
    full = main_rows[0]
    sections = ["## Router modes (T = 3)", "", table(main_rows, full), ""]
    ablations: dict[str, list[dict[str, Any]]] = {}
    if not args.no_ablations:
        ablations["budget"] = [
            evaluate(
                f"rcr, beta_base={b}",
                args.episodes,
                args.seed,
                {**base, "router": "rcr", "beta_base": b},
            )
            for b in (128, 256, 512, 1024, 2048)
        ]
        ablations["rounds"] = [
            evaluate(
                f"rcr, T={t}", args.episodes, args.seed, {**base, "router": "rcr", "rounds": t}
            )
            for t in (1, 2, 3, 4, 5)
        ]
        sections += ["## RCR budget ablation (T = 3)", "", table(ablations["budget"], full), ""]
        sections += ["## RCR rounds ablation", "", table(ablations["rounds"], full), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    command = (
        f"scripts/reproduce_rcr.sh --episodes {args.episodes} --seed {args.seed} --out {args.out}"
    )
    (args.out / "results.md").write_text(f"Made by `{command}`.\n\n" + "\n".join(sections))
    (args.out / "results.json").write_text(json.dumps({"main": main_rows, **ablations}, indent=1))
    print("\n".join(sections))
    rcr = main_rows[2]
    saving = 1 - rcr["tokens_total"] / full["tokens_total"]
    print(
        f"RCR vs full: {100 * saving:.1f}% fewer tokens, F1 {100 * rcr['f1']:.1f} vs {100 * full['f1']:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
