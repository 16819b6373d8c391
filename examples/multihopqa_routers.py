"""Full-context vs static vs RCR routing on the embedded multihop generator (seed 004).

Runs the simulated Planner / Searcher / Recommender team for a few questions per
router mode and prints tokens (eq. 10) and F1, then shows one agent's routed context.

    .venv/bin/python examples/multihopqa_routers.py
"""

from __future__ import annotations

import statistics

from tqdm.auto import tqdm

from orchenv.envs.multihopqa.agents import multihop_pool
from orchenv.envs.multihopqa.env import MultihopQAGame, run_team


def main() -> None:
    for mode in ("full", "static", "rcr"):
        game = MultihopQAGame(router=mode)
        pool = multihop_pool(token_counter=game.counter)
        rows = [
            run_team(game, pool, options={"task_index": i})
            for i in tqdm(range(40), desc=f"{mode} router", unit="question", leave=False)
        ]
        tokens = statistics.fmean(r["tokens_total"] for r in rows)
        f1 = statistics.fmean(r["f1"] for r in rows)
        print(f"{mode:>6}: {tokens:7.0f} tokens per question, F1 score {f1:.3f}")
    print("\nWhat the Recommender saw in the last RCR episode:\n")
    print(game.observe("recommender"))


if __name__ == "__main__":
    main()
